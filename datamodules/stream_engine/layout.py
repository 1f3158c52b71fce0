"""How a sequence of records is cut into ranks, batches and worker blocks (index arithmetic only).

One layout (:class:`Plan`) of ``n`` records over ``world`` ranks in batches of ``batch_size``:

* rank ``r`` takes a contiguous range of the sequence, the ranges as even as possible, cut
  into ``ceil(ceil(n / world) / batch_size)`` batches, the same count on every rank: all full
  except the last one, or the last two when a rank holds one batch less one record (they then
  split one batch's worth). With ``drop_last`` every rank takes ``floor(floor(n / world) /
  batch_size)`` full batches and the rest of the sequence is dropped. A rank holding fewer
  records than batches (``n < world``, or ``batch_size=1`` with ``n % world``) is topped up by
  repeating records from the start of the sequence (``padded``).
* the rank's batches are dealt to its DataLoader workers in contiguous blocks: worker ``w`` of
  ``K`` gets ``nb // K`` batches, one more if ``w < nb % K``. The DataLoader takes one batch from
  each worker in turn, so after the rank delivered ``k`` batches worker ``w`` delivered
  :func:`worker_done` ``(k, K, w) = k // K + (w < k % K)`` of them.

:class:`~datamodules.stream_engine.stream.ShardedStream` uses it for a fresh epoch (the
sequence is the epoch's records in shard order) and :mod:`~datamodules.stream_engine.elastic`
for the rest of an epoch resumed on another layout (the sequence is the records not yet
delivered).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Plan", "WorkerSpan", "ceil_div", "order_pieces", "worker_done"]


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for non-negative ints."""
    return -(-a // b)


def worker_done(k: int, workers: int, worker: int) -> int:
    """Batches worker ``worker`` of ``workers`` delivered once its rank delivered ``k``."""
    return k // workers + (worker < k % workers)


@dataclass(frozen=True)
class WorkerSpan:
    """One worker's share of a rank: its records are ``[base, base + n)`` of the sequence.

    Attributes:
        base: Index in the sequence of the worker's first record (past the end: wrapped).
        n: Records of the worker's batches.
        t: Of which in its first ``done`` batches.
        first: Index (within the rank) of the worker's first batch.
        mine: Number of its batches.
    """

    base: int
    n: int
    t: int
    first: int
    mine: int


@dataclass(frozen=True)
class Plan:
    """The layout of ``n`` records over ``world`` ranks in batches of ``batch_size``.

    Build it with :meth:`make`.
    """

    n: int
    world: int
    batch_size: int
    drop_last: bool
    nb: int
    rank_size: tuple[int, ...]
    rank_start: tuple[int, ...]
    padded: int
    dropped: int

    @classmethod
    def make(cls, n: int, world: int, batch_size: int, drop_last: bool) -> Plan:
        """The plan of ``n`` records (see the module docstring for the rules)."""
        b, padded, dropped = batch_size, 0, 0
        if drop_last:
            nb = (n // world) // b
            sizes = [nb * b] * world
            dropped = n - world * nb * b
        elif n == 0:
            nb, sizes = 0, [0] * world
        else:
            nb = ceil_div(ceil_div(n, world), b)
            total = world * nb if n // world < nb else n
            padded = total - n
            sizes = [total // world + (r < total % world) for r in range(world)]
        starts = [0]
        for size in sizes[:-1]:
            starts.append(starts[-1] + size)
        return cls(n, world, b, drop_last, nb, tuple(sizes), tuple(starts), padded, dropped)

    def sizes(self, rank: int) -> tuple[int, tuple[int, ...]]:
        """Rank ``rank``'s batches: ``(number of full batches, sizes of the ones after)``."""
        nb, b, n = self.nb, self.batch_size, self.rank_size[rank]
        if nb == 0:
            return 0, ()
        last = n - b * (nb - 1)
        if last >= 1:
            return nb - 1, (last,)
        return nb - 2, ((b + 1) // 2, b // 2)  # one record short of a boundary: split one

    def prefix(self, j: int, full: int, tail: tuple[int, ...]) -> int:
        """Records in a rank's first ``j`` batches (``full, tail`` from :meth:`sizes`)."""
        return min(j, full) * self.batch_size + sum(tail[: max(0, j - full)])

    def span(self, rank: int, worker: int, workers: int, done: int) -> WorkerSpan:
        """Worker ``worker`` of ``workers``' share of rank ``rank``, ``done`` batches in."""
        nb = self.nb
        mine = nb // workers + (worker < nb % workers)
        first = worker * (nb // workers) + min(worker, nb % workers)
        full, tail = self.sizes(rank)
        start = self.prefix(first, full, tail)
        n = self.prefix(first + mine, full, tail) - start
        t = self.prefix(first + min(done, mine), full, tail) - start
        return WorkerSpan(self.rank_start[rank] + start, n, t, first, mine)

    def batch_size_at(self, rank: int, j: int) -> int:
        """Size of rank ``rank``'s batch ``j``."""
        full, tail = self.sizes(rank)
        return self.batch_size if j < full else tail[j - full]


def order_pieces(
    order: list[tuple[int, int, int, int]], cum: list[int], u: int, v: int
) -> Iterator[tuple[int, int, int, int]]:
    """The pieces of an epoch's order that hold its global positions ``[u, v)`` (past ``N``:
    wrapped, for padding): ``(shard, first, stop, source)``, records ``[first, stop)`` of
    the shard, in order. ``order[k]`` is ``(shard, start, count, source)`` and ``cum`` the
    running counts of the pieces."""
    n = cum[-1]
    while u < v:
        base = (u // n) * n
        lo, hi = u - base, min(v - base, n)
        k = bisect_right(cum, lo) - 1
        while lo < hi:
            a, b = lo - cum[k], min(hi, cum[k + 1]) - cum[k]
            if b > a:
                shard, start, _, source = order[k]
                yield shard, start + a, start + b, source
                lo = cum[k] + b
            k += 1
        u = base + hi
