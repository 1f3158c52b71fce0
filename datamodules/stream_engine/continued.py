"""Reads of a shard kept open where they stopped, for streams that read shards in chunks.

A mixed stream interleaves its sources in chunks of a few hundred records
(:mod:`~datamodules.stream_engine.mixing`), so a worker reads each shard as a series of
consecutive ranges, ``[0, 256)``, then ``[256, 512)`` after chunks of other shards, and so on.
Opening the shard again for each range would seek again each time: a Parquet row group read
again for every chunk, or up to a thousand JSONL lines skipped. :class:`OpenReads` keeps the
last few reads open (one per shard, least recently used closed first): a range that starts
where the shard's open read stopped continues it, anything else opens a new read. Positions
are counted record by record (or block by block), so a read left half-consumed is never
continued from the wrong place.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["OpenReads"]

#: Open reads kept per worker (one per shard).
LIMIT = 16


class _Open:
    """One open read: where it stands, where it ends, its iterator, and a block's rest not
    yet given."""

    def __init__(self, position: int, bound: int, iterator: Iterator[Any]) -> None:
        self.position, self.bound, self.iterator = position, bound, iterator
        self.rest: Any = None

    def close(self) -> None:
        close = getattr(self.iterator, "close", None)
        if close is not None:
            close()


def _rows(block: tuple[Any, list[Any] | None]) -> int:
    table, records = block
    return table.num_rows if table is not None else len(records)  # type: ignore[arg-type]


def _cut(block: tuple[Any, list[Any] | None], n: int) -> tuple[Any, Any]:
    """The first ``n`` rows of a block, and the rest."""
    table, records = block
    if table is not None:
        return (table.slice(0, n), None), (table.slice(n), None)
    assert records is not None
    return (None, records[:n]), (None, records[n:])


class OpenReads:
    """Open reads by shard (see the module docstring).

    Args:
        limit: Open reads kept; the least recently used is closed beyond it.
    """

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._open: OrderedDict[tuple[str, bool], _Open] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        return {"limit": self.limit, "_open": OrderedDict()}  # reads stay in their process

    def _entry(
        self,
        path: str,
        blocks: bool,
        start: int,
        stop: int,
        bound: int,
        opener: Callable[[], Iterator[Any]],
    ) -> _Open:
        key = (path, blocks)
        entry = self._open.pop(key, None)
        if entry is None or entry.position != start or stop > entry.bound:
            if entry is not None:
                entry.close()
            entry = _Open(start, bound, opener())
        self._open[key] = entry
        while len(self._open) > self.limit:
            self._open.popitem(last=False)[1].close()
        return entry

    def records(
        self, path: str, start: int, stop: int, bound: int, opener: Callable[[], Iterator[Any]]
    ) -> Iterator[Any]:
        """Records ``[start, stop)``; ``opener()`` reads records ``[start, bound)``, which a
        later range continues."""
        entry = self._entry(path, False, start, stop, bound, opener)
        iterator = entry.iterator
        for _ in range(stop - start):
            try:
                record = next(iterator)
            except StopIteration:
                return
            entry.position += 1
            yield record

    def blocks(
        self, path: str, start: int, stop: int, bound: int, opener: Callable[[], Iterator[Any]]
    ) -> Iterator[tuple[Any, list[Any] | None]]:
        """Blocks of records ``[start, stop)``, the last one cut at ``stop`` (``opener()``:
        blocks of ``[start, bound)``)."""
        entry = self._entry(path, True, start, stop, bound, opener)
        left = stop - start
        while left > 0:
            if entry.rest is not None:
                block, entry.rest = entry.rest, None
            else:
                try:
                    block = next(entry.iterator)
                except StopIteration:
                    return
            rows = _rows(block)
            if rows > left:
                block, entry.rest = _cut(block, left)
                rows = left
            entry.position += rows
            left -= rows
            if rows:
                yield block
