"""BucketBatchSampler: batches of similar lengths, by sample count or by token budget.

The length-aware sampler of :class:`~datamodules.TextDataModule` (and of any DataModule whose
samples have lengths). It subclasses :class:`~datamodules.core.samplers.IndexBatchSampler`, so
it keeps that sampler's guarantees: Lightning leaves it alone under DDP, every rank gets a
disjoint share and the same number of batches, and a mid-epoch position resumes exactly.
Each epoch's batches come from :class:`~datamodules.core.length_plan.LengthPlan` (shared with
the duration batches of mixtures); :func:`pack_by_tokens` (greedy batches under a token budget)
lives there, :func:`split_into_pieces` (more batches from fewer, largest pieces first) in
:mod:`datamodules.core.elastic`.
"""

from __future__ import annotations

import copy
import hashlib
import math
from typing import Any

import numpy as np
import torch

from datamodules.core.checks import check_bool, check_choice, check_int
from datamodules.core.elastic import Segment, split_into_pieces
from datamodules.core.length_plan import LengthPlan, pack_by_tokens
from datamodules.core.samplers import IndexBatchSampler

__all__ = ["BATCH_BY", "BucketBatchSampler", "pack_by_tokens"]

BATCH_BY: tuple[str, ...] = ("samples", "tokens")
#: Slack over the probed batch count of a token budget (see BucketBatchSampler): 1% + 2 batches.
_TOKEN_SLACK = (0.01, 2)


def _as_lengths(lengths: Any) -> torch.Tensor:
    """Returns ``lengths`` (ints >= 0: a sequence, numpy array or tensor) as a 1-D int64 tensor."""
    if isinstance(lengths, torch.Tensor):
        tensor = lengths
    else:
        try:
            tensor = torch.as_tensor(np.asarray(lengths))
        except (TypeError, ValueError) as error:
            raise TypeError(f"lengths is not a sequence of ints: {error}") from error
    if tensor.dim() != 1 or (
        tensor.numel()
        and (tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool)
    ):
        raise TypeError(
            f"lengths must be a 1-D sequence of ints (one per sample), got {tensor.dtype} of "
            f"shape {tuple(tensor.shape)}."
        )
    tensor = tensor.to(torch.int64)
    if tensor.numel() and int(tensor.min()) < 0:
        position = int(torch.argmin(tensor))
        raise ValueError(f"lengths[{position}]={int(tensor[position])} is negative.")
    return tensor


