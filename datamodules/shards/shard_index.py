"""ShardIndex: how many records a shard holds and where to seek to reach one.

Made by :func:`~datamodules.shards.index.index_shard` (and importable from there); read
by the record readers and the stream. It imports nothing, so every streaming module can use it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ShardIndex"]


@dataclass(frozen=True)
class ShardIndex:
    """How many records a shard holds and where to seek to reach one.

    Attributes:
        path: Path or URL of the shard.
        fmt: Its format (one of :data:`FORMATS`).
        compression: ``"gzip"``, ``"zstd"`` or None.
        on_error: The policy the count was made under: under ``"skip"`` bad records are not
            counted (nor read), under ``"raise"`` every structural record is counted.
        count: Number of records a reader yields under ``on_error``.
        every: Seek granularity: ``offsets[i]`` is the byte offset of record ``i * every``
            (0 and empty offsets when the shard cannot seek: compressed, Parquet).
        offsets: Byte offsets, see ``every``.
        lines: 1-based line number of each offset, for error messages.
        skipped: Bad records left out of the count (``on_error="skip"``).
        problems: The first of those, as ``(where, why)`` pairs (``where`` names the shard
            and the line).
        error: Why the shard could not be read (``on_error="skip"`` only; ``count`` is 0).
        damage: Where and why the shard stops being readable (``on_error="skip"`` only: a
            tar or compressed stream cut or corrupt part way), as ``"where: why"``; the
            records before it are counted.
        size: The file's size in bytes, when known.
        version: What identifies this version of the file (its size, ETag, Last-Modified or
            modification time, as JSON): a local cache of the shard must match it.
        columns: Parquet only: the names of the file's columns (for checking ``columns=``).
        bad_offsets: Tar shards under ``on_error="skip"``: the byte offsets where the records
            left out start, so that a reader starting anywhere leaves out the same ones.
        listed_in: The dataset index file (``*.index.json``) this came from, if any: named
            when the shard no longer matches it.
        counted_only: The index gave only the record count (an index another tool wrote):
            a reader starts at the shard's beginning and finds bad records itself.
    """

    path: str
    fmt: str
    compression: str | None
    on_error: str
    count: int
    every: int = 0
    offsets: tuple[int, ...] = ()
    lines: tuple[int, ...] = ()
    skipped: int = 0
    problems: tuple[tuple[str, str], ...] = ()
    error: str | None = None
    damage: str | None = None
    size: int | None = None
    version: str | None = None
    columns: tuple[str, ...] = ()
    bad_offsets: tuple[int, ...] = ()
    listed_in: str | None = None
    counted_only: bool = False
