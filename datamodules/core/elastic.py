"""Elastic resume: the rest of an interrupted epoch, re-split over another world size.

A sampler's epoch is an *order* of sample positions that depends only on the seed, the epoch
and the data (never on the number of ranks): a permutation for
:class:`~datamodules.core.samplers.IndexBatchSampler`, the length-bucketed batches laid end to
end for :class:`~datamodules.core.buckets.BucketBatchSampler`. A run cuts that order into
batches for its ranks (its *layout*); a checkpoint records, per run of the epoch (a
:class:`Segment`, the one type that stream resumes use too), the layout's world size and batch
size and how many batches every rank consumed. That is a few integers, however many samples
there are.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = [
    "Cut",
    "Remainder",
    "Segment",
    "deal",
    "dealt_pieces",
    "even_batch_sizes",
    "fast_rank_layout",
    "first_remainder",
    "remaining_positions",
    "split_into_pieces",
]


class Segment(NamedTuple):
    """One segment of an epoch: the batches delivered on one layout, a few ints.

    An epoch that a checkpoint interrupts and a resume continues on another layout is
    delivered in segments: the first on the layout that started it, then one per resume on
    another layout. Every resume, map-style (:class:`~datamodules.core.samplers.IndexBatchSampler`
    and its subclasses) or stream (:mod:`~datamodules.stream_engine.elastic`), recomputes
    from its segments alone which samples (records) the epoch delivered, and deals the rest
    out on its own layout. A NamedTuple: compared by value (is this the layout the
    checkpoint was saved on?) and hashable (a stream keys its plan cache by its segments).

    Attributes:
        world: Ranks of the layout (the global world size).
        workers: DataLoader workers per rank that made the batches. Streams: each worker
            reads its own part of the rank's records through its own shuffle buffer, so the
            count decides which records a number of batches held. Map-style: always 1; the
            batch sampler runs in the main process and its workers only load the batches it
            chose, so their count changes nothing delivered.
        batch_size: Samples (records) per batch on each rank. Map-style batches cut by a
            token budget: the most samples a batch may hold, None for no such cap.
        batches: Batches every rank delivered in this segment (the same on each rank).
        max_tokens: The token budget of a map-style layout that cuts batches by tokens
            (:class:`~datamodules.core.buckets.BucketBatchSampler` with ``batch_by="tokens"``);
            None otherwise, and always for streams.

    Checkpoints keep the two forms they have always had: map-style the dict of
    :meth:`to_dict` (no ``workers``), streams the list of :meth:`to_list` (no
    ``max_tokens``); :meth:`from_dict` and :meth:`from_list` read them back.
    """

    world: int
    workers: int
    batch_size: int | None
    batches: int
    max_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"world", "batch_size", "batches", "max_tokens"}``: a map-style checkpoint's."""
        return {
            "world": self.world,
            "batch_size": self.batch_size,
            "batches": self.batches,
            "max_tokens": self.max_tokens,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Segment:
        """The segment :meth:`to_dict` saved (``batch_size`` and ``max_tokens`` optional)."""
        return cls(
            int(data["world"]),
            1,
            None if data.get("batch_size") is None else int(data["batch_size"]),
            int(data["batches"]),
            None if data.get("max_tokens") is None else int(data["max_tokens"]),
        )

    def to_list(self) -> list[int]:
        """``[world, workers, batch_size, batches]``: a stream checkpoint's (and the four ints
        a stream shares with its workers)."""
        return [self.world, self.workers, self.batch_size, self.batches]  # type: ignore[list-item]

    @classmethod
    def from_list(cls, values: Sequence[Any]) -> Segment:
        """The segment :meth:`to_list` saved."""
        world, workers, batch_size, batches = values
        return cls(int(world), int(workers), int(batch_size), int(batches))


def even_batch_sizes(n_samples: int, n_batches: int, batch_size: int) -> list[int]:
    """Cuts ``n_samples`` into exactly ``n_batches`` batches of at most ``batch_size``.

    All batches are full except the last one; when a plain cut would leave the last batch
    empty (a rank holding one sample fewer than another, at a batch boundary), the last two
    batches share one batch's worth, so that no batch is empty.

    Args:
        n_samples: Samples to place; must satisfy ``n_batches <= n_samples``.
        n_batches: Batches to produce.
        batch_size: Largest batch.

    Returns:
        The batch sizes, summing to ``n_samples``.
    """
    if n_batches == 0:
        return []
    if not n_batches <= n_samples <= n_batches * batch_size:
        raise ValueError(
            f"cannot cut {n_samples} samples into {n_batches} non-empty batches of at most "
            f"{batch_size}."
        )
    last = n_samples - batch_size * (n_batches - 1)
    if last >= 1:
        return [batch_size] * (n_batches - 1) + [last]
    # A share one sample short of a batch boundary: the last two batches split one batch.
    # Filling greedily from the front, each batch takes what the remaining ones can spare.
    sizes = []
    remaining = n_samples
    for slot in range(n_batches):
        left_after = n_batches - slot - 1
        size = min(batch_size, remaining - left_after)
        if left_after == 1:
            size = min(size, (remaining + 1) // 2)
        sizes.append(size)
        remaining -= size
    return sizes


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


# ---------------------------------------------------------------------- at scale
# The same remainder and layout for batches of samples, in O(this rank's share): the bulk of
# what an epoch has left is one run of positions, so nothing per sample is built for the
# other ranks. ``remaining_positions`` / ``deal`` stay the definition; tests compare the two.


@dataclass(frozen=True)
class Remainder:
    """Positions of the epoch order not delivered yet, in order: ``head`` (explicit, sorted,
    each below ``start``), then the run ``[start, stop)``."""

    head: torch.Tensor
    start: int
    stop: int

    def __len__(self) -> int:
        return len(self.head) + self.stop - self.start

    def drop(self, m: int) -> Remainder:
        """The remainder without its first ``m`` positions."""
        if m <= len(self.head):
            return Remainder(self.head[m:], self.start, self.stop)
        return Remainder(self.head[:0], min(self.stop, self.start + m - len(self.head)), self.stop)

    def take(self, offset: int, size: int) -> torch.Tensor:
        """Positions ``[offset, offset + size)`` of the remainder (int64)."""
        k = len(self.head)
        parts = []
        if offset < k:
            parts.append(self.head[offset : min(k, offset + size)])
        lo, hi = max(offset, k) - k + self.start, offset + size - k + self.start
        if hi > lo:
            parts.append(torch.arange(lo, hi, dtype=torch.int64))
        return parts[0] if len(parts) == 1 else torch.cat(parts) if parts else self.head[:0]


def first_remainder(
    n: int, world: int, batch_size: int, num_batches: int, consumed: int, drop_last: bool
) -> Remainder | None:
    """What the first run of an epoch (rank ``r`` of ``world`` takes positions ``r, r + world,
    ...``, cut into ``num_batches`` even batches) left after ``consumed`` batches per rank;
    None when a rank of that run was padded (a split too small for its ranks)."""
    empty = torch.empty(0, dtype=torch.int64)
    if drop_last:
        end = num_batches * batch_size * world
        return Remainder(empty, min(consumed, num_batches) * batch_size * world, end)
    if n // world < num_batches:  # some rank repeats samples: the exact way handles it
        return None
    if consumed == 0:
        return Remainder(empty, 0, n)
    if consumed <= num_batches - 2:  # every batch before the last two is full
        return Remainder(empty, consumed * batch_size * world, n)
    counts = []
    before = max(num_batches - 2, 0)  # batches before the last two are full
    for rank in range(world):
        share = n // world + (1 if rank < n % world else 0)
        tail = even_batch_sizes(share - before * batch_size, num_batches - before, batch_size)
        counts.append(before * batch_size + sum(tail[: consumed - before]))
    low = min(counts) * world
    region = torch.arange(low, n, dtype=torch.int64)
    keep = region // world >= torch.tensor(counts, dtype=torch.int64)[region % world]
    return Remainder(region[keep], n, n)


def dealt_pieces(
    length: int, world: int, batch_size: int, drop_last: bool
) -> tuple[np.ndarray, int] | None:
    """The sizes of the pieces :func:`deal` makes of ``length`` positions cut into batches of
    ``batch_size`` (piece ``j`` goes to rank ``j mod world``), and how many single positions
    it repeats after them; None where ``deal`` would split more than one batch in two per
    extra piece (a remainder with fewer batches than ranks: the exact way handles it)."""
    nb = -(-length // batch_size)
    sizes = np.full(nb, batch_size, dtype=np.int64)
    if nb:
        sizes[-1] = length - batch_size * (nb - 1)
    if drop_last:
        if nb and sizes[-1] < sizes[0]:
            sizes = sizes[:-1]
        return sizes[: (len(sizes) // world) * world], 0
    total = -(-nb // world) * world
    extra = min(total, length) - nb
    if extra > 0:
        full = np.flatnonzero(sizes == batch_size)
        if batch_size < 2 or extra > len(full):
            return None
        # split_into_pieces halves the largest batches first, earliest first: these.
        halves = np.ones(nb, dtype=np.int64)
        halves[full[:extra]] = 2
        first = np.where(halves == 2, -(-sizes // 2), sizes)
        second = sizes // 2
        sizes = np.stack([first, second], axis=1).reshape(-1)[
            np.stack([np.ones(nb, dtype=bool), halves == 2], axis=1).reshape(-1)
        ]
    return sizes, total - min(total, length)


def fast_rank_layout(
    first: Remainder,
    segments: Sequence[Segment],
    world: int,
    rank: int,
    batch_size: int,
    drop_last: bool,
) -> tuple[list[torch.Tensor], int] | None:
    """This rank's batches of positions after ``segments[1:]`` consumed their share of
    ``first`` (what the first run left), and how many positions the new layout repeats;
    None where the exact way must be used. Equal to :func:`remaining_positions` followed by
    :func:`deal` for batches of samples."""
    remainder = first
    for segment in segments[1:]:
        dealt = dealt_pieces(len(remainder), segment.world, segment.batch_size or 1, drop_last)
        if dealt is None:
            return None
        sizes, _ = dealt
        remainder = remainder.drop(int(sizes[: segment.batches * segment.world].sum()))
    dealt = dealt_pieces(len(remainder), world, batch_size, drop_last)
    if dealt is None:
        return None
    sizes, repeated = dealt
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    batches = [
        remainder.take(int(offsets[j]), int(sizes[j])) for j in range(rank, len(sizes), world)
    ]
    length = len(remainder)
    for j in range(len(sizes), len(sizes) + repeated):  # single positions from the start
        if j % world == rank:
            batches.append(remainder.take((j - len(sizes)) % length, 1))
    return batches, repeated
