"""Elastic resume: the rest of an interrupted epoch, re-split over another world size.

A sampler's epoch is an *order* of sample positions that depends only on the seed, the epoch
and the data (never on the number of ranks): a permutation for
:class:`~datamodules.core.samplers.IndexBatchSampler`, the length-bucketed batches laid end to
end for :class:`~datamodules.core.buckets.BucketBatchSampler`. A run cuts that order into
batches for its ranks (its *layout*); a checkpoint records, per run of the epoch (a
*segment*), the layout's world size and batch size and how many batches every rank consumed.
That is a few integers, however many samples there are.

On resume the positions already consumed are recomputed from the segments alone, and the
rest, in epoch order, is cut into batches of the resumed run's batch size and dealt to its
ranks round-robin: every rank gets the same number of batches (the largest batches are split
when there are too few to share), and each position is delivered once across all the runs.
Only a remainder smaller than the new number of ranks repeats a few samples, which are
counted. Nested resumes (a resumed epoch interrupted again) replay each segment in turn.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Segment:
    """One run's part of an epoch: its layout and the batches each rank consumed.

    Attributes:
        world: Ranks of that run.
        batch_size: Its batch size (per rank).
        batches: Batches every rank consumed in that run.
        max_tokens: Its token budget (token batches only).
    """

    world: int
    batch_size: int | None
    batches: int
    max_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain ints, for a checkpoint."""
        return {
            "world": self.world,
            "batch_size": self.batch_size,
            "batches": self.batches,
            "max_tokens": self.max_tokens,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Segment:
        """The segment saved by :meth:`to_dict`."""
        return cls(
            int(data["world"]),
            None if data.get("batch_size") is None else int(data["batch_size"]),
            int(data["batches"]),
            None if data.get("max_tokens") is None else int(data["max_tokens"]),
        )


#: ``cut(positions, segment_or_none) -> global batches``: how a sampler cuts positions of its
#: epoch order into batches (by samples, or by a token budget).
Cut = Callable[[torch.Tensor, "Segment | None"], list[torch.Tensor]]


def split_into_pieces(batches: list[torch.Tensor], count: int) -> list[torch.Tensor]:
    """Splits batches into exactly ``count`` non-empty pieces, largest pieces first.

    Each extra piece comes from halving (then thirding, ...) the batch whose pieces are
    currently largest (ties: the batch split least, then the earliest); a batch's pieces stay
    in its place and are contiguous, near-equal slices of it. Needs
    ``len(batches) <= count <= total samples``.
    """
    extra = count - len(batches)
    if extra <= 0:
        return batches
    parts = [1] * len(batches)
    heap = [(-len(b), 1, i) for i, b in enumerate(batches) if len(b) > 1]
    heapq.heapify(heap)
    for _ in range(extra):
        _, _, i = heapq.heappop(heap)
        parts[i] += 1
        if len(batches[i]) > parts[i]:
            heapq.heappush(heap, (-math.ceil(len(batches[i]) / parts[i]), parts[i], i))
    pieces: list[torch.Tensor] = []
    for batch, k in zip(batches, parts, strict=True):
        pieces.extend([batch] if k == 1 else torch.tensor_split(batch, k))
    return pieces


def deal(
    positions: torch.Tensor, world: int, cut: Cut, segment: Segment | None, drop_last: bool
) -> tuple[list[list[torch.Tensor]], int]:
    """Cuts ``positions`` (in epoch order) into batches and deals them to ``world`` ranks.

    Batch ``j`` goes to rank ``j mod world``; every rank gets ``ceil(batches / world)``
    batches (with ``drop_last``, ``floor`` of the full ones). When that needs more batches than
    the cut gave, the largest are split; when it needs more than there are positions, single
    positions from the start repeat.

    Returns:
        Per rank, its batches of positions; and how many positions were repeated.
    """
    batches = cut(positions, segment) if len(positions) else []
    if drop_last:
        full = batches[:-1] if batches and len(batches[-1]) < len(batches[0]) else batches
        keep = (len(full) // world) * world
        batches = full[:keep]
        return [batches[r::world] for r in range(world)], 0
    per_rank = math.ceil(len(batches) / world)
    total = per_rank * world
    batches = split_into_pieces(batches, min(total, len(positions)))
    repeated = total - len(batches)
    if repeated:
        batches = batches + list(positions[torch.arange(repeated) % len(positions)].split(1))
    return [batches[r::world] for r in range(world)], repeated


def remaining_positions(
    first_layout: Sequence[Sequence[torch.Tensor]],
    segments: Sequence[Segment],
    size: int,
    cut: Cut,
    drop_last: bool,
) -> torch.Tensor:
    """The positions of the epoch order not yet consumed after every segment, in order.

    Args:
        first_layout: Per rank, the batches of positions of the epoch's first run.
        segments: Every run so far; ``segments[0]`` is the first run's.
        size: Length of the epoch order.
        cut: The sampler's cut, for the later segments' layouts.
        drop_last: Whether the later layouts drop short batches.
    """
    used = torch.zeros(size, dtype=torch.bool)
    consumed = torch.zeros(size, dtype=torch.bool)
    for rank_batches in first_layout:
        for i, batch in enumerate(rank_batches):
            used[batch] = True
            if i < segments[0].batches:
                consumed[batch] = True
    remaining = torch.nonzero(used & ~consumed).flatten()
    for segment in segments[1:]:
        layout, _ = deal(remaining, segment.world, cut, segment, drop_last)
        done = torch.zeros(size, dtype=torch.bool)
        for rank_batches in layout:
            for batch in rank_batches[: segment.batches]:
                done[batch] = True
        remaining = remaining[~done[remaining]]
    return remaining
