"""The rest of a stream epoch resumed on another layout, in O(this rank's share).

:func:`~datamodules.stream_engine.elastic.remainder` defines the records an elastic resume must
still deliver: the sorted global positions no earlier segment delivered. It builds them all,
8 bytes a record, and replays every old worker's shuffle buffer: linear in the epoch on every
rank (40 s and 2 GB at 100M records). A new rank needs only its own range of that sequence.

:class:`Remainder` describes the sequence without building it. Each old worker's *block* (its
contiguous records of the segment's sequence) leaves ``n - t`` of its ``n`` records: the ones
still in its shuffle buffer (explicit positions, at most the buffer's size) followed by the
tail it never read (a run). Those counts come from the layout alone, so prefix sums over the
old workers (``O(world x workers)``) locate any range of the sequence, and only the blocks a
range overlaps are replayed (:func:`~datamodules.stream_engine.elastic.emitted`). A resume of a
resume stacks one level per segment: a level's positions index its parent's sequence, runs of
them map through the parent as ranges. So a rank's share costs its own records plus a replay of
the few old workers it overlaps, and memory stays a few ints per old worker plus the buffers
replayed; the positions come out equal to ``remainder(...)[a:b]``, which the tests check on
every layout of the in-process elastic suite.

Layouts that repeat records (a split smaller than its ranks, ``Plan.padded``) wrap around
their sequence: there the sequence is small, and :func:`remaining_sequence` builds it exactly.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from datamodules.core.elastic import Segment
from datamodules.stream_engine.elastic import buffer_rng, emitted, remainder
from datamodules.stream_engine.layout import Plan, worker_done

__all__ = [
    "Identity",
    "Materialized",
    "REPLAYS_KEPT",
    "Remainder",
    "RemainingSequence",
    "remaining_sequence",
]

#: Old workers whose replayed buffers a level keeps (a rank's range touches a few).
REPLAYS_KEPT = 64


class Materialized:
    """A remainder held as its array of positions (small sequences, padded layouts)."""

    def __init__(self, positions: np.ndarray) -> None:
        self.positions = positions

    def __len__(self) -> int:
        return len(self.positions)

    def take_range(self, a: int, b: int) -> np.ndarray:
        """Positions ``[a, b)`` of the sequence."""
        return self.positions[a:b]

    def take(self, indices: np.ndarray) -> np.ndarray:
        """Positions at ``indices`` of the sequence."""
        return self.positions[indices]


class Identity:
    """The epoch's sequence of a fresh segment: position ``i`` is record ``i``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def take_range(self, a: int, b: int) -> np.ndarray:
        return np.arange(a, b, dtype=np.int64)

    def take(self, indices: np.ndarray) -> np.ndarray:
        return np.asarray(indices, dtype=np.int64)