class BucketBatchSampler(IndexBatchSampler):
    """Batches of similar lengths, by sample count or by token budget; DDP-even and resumable.

    Yields int64 index tensors (positions ``0 .. len(lengths) - 1``), like
    :class:`IndexBatchSampler`, of which it is a subclass (so Lightning keeps it under DDP).
    Every epoch is computed from ``seed + epoch`` alone, identically on every rank:

    1. **Order.** With ``shuffle``, a random permutation; else the given order.
    2. **Buckets** (``bucket=True``). With ``shuffle``, the permutation is cut into pools of
       about ``pool_batches`` batches and each pool is sorted by length (a stable sort, so equal
       lengths stay in random order); without ``shuffle`` (evaluation), the whole split is
       sorted by length, shortest first.
    3. **Batches.** ``batch_by="samples"``: consecutive runs of ``batch_size`` (pools are whole
       multiples of ``batch_size``, so only the very last batch can be short).
       ``batch_by="tokens"``: consecutive runs, each as long as ``size x longest <= max_tokens``
       allows (and ``size <= batch_size`` if given), never across a pool boundary. A sample's
       length counts as at least 1 and is rounded up to ``pad_to_multiple_of``, so the budget
       holds for the padded tensor itself.
    4. **Batch order.** With ``shuffle`` and ``bucket``, the batches are shuffled.
    5. **Ranks.** The epoch needs ``W x K`` batches for ``W`` ranks of ``K`` batches each. If it
       has fewer, the largest batches are split in two (their halves stay adjacent) until it has
       exactly ``W x K``; no sample is repeated or dropped. Batch ``j`` then goes to rank
       ``j mod W``. Only when there are fewer samples than ``W x K`` (e.g. fewer samples than
       ranks) do single-sample batches repeat samples from the start of the order;
       :attr:`num_padded` counts them. With ``drop_last`` (samples only), the short batch and
       the last ``(batches mod W)`` batches are dropped instead (:attr:`num_dropped`).

    ``K`` is the same every epoch. By samples, ``K = ceil(ceil(N / batch_size) / W)`` (as for
    :class:`IndexBatchSampler`). By tokens, the batch count of a shuffled epoch varies a little
    with the pools, so ``K`` is fixed at construction from the larger count of epochs 0 and 1
    plus a slack of 1% + 2 batches (none with a single pool, whose count never varies); an
    epoch that still needs more batches is re-pooled with pools twice as large until it fits
    (a full sort always fits: it needs the fewest batches).
    Without ``shuffle`` every epoch is the same and ``K`` is exact.

    Args:
        lengths: Length (e.g. tokens) of each sample, ints >= 0.
        batch_size: Samples per batch for ``batch_by="samples"``; for ``"tokens"`` an optional
            cap on samples per batch (None: only the budget limits it).
        batch_by: ``"samples"`` or ``"tokens"``.
        max_tokens: The token budget per batch, required for ``batch_by="tokens"``.
        bucket: Group samples of similar length (see above); False keeps plain random or
            sequential batches. A shuffled token budget needs ``bucket=True``.
        pool_batches: Batches per pool when bucketing a shuffled epoch. Larger pools pad less,
            smaller pools mix more; pools are near-equal in size.
        pad_to_multiple_of: Round lengths up to a multiple of this for the budget (match the
            collate's ``pad_to_multiple_of``).
        shuffle: New order every epoch; False gives the same batches every epoch.
        drop_last: Drop the short batch and the batches that do not divide among ranks
            (``batch_by="samples"`` only).
        seed: Base seed; epoch ``e`` uses ``seed + e``.
        num_replicas: World size (default: the process group's, else 1).
        rank: Global rank (default: the process group's, else 0).

    Raises:
        ValueError: For bad arguments, or (``batch_by="tokens"``) a sample whose length alone
            exceeds ``max_tokens``; the message gives its position and length.
    """

    def __init__(
        self,
        lengths: Any,
        batch_size: int | None = 32,
        *,
        batch_by: str = "samples",
        max_tokens: int | None = None,
        bucket: bool = True,
        pool_batches: int = 1000,
        pad_to_multiple_of: int | None = None,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
    ) -> None:
        length_tensor = _as_lengths(lengths)
        check_choice(batch_by, "batch_by", BATCH_BY)
        by_tokens = batch_by == "tokens"
        if by_tokens:
            if max_tokens is None:
                raise ValueError("batch_by='tokens' needs max_tokens (an int >= 1).")
            check_int(max_tokens, "max_tokens", 1)
            check_int(batch_size, "batch_size", 1, allow_none=True)
            if drop_last:
                raise ValueError(
                    "drop_last=True is not accepted with batch_by='tokens': token batches have "
                    "no fixed size to complete; use batch_by='samples' to drop short batches."
                )
            if shuffle and not bucket:
                raise ValueError(
                    "batch_by='tokens' with shuffle=True needs bucket=True: a token budget over "
                    "unsorted samples wastes most of it and has no stable batch count."
                )
        else:
            if max_tokens is not None:
                raise ValueError(
                    f"max_tokens={max_tokens!r} has no effect with batch_by='samples': use "
                    "batch_by='tokens' or drop max_tokens."
                )
            check_int(batch_size, "batch_size", 1)
        check_int(pool_batches, "pool_batches", 1)
        check_int(pad_to_multiple_of, "pad_to_multiple_of", 1, allow_none=True)
        for name, flag in (("bucket", bucket), ("shuffle", shuffle), ("drop_last", drop_last)):
            check_bool(flag, name)
        n = len(length_tensor)
        super().__init__(
            n,
            batch_size or 1,
            shuffle=shuffle,
            drop_last=drop_last,
            seed=seed,
            num_replicas=num_replicas,
            rank=rank,
        )
        self.batch_size = batch_size
        self.lengths = length_tensor
        self.batch_by = batch_by
        self.max_tokens = max_tokens
        self.bucket = bucket
        self.pool_batches = pool_batches
        self.pad_to_multiple_of = pad_to_multiple_of
        costs = np.maximum(length_tensor.numpy(), 1)
        if pad_to_multiple_of:
            costs = -(-costs // pad_to_multiple_of) * pad_to_multiple_of
        self._costs = costs
        if by_tokens and n and int(costs.max()) > max_tokens:
            position = int(np.argmax(costs))
            raise ValueError(
                f"sample {position} has length {int(length_tensor[position])}"
                + (f" ({int(costs[position])} padded)" if pad_to_multiple_of else "")
                + f", more than max_tokens={max_tokens}: no batch can hold it. Raise max_tokens "
                "or truncate the samples (e.g. TextDataModule(max_length=...))."
            )
        self._cache: tuple[int, list[torch.Tensor]] | None = None
        self._configure_layout()

    def _configure_layout(self) -> None:
        """Sets the batch count per rank for this world size and batch size (see above)."""
        if not hasattr(self, "_costs"):  # IndexBatchSampler.__init__: the lengths come next
            return
        self._cache = None
        n, by_tokens, drop_last, shuffle = (
            self.dataset_size, self.batch_by == "tokens", self.drop_last, self.shuffle,
        )  # fmt: skip
        world = self.num_replicas
        self.num_dropped = 0
        if not by_tokens:
            full, short = divmod(n, self.batch_size)
            if drop_last:
                self._num_batches = full // world
                self.num_dropped = n - self._num_batches * world * self.batch_size
            else:
                self._num_batches = math.ceil((full + (short > 0)) / world)
        else:
            target = len(self._global_batches(0, probe=True))
            if shuffle and self._pool_samples() < n:  # several pools: the count varies a little
                target = max(target, len(self._global_batches(1, probe=True)))
                target += math.ceil(_TOKEN_SLACK[0] * target) + _TOKEN_SLACK[1]
            self._num_batches = math.ceil(target / world)
        self._total = self._num_batches * world
        self._padded_total = 0 if drop_last else max(0, self._total - n)
        self.num_samples = math.ceil(n / world)
        self.total_size = self.num_samples * world

    # ------------------------------------------------------------------ elastic resume
    def with_layout(self, segment: Segment) -> BucketBatchSampler:
        """A copy laid out for ``segment``'s world size, batch size and token budget."""
        twin = copy.copy(self)
        twin.num_replicas, twin.rank = segment.world, 0
        twin.batch_size = segment.batch_size
        if segment.max_tokens is not None:
            twin.max_tokens = segment.max_tokens
        twin._segments, twin._elastic = [], None
        twin._configure_layout()
        return twin

    def epoch_order(self, epoch: int) -> torch.Tensor:
        """The epoch's length-bucketed batches laid end to end (before dealing to ranks)."""
        batches = self._global_batches(epoch)
        return torch.cat(batches) if batches else torch.zeros(0, dtype=torch.int64)

    def position_layout(self, epoch: int) -> list[list[torch.Tensor]]:
        """Per rank, its batches of ``epoch`` as positions into :meth:`epoch_order`."""
        order = self.epoch_order(epoch)
        position = torch.full((self.dataset_size,), -1, dtype=torch.int64)
        position[order] = torch.arange(len(order))
        dealt = self.epoch_batches(epoch)
        world = self.num_replicas
        return [[position[b] for b in dealt[r::world]] for r in range(world)]

    def cut_positions(self, positions: torch.Tensor, segment: Segment | None) -> list[torch.Tensor]:
        """Cuts positions of the resumed epoch's order into batches: by samples or by tokens."""
        batch_size = segment.batch_size if segment is not None else self.batch_size
        if self.batch_by == "samples":
            return list(positions.split(batch_size or 1))
        max_tokens = segment.max_tokens if segment is not None else self.max_tokens
        costs = self._costs[self._elastic_order[positions].numpy()]
        return list(positions.split(pack_by_tokens(costs, max_tokens, batch_size)))

    def _max_tokens(self) -> int | None:
        return self.max_tokens

    # ------------------------------------------------------------------ epoch construction
    @property
    def num_padded(self) -> int:
        """Samples repeated on this rank per epoch (only when samples are fewer than batches)."""
        first = self._total - self._padded_total
        return sum(1 for j in range(first, self._total) if j % self.num_replicas == self.rank)

    def plan(self) -> LengthPlan:
        """How each epoch's items become batches, for this layout's batch size and budget."""
        return LengthPlan(
            self.batch_by, self.batch_size, self.max_tokens, self.bucket, self.pool_batches,
            self.shuffle, self.drop_last,
        )  # fmt: skip

    def _pool_samples(self) -> int:
        return self.plan().pool_samples(self._costs)

    def _global_batches(self, epoch: int, probe: bool = False) -> list[torch.Tensor]:
        """All ranks' batches of ``epoch`` in order, before dealing (and before fitting the
        count, when ``probe``)."""
        if self.dataset_size == 0:
            return []
        limit = None if probe else self._total
        return self.plan().batches(self._costs, self.seed + epoch, limit)

    def epoch_batches(self, epoch: int) -> list[torch.Tensor]:
        """Returns every rank's batches of ``epoch``: ``W x K`` index tensors; rank ``r`` gets
        items ``r, r + W, ...``."""
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1]
        batches = self._global_batches(epoch)
        total = self._total
        if self.drop_last:
            batches = batches[:total]
        elif len(batches) < total:
            n = self.dataset_size
            batches = split_into_pieces(batches, min(total, n))
            if self._padded_total:
                order = torch.cat(batches) if batches else torch.zeros(0, dtype=torch.int64)
                repeat = torch.arange(self._padded_total) % max(1, n)
                batches = batches + list(order[repeat].split(1))
        self._cache = (epoch, batches)
        return batches

    def batches(self, epoch: int) -> list[torch.Tensor]:
        """Returns this rank's batches of ``epoch`` (``len(self)`` index tensors)."""
        return self.epoch_batches(epoch)[self.rank :: self.num_replicas]

    def padding_efficiency(self, epoch: int = 0) -> float:
        """Real tokens / padded tokens over every rank's batches of ``epoch``.

        Padded tokens count ``size x longest`` per batch, with lengths rounded up to
        ``pad_to_multiple_of``; 1.0 means no padding at all.
        """
        lengths = self.lengths
        real = padded = 0
        for batch in self.epoch_batches(epoch):
            real += int(lengths[batch].sum())
            longest = int(lengths[batch].max())
            if self.pad_to_multiple_of:
                longest = -(-longest // self.pad_to_multiple_of) * self.pad_to_multiple_of
            padded += len(batch) * longest
        return real / padded if padded else 1.0

    # ------------------------------------------------------------------ state
    def _digest(self) -> str:
        return hashlib.sha1(self.lengths.numpy().tobytes()).hexdigest()[:16]

    def state_dict(self, consumed_batches: int | None = None) -> dict[str, Any]:
        """The position (see :meth:`IndexBatchSampler.state_dict`) plus the bucketing setup."""
        state = super().state_dict(consumed_batches)
        state.update(
            batch_by=self.batch_by,
            max_tokens=self.max_tokens,
            bucket=self.bucket,
            pool_batches=self.pool_batches,
            pad_to_multiple_of=self.pad_to_multiple_of,
            lengths_digest=self._digest(),
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a saved position after checking that the batches would be the same.

        Raises:
            ValueError: If the lengths or any argument that shapes the batches differ.
        """
        mine = self.state_dict()
        for key in ("batch_by", "max_tokens", "bucket", "pool_batches", "pad_to_multiple_of"):
            if key in state and state[key] != mine[key]:
                raise ValueError(
                    f"cannot resume the batch order exactly: the checkpoint was saved with "
                    f"{key}={state[key]!r}, this run has {key}={mine[key]!r}."
                )
        if "lengths_digest" in state and state["lengths_digest"] != mine["lengths_digest"]:
            raise ValueError(
                "cannot resume the batch order exactly: the sample lengths differ from the "
                "checkpoint's (the data or its tokenization changed)."
            )
        super().load_state_dict(state)
