"""Range readers: how a stream worker reads the records ``[start, stop)`` of one shard.

* :class:`ShardReader`: the default, :func:`~datamodules.streaming.formats.read_records` with
  the shard's index, so it seeks close to ``start``.
* :class:`SliceReader`: adapts a user's ``read_shard(path) -> Iterator[record]`` (no seeking).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

from datamodules.streaming.formats import read_records
from datamodules.streaming.index import ShardIndex

Reader = Callable[[str, int, int], Iterable[Any]]


class ShardReader:
    """The default reader: records ``[start, stop)`` of a shard via ``read_records``.

    Args:
        indexes: Shard indexes by path (for formats and seek offsets); a path without one is
            read by its extension from the beginning.
        on_error: ``"raise"`` or ``"skip"`` bad records; must match how they were indexed.
        columns: Parquet columns to read (None: all).
    """

    def __init__(
        self,
        indexes: dict[str, ShardIndex] | None = None,
        on_error: str = "raise",
        columns: Sequence[str] | None = None,
    ) -> None:
        self.indexes = dict(indexes or {})
        self.on_error = on_error
        self.columns = columns

    def __call__(self, path: str, start: int, stop: int) -> Iterator[Any]:
        index = self.indexes.get(path)
        fmt = index.fmt if index is not None else None
        return read_records(path, fmt, self.on_error, start, stop, index, columns=self.columns)


class SliceReader:
    """Adapts ``read_shard(path) -> Iterator[record]`` (no seeking) to a range reader.

    Records before ``start`` are read and dropped, so a worker whose range starts deep in a
    shard pays for reading that far.
    """

    def __init__(self, read_shard: Callable[[str], Iterable[Any]]) -> None:
        self.read_shard = read_shard

    def __call__(self, path: str, start: int, stop: int) -> Iterator[Any]:
        return islice(iter(self.read_shard(path)), start, stop)