class Remainder:
    """What one segment of an epoch left of its sequence (``parent``), not built.

    Args:
        parent: The segment's sequence (:class:`Identity` for the epoch's first segment).
        segment: The segment (its layout and the batches each rank delivered).
        index: The segment's number within the epoch (it seeds the workers' buffers).
        seed: The stream's seed.
        epoch: The epoch.
        size: Shuffle buffer per worker (0 without shuffling).
        drop_last: The stream's ``drop_last``.
    """

    def __init__(
        self,
        parent: Identity | Remainder | Materialized,
        segment: Segment,
        index: int,
        seed: int,
        epoch: int,
        size: int,
        drop_last: bool,
    ) -> None:
        world, workers, batch_size = segment.world, segment.workers, segment.batch_size
        k = segment.batches
        self.parent, self.index = parent, index
        self.seed, self.epoch, self.size = seed, epoch, size
        m = len(parent)
        plan = Plan.make(m, world, batch_size, drop_last)
        spans = []  # (base, n, t, rank, worker) of every old worker, in sequence order
        for rank in range(world):
            for worker in range(workers):
                done = worker_done(k, workers, worker)
                span = plan.span(rank, worker, workers, done)
                spans.append((span.base, span.n, span.t if done else 0, rank, worker))
        covered = plan.rank_start[-1] + plan.rank_size[-1] if world else 0
        if covered < m:  # dropped by drop_last: left for the next segment
            spans.append((covered, m - covered, 0, -1, -1))
        table = np.asarray([s[:3] for s in spans], dtype=np.int64).reshape(-1, 3)
        self._spans = spans
        self._base, self._n, self._t = table[:, 0], table[:, 1], table[:, 2]
        self._cum = np.concatenate([[0], np.cumsum(self._n - self._t)])
        self._replays: OrderedDict[int, np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return int(self._cum[-1])

    def _left(self, j: int) -> np.ndarray:
        """Block ``j``'s records not delivered, as indices into the parent's sequence; only
        for blocks partly delivered (the others leave the run ``[base + t, base + n)``)."""
        if j in self._replays:
            self._replays.move_to_end(j)
            return self._replays[j]
        base, n, t, rank, worker = self._spans[j]
        rng = buffer_rng(self.seed, self.epoch, rank, worker, self.index)
        delivered = np.zeros(n, dtype=bool)
        delivered[emitted(n, t, self.size, rng)] = True
        left = base + np.flatnonzero(~delivered)
        self._replays[j] = left
        if len(self._replays) > REPLAYS_KEPT:
            self._replays.popitem(last=False)
        return left

    def _parent_indices(self, a: int, b: int) -> list[tuple[int, int] | np.ndarray]:
        """Indices ``[a, b)`` of this sequence as pieces of the parent's: runs or arrays."""
        pieces: list[tuple[int, int] | np.ndarray] = []
        j = int(np.searchsorted(self._cum, a, side="right")) - 1
        while a < b and j < len(self._spans):
            lo, hi = int(self._cum[j]), int(self._cum[j + 1])
            take_lo, take_hi = max(a, lo) - lo, min(b, hi) - lo
            if take_hi > take_lo:
                base, n, t = int(self._base[j]), int(self._n[j]), int(self._t[j])
                if t == 0 or self.size <= 1 or t >= n:
                    start = base + (t if self.size <= 1 or t >= n else 0)
                    pieces.append((start + take_lo, start + take_hi))
                else:
                    pieces.append(self._left(j)[take_lo:take_hi])
            a = max(a, hi)
            j += 1
        return pieces

    def take_range(self, a: int, b: int) -> np.ndarray:
        """Global positions ``[a, b)`` of this sequence (``remainder(...)[a:b]``)."""
        out = []
        for piece in self._parent_indices(a, b):
            if isinstance(piece, tuple):
                out.append(self.parent.take_range(*piece))
            elif len(piece):
                out.append(self.parent.take(piece))
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def take(self, indices: np.ndarray) -> np.ndarray:
        """Global positions at ``indices`` (ascending) of this sequence, read as runs."""
        if not len(indices):
            return np.zeros(0, dtype=np.int64)
        breaks = np.flatnonzero(np.diff(indices) != 1) + 1
        out = [self.take_range(int(run[0]), int(run[-1]) + 1) for run in np.split(indices, breaks)]
        return np.concatenate(out)


RemainingSequence = Identity | Remainder | Materialized


def remaining_sequence(
    num_records: int,
    seed: int,
    epoch: int,
    size: int,
    drop_last: bool,
    segments: Sequence[Segment],
) -> RemainingSequence:
    """The sequence an elastic resume deals out: ``remainder(...)`` without building it.

    Raises:
        ValueError: A segment claims more batches than its layout has (as ``remainder``).
    """
    sequence: Identity | Remainder | Materialized = Identity(num_records)
    for index, segment in enumerate(segments):
        plan = Plan.make(len(sequence), segment.world, segment.batch_size, drop_last)
        k = segment.batches
        if plan.padded or not 0 <= k <= plan.nb:  # wraps around: small; or refused there
            return Materialized(remainder(num_records, seed, epoch, size, drop_last, segments))
        sequence = Remainder(sequence, segment, index, seed, epoch, size, drop_last)
    return sequence
