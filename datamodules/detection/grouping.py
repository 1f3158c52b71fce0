"""Batch samplers of detection splits: aspect-ratio groups in training, each image once in
evaluation.

:class:`GroupedBatchSampler` batches images of one aspect-ratio group, as torchvision's
``references/detection`` ``GroupedBatchSampler`` does (groups from
:func:`aspect_ratio_groups`, torchvision's ``create_aspect_ratio_groups``), but as core's
samplers do everything else: one permutation per epoch from ``seed + epoch`` on every rank,
disjoint shares, the same number of batches on every rank, and exact resume (elastic resume
on another world size re-cuts the rest of the interrupted epoch in plain batches).
torchvision's sampler instead repeats images to fill a group's last batch and gives ranks
different batch counts.

:class:`ExactEvalSampler` never repeats an image to even out the ranks: every image of an
evaluation split is seen once across ranks, so a metric gathered over ranks equals the
single-process one. A rank may then have one batch fewer than another (or none).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from datamodules.core.samplers import IndexBatchSampler

__all__ = ["ExactEvalSampler", "GroupedBatchSampler", "aspect_ratio_groups"]


def aspect_ratio_groups(ratios: np.ndarray, factor: int = 0) -> np.ndarray:
    """The group of each width / height ratio, as torchvision's ``create_aspect_ratio_groups``:
    ``factor`` 0 gives two groups (portrait, the rest); ``k`` gives ``2k + 2`` groups with
    edges ``2 ** linspace(-1, 1, 2k + 1)``."""
    bins = [1.0] if factor == 0 else (2.0 ** np.linspace(-1, 1, 2 * factor + 1)).tolist()
    return np.searchsorted(np.asarray(bins), np.asarray(ratios), side="right").astype(np.int64)


def _split_largest(batches: list[torch.Tensor]) -> None:
    k = max(range(len(batches)), key=lambda j: (len(batches[j]), j))
    batch = batches[k]
    half = (len(batch) + 1) // 2
    batches[k : k + 1] = [batch[:half], batch[half:]]


def _merge_smallest(batches: list[torch.Tensor]) -> None:
    order = sorted(range(len(batches)), key=lambda j: (len(batches[j]), j))
    a, b = sorted(order[:2])
    batches[a] = torch.cat([batches[a], batches[b]])
    del batches[b]


class GroupedBatchSampler(IndexBatchSampler):
    """Batches of one aspect-ratio group, DDP-even and resumable.

    Each rank takes its share of the epoch's permutation (every ``world``-th image), walks it
    and emits a group's batch when it holds ``batch_size`` images; the groups' partial batches
    follow. Every rank yields ``ceil(ceil(N / W) / batch_size) + G - 1`` batches (``G`` groups
    present; at most ``floor(N / W)``), splitting its largest batches to get there, so an
    epoch's length never depends on its permutation. With ``drop_last`` each group's partial
    batch is dropped and every rank yields ``floor(floor(N / W) / batch_size) - (G - 1)``
    full batches (a rank with more drops its last ones).

    Args:
        groups: The group of each position of the split (int64).
        batch_size: Images per batch.
        **kwargs: :class:`~datamodules.core.samplers.IndexBatchSampler`'s.
    """

    def __init__(self, groups: torch.Tensor, batch_size: int, **kwargs: Any) -> None:
        self.groups = torch.as_tensor(groups, dtype=torch.int64)
        self.num_groups = max(1, len(torch.unique(self.groups)))
        super().__init__(len(self.groups), batch_size, **kwargs)

    def _configure_layout(self) -> None:
        super()._configure_layout()
        n, world, size = self.dataset_size, self.num_replicas, self.batch_size
        extra = self.num_groups - 1
        if self.drop_last:
            self._num_batches = max(0, (n // world) // size - extra)
        else:
            base = self._num_batches
            self._num_batches = max(base, min(base + extra, n // world))

    def _batches_from(self, perm: torch.Tensor, rank: int) -> list[torch.Tensor]:
        share = perm[rank :: self.num_replicas].to(torch.int64)
        groups = self.groups[share].tolist()
        size, target = self.batch_size, self._num_batches
        buffers: dict[int, list[int]] = {}
        batches: list[torch.Tensor] = []
        for index, group in zip(share.tolist(), groups, strict=True):
            buffer = buffers.setdefault(group, [])
            buffer.append(index)
            if len(buffer) == size:
                batches.append(torch.tensor(buffer, dtype=torch.int64))
                buffers[group] = []
        if self.drop_last:
            return batches[:target]
        batches += [torch.tensor(b, dtype=torch.int64) for _, b in sorted(buffers.items()) if b]
        while len(batches) > target:  # only on tiny splits: more groups than batches
            _merge_smallest(batches)
        while len(batches) < target and any(len(b) > 1 for b in batches):
            _split_largest(batches)
        missing = target - len(batches)
        if missing > 0:  # fewer images than batches (N < W): repeat the first, as core does
            batches += [perm[j : j + 1].to(torch.int64) for j in range(missing)]
        return batches

    def position_layout(self, epoch: int) -> list[list[torch.Tensor]]:
        perm = self.permutation(epoch).to(torch.int64)
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(len(perm), dtype=torch.int64)
        return [[inverse[b] for b in self._batches_from(perm, r)] for r in range(self.num_replicas)]


class ExactEvalSampler(IndexBatchSampler):
    """Core's sampler for evaluation, never topping a rank up with repeated images.

    Rank ``r`` holds ``ceil(N / W)`` or ``floor(N / W)`` images; it yields
    ``ceil(ceil(N / W) / batch_size)`` batches, or fewer when it holds fewer images than that
    (then one image a batch, and no batch at all for a rank without images).
    """

    def _configure_layout(self) -> None:
        super()._configure_layout()
        if not self.drop_last:
            self._num_batches = min(self._num_batches, self._share_size())
