"""Mixing a stream's sources: each source's records as pieces of shards, interleaved per epoch.

How many records each source gives per epoch, and from where in its run of passes, is
:class:`~datamodules.core.mixture.Mixture`'s (weights and weight schedules, repeats, a changed
mix on resume). This module turns an epoch's plan into records:

* a source's records are drawn as an endless run of *passes*, each pass every record of the
  source once, its shards in an order shuffled from ``(seed, source name, pass)``; the epoch
  takes positions ``[start, start + quota)`` of that run (:func:`source_run`), so a source
  drawn below one pass per epoch continues next epoch where it stopped (each of its records
  is seen once before any is seen twice), and one drawn above it starts a new, reshuffled pass;
* the epoch's record sequence interleaves the sources' draws in chunks (about 1/32 of the
  epoch: at least 256 records, at most 8,192), in an order shuffled from ``(seed, epoch)``, so
  every stretch of the sequence (and, after the workers' shuffle buffers, every batch) mixes
  the sources in proportion. A worker reads a shard's chunks as one read continued
  (:mod:`~datamodules.stream_engine.continued`): mixing costs no extra seeks, and chunks
  large enough keep the blocks of columns large.

The sequence is a list of :class:`Piece` (a run of consecutive records of one shard), which the
stream engine splits over ranks and workers as it splits a single source's shards, so the
quotas are exact across ranks x workers and resume stays exact.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CHUNK",
    "Piece",
    "StreamSource",
    "check_stream_sources",
    "chunked",
    "epoch_pieces",
    "source_run",
]

#: Records per chunk of one source in the interleaved sequence: about the epoch / CHUNKS,
#: within [CHUNK, MAX_CHUNK] (small chunks mix finely, large ones read in large blocks).
CHUNK, MAX_CHUNK, CHUNKS = 256, 8192, 32


@dataclass(frozen=True)
class Piece:
    """Records ``[start, stop)`` of shard ``shard`` of source ``source``."""

    source: int
    shard: int
    start: int
    stop: int

    @property
    def count(self) -> int:
        """Records in the piece."""
        return self.stop - self.start


def source_run(
    counts: Sequence[int], seed: int, source: int | str, begin: int, end: int, shuffle: bool
) -> list[Piece]:
    """Positions ``[begin, end)`` of a source's endless run of passes, as pieces.

    Pass ``p`` holds every shard once, in an order shuffled from ``(seed, source, p)``
    (``source``: the source's name, so that its passes do not depend on the other sources).
    """
    total = sum(counts)
    pieces: list[Piece] = []
    position = begin
    while position < end:
        pass_number, offset = divmod(position, total)
        order = list(range(len(counts)))
        if shuffle:
            random.Random(f"{seed}:{source}:{pass_number}").shuffle(order)
        at = 0
        for shard in order:
            n = counts[shard]
            lo, hi = max(offset, at), min(at + n, offset + end - position)
            if lo < hi:
                pieces.append(Piece(-1, shard, lo - at, hi - at))
            at += n
        position += min(total - offset, end - position)
    return pieces


def chunked(pieces: list[Piece], size: int) -> list[list[Piece]]:
    """Cuts a run of pieces into chunks of ``size`` records (the last one shorter)."""
    chunks: list[list[Piece]] = []
    current: list[Piece] = []
    room = size
    for piece in pieces:
        start = piece.start
        while start < piece.stop:
            take = min(room, piece.stop - start)
            current.append(Piece(piece.source, piece.shard, start, start + take))
            start += take
            room -= take
            if room == 0:
                chunks.append(current)
                current, room = [], size
    if current:
        chunks.append(current)
    return chunks


def epoch_pieces(
    counts: Sequence[Sequence[int]],
    plan: Sequence[tuple[int, int, int]],
    seed: int,
    epoch: int,
    shuffle: bool = True,
    chunk: int | None = None,
    names: Sequence[str] | None = None,
) -> list[Piece]:
    """The epoch's record sequence over all sources, interleaved (see the module docstring).

    Args:
        counts: Per source, the record count of each of its shards.
        plan: ``(source, start, quota)`` per source drawn in the epoch, in the order the
            interleaving deals them (:meth:`~datamodules.core.mixture.Mixture.plan`).
        seed: The shuffle seed.
        epoch: The epoch.
        shuffle: Shuffle shard orders and the interleaving; False (eval splits): each source
            in turn, in file order.
        chunk: Records per chunk of the interleaving (default: see :data:`CHUNK`).
        names: Per source, what seeds its passes (default: its position).
    """
    runs = []
    for s, start, quota in plan:
        key = names[s] if names is not None else s
        run = source_run(counts[s], seed, key, start, start + quota, shuffle)
        runs.append([Piece(s, p.shard, p.start, p.stop) for p in run])
    if not shuffle:
        return [piece for run in runs for piece in run]
    if chunk is None:
        chunk = max(CHUNK, min(MAX_CHUNK, sum(q for _, _, q in plan) // CHUNKS))
    chunks = [chunked(run, chunk) for run in runs]
    labels = [k for k, source_chunks in enumerate(chunks) for _ in source_chunks]
    random.Random(f"{seed}:mix:{epoch}").shuffle(labels)
    taken = [0] * len(chunks)
    out: list[Piece] = []
    for k in labels:
        out.extend(chunks[k][taken[k]])
        taken[k] += 1
    return out


@dataclass(frozen=True)
class StreamSource:
    """A source as the stream engine sees it: its shards (and, without a
    :class:`~datamodules.core.mixture.Mixture`, its records per epoch).

    Attributes:
        name: Its name (for ``source_key`` and the summary).
        shards: Positions of its shards in the stream's shard list.
        quota: Its records per epoch, the same every epoch (None: the stream's mixture says).
    """

    name: str
    shards: tuple[int, ...]
    quota: int | None = None


def check_stream_sources(sources: Sequence[StreamSource], num_shards: int) -> None:
    """Raises unless every shard belongs to exactly one source."""
    owned = sorted(k for s in sources for k in s.shards)
    if owned != list(range(num_shards)):
        raise ValueError(
            f"sources must share out the {num_shards} shards, each to one source; got "
            f"{[list(s.shards) for s in sources]}."
        )
