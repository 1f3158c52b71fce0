"""Weighted mixing of sources with exact quotas: ``Source(files, weight=, repeat=, name=)``.

Each epoch takes exactly its quota of records from each source:

* with weights, the quotas split ``epoch_size`` (default: all the sources' records) by
  largest remainder; with ``repeat`` (passes over the source per epoch: 0.25, 1, 3), a quota
  is ``round(repeat x records)``; with neither, each source is read once per epoch;
* a source's records are drawn as an endless run of *passes*, each pass every record of the
  source once, its shards in an order shuffled from ``(seed, source, pass)``. Epoch ``e``
  takes positions ``[e x quota, (e + 1) x quota)`` of that run, so a source drawn below one
  pass per epoch continues next epoch where it stopped (each of its records is seen once
  before any is seen twice), and one drawn above it starts a new, reshuffled pass;
* the epoch's record sequence interleaves the sources' draws in chunks of a few hundred
  records, in an order shuffled from ``(seed, epoch)``, so every stretch of the sequence (and,
  after the workers' shuffle buffers, every batch) mixes the sources in proportion.

The sequence is a list of :class:`Piece` (a run of consecutive records of one shard), which the
stream engine splits over ranks and workers as it splits a single source's shards, so the
quotas are exact across ranks x workers and resume stays exact.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from datamodules.core.checks import check_number, check_string
from datamodules.remote.listing import check_not_pipe

__all__ = [
    "CHUNK",
    "Piece",
    "Source",
    "StreamSource",
    "check_sources",
    "check_stream_sources",
    "chunked",
    "epoch_pieces",
    "quotas",
    "source_run",
]

#: Records per chunk of one source in the interleaved sequence.
CHUNK = 256


@dataclass(frozen=True)
class Source:
    """One source of a mixed split.

    Args:
        files: Anything ``train_files`` takes: a path or URL, a glob, a directory, or a list.
        weight: Its share of ``epoch_size`` (relative to the other sources' weights).
        repeat: Passes over its records per epoch (0.25, 1, 3, ...).
        name: Its name in ``summary()`` and in ``source_key``; default: a short form of
            ``files``.
    """

    files: Any
    weight: float | None = None
    repeat: float | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        files = self.files
        single = isinstance(files, (str, os.PathLike))
        many = isinstance(files, Sequence) and not isinstance(files, (str, bytes))
        if not single and not (
            many and files and all(isinstance(f, (str, os.PathLike)) for f in files)
        ):
            raise TypeError(
                f"Source files={files!r} is not accepted: use a path or URL, a glob, a "
                "directory, or a non-empty list of them."
            )
        # Paths as strings: a Source equals its rebuilt self (see to_plain).
        object.__setattr__(
            self, "files", os.fspath(files) if single else [os.fspath(f) for f in files]
        )
        for path in [self.files] if single else self.files:
            check_not_pipe(path, "Source files")
        where = f"Source({self.files!r}): "
        check_number(self.weight, f"{where}weight", above=0, allow_none=True)
        check_number(self.repeat, f"{where}repeat", 0, allow_none=True)
        if self.weight is not None and self.repeat is not None:
            raise ValueError(
                f"Source({self.files!r}) gives weight={self.weight!r} and repeat="
                f"{self.repeat!r}: give one of them."
            )
        check_string(self.name, "Source name", allow_none=True)

    def to_plain(self) -> dict[str, Any]:
        """This source as plain data (how checkpoints keep it); ``Source(**d)`` rebuilds it,
        and a ``*_files`` list accepts such dicts in place of Sources."""
        return {"files": self.files, "weight": self.weight, "repeat": self.repeat,
                "name": self.name}  # fmt: skip

    @classmethod
    def from_plain(cls, value: Mapping[str, Any], where: str) -> Source:
        """Rebuilds a Source from :meth:`to_plain`'s dict (or one written in a config).

        Raises:
            ValueError: A key other than ``files``, ``weight``, ``repeat`` and ``name``, or
                no ``files``, naming ``where``.
        """
        unknown = sorted(set(value) - {"files", "weight", "repeat", "name"})
        if unknown or "files" not in value:
            problem = f"unknown keys {unknown}" if unknown else "no 'files' key"
            raise ValueError(
                f"{where}: {dict(value)!r} has {problem}: a source given as a dict has the keys "
                "'files' and optionally 'weight', 'repeat' and 'name'."
            )
        return cls(**value)

    @property
    def label(self) -> str:
        """The name, or a short form of the files."""
        if self.name is not None:
            return self.name
        files = self.files
        first = os.fspath(files if isinstance(files, (str, os.PathLike)) else files[0])
        short = first.rstrip("/").rsplit("/", 1)[-1] or first
        return short if isinstance(files, (str, os.PathLike)) else f"{short} (+{len(files) - 1})"


def check_sources(sources: Sequence[Source], name: str) -> list[Source]:
    """Checks a split's list of sources: all weights, all repeats, or neither; unique names.

    Raises:
        ValueError: A mix of weighted, repeated and plain sources, or a name given twice,
            naming the sources.
    """
    if not sources:
        raise ValueError(f"{name}=[]: give at least one Source.")
    kinds = {
        "weight": [s.label for s in sources if s.weight is not None],
        "repeat": [s.label for s in sources if s.repeat is not None],
        "neither": [s.label for s in sources if s.weight is None and s.repeat is None],
    }
    given = {k: v for k, v in kinds.items() if v}
    if len(given) > 1:
        parts = "; ".join(f"{kind}: {', '.join(labels)}" for kind, labels in given.items())
        raise ValueError(
            f"{name}: every source gives a weight, or every one a repeat, or none does; "
            f"these differ ({parts})."
        )
    labels = [s.label for s in sources]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise ValueError(f"{name}: the source name(s) {twice} are used twice: set name=.")
    return list(sources)


def quotas(sources: Sequence[Source], records: Sequence[int], epoch_size: int | None) -> list[int]:
    """Records each source gives per epoch (see the module docstring).

    Raises:
        ValueError: ``epoch_size`` with repeat or plain sources, or a source with no records
            but a quota.
    """
    if epoch_size is not None and sources[0].weight is None:
        raise ValueError(
            "epoch_size= splits the epoch between weighted sources: give every Source a weight "
            "(or leave epoch_size unset)."
        )
    if sources[0].weight is not None:
        total = sum(records) if epoch_size is None else epoch_size
        weights = [float(s.weight) for s in sources]  # type: ignore[arg-type]
        exact = [total * w / sum(weights) for w in weights]
        out = [math.floor(x) for x in exact]
        order = sorted(range(len(out)), key=lambda i: (-(exact[i] - out[i]), i))
        for i in order[: total - sum(out)]:
            out[i] += 1
    elif sources[0].repeat is not None:
        out = [round(float(s.repeat) * n) for s, n in zip(sources, records, strict=True)]  # type: ignore[arg-type]
    else:
        out = list(records)
    for source, n, q in zip(sources, records, out, strict=True):
        if q and not n:
            raise ValueError(f"source {source.label!r} holds no records but its quota is {q}.")
    return out


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
    counts: Sequence[int], seed: int, source: int, begin: int, end: int, shuffle: bool
) -> list[Piece]:
    """Positions ``[begin, end)`` of a source's endless run of passes, as pieces.

    Pass ``p`` holds every shard once, in an order shuffled from ``(seed, source, p)``.
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
                pieces.append(Piece(source, shard, lo - at, hi - at))
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
    quota: Sequence[int],
    seed: int,
    epoch: int,
    shuffle: bool = True,
    chunk: int = CHUNK,
) -> list[Piece]:
    """The epoch's record sequence over all sources, interleaved (see the module docstring).

    Args:
        counts: Per source, the record count of each of its shards.
        quota: Per source, its records per epoch.
        seed: The shuffle seed.
        epoch: The epoch.
        shuffle: Shuffle shard orders and the interleaving; False (eval splits): each source
            in turn, in file order.
        chunk: Records per chunk of the interleaving.
    """
    runs = [
        source_run(c, seed, s, epoch * q, (epoch + 1) * q, shuffle)
        for s, (c, q) in enumerate(zip(counts, quota, strict=True))
    ]
    if not shuffle:
        return [piece for run in runs for piece in run]
    chunks = [chunked(run, chunk) for run in runs]
    labels = [s for s, source_chunks in enumerate(chunks) for _ in source_chunks]
    random.Random(f"{seed}:mix:{epoch}").shuffle(labels)
    taken = [0] * len(chunks)
    out: list[Piece] = []
    for s in labels:
        out.extend(chunks[s][taken[s]])
        taken[s] += 1
    return out


@dataclass(frozen=True)
class StreamSource:
    """A source as the stream engine sees it: its shards and its records per epoch.

    Attributes:
        name: Its name (for ``source_key`` and the summary).
        shards: Positions of its shards in the stream's shard list.
        quota: Its records per epoch.
    """

    name: str
    shards: tuple[int, ...]
    quota: int


def check_stream_sources(sources: Sequence[StreamSource], num_shards: int) -> None:
    """Raises unless every shard belongs to exactly one source."""
    owned = sorted(k for s in sources for k in s.shards)
    if owned != list(range(num_shards)):
        raise ValueError(
            f"sources must share out the {num_shards} shards, each to one source; got "
            f"{[list(s.shards) for s in sources]}."
        )
