"""Range readers: how a stream worker reads the records ``[start, stop)`` of one shard.

* :class:`ShardReader`: the default, :func:`~datamodules.shards.records.read_records` with
  the shard's index, so it seeks close to ``start``; remote shards optionally through a local
  :class:`~datamodules.remote.cache.ShardCache`, with the next shards fetched ahead. Each
  shard is checked, as it is opened, to be the version its index describes
  (:mod:`datamodules.remote.versions`): a changed one raises, naming it, never read wrongly.
* :class:`SliceReader`: adapts a user's ``read_shard(path) -> Iterator[record]`` (no seeking).

A mixed stream sets ``continues`` on its reader: local shards are then read through
:class:`~datamodules.stream_engine.continued.OpenReads`, so the next chunk of a shard
continues the read where the previous one stopped instead of seeking again.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any

from torch.utils.data import get_worker_info

from datamodules.remote.cache import Prefetcher, ShardCache
from datamodules.remote.files import default_options, is_remote, local_path
from datamodules.remote.pool import wait_requested
from datamodules.remote.retrying import RemoteError, RemoteOptions
from datamodules.remote.versions import (
    Expected,
    ShardChanged,
    check_local,
    expect,
    validators_of,
)
from datamodules.shards.errors import RecordError, ShardError
from datamodules.shards.index import ShardIndex, trusted_index_file
from datamodules.shards.records import read_blocks, read_records
from datamodules.stream_engine.continued import OpenReads

__all__ = ["PREFETCH_BYTES", "Reader", "ShardReader", "SliceReader", "head_start"]

Reader = Callable[[str, int, int], Iterable[Any]]

#: Bytes of upcoming remote shards a worker keeps downloading, beyond ``prefetch_shards``
#: shards: small shards are fetched further ahead so that the worker's connections stay busy
#: (a request's latency is paid per shard; see docs/benchmarks.md, "Remote streams").
PREFETCH_BYTES = 32 << 20


_HEAD_STARTS: set[str] = set()  # the work started in this worker


def head_start(planned: Sequence[str], name: str, work: Callable[[], Any]) -> None:
    """Runs ``work`` (a worker's one-time work, such as the imports its first batch needs)
    in a thread, once per process, in a DataLoader worker whose first shard is remote: once
    that shard has asked for its first parts and the shards fetched ahead for theirs (at most
    0.5 s later; :func:`~datamodules.remote.pool.wait_requested`), so that it fills their
    wait instead of following it (or slowing the requests down). A local shard has no wait
    to fill, and the main process (which may fork workers meanwhile) never runs it. Errors
    are dropped: the same work, done again where it is needed, reports them.
    """
    if name in _HEAD_STARTS or not planned or not is_remote(planned[0]):
        return
    if get_worker_info() is None:
        return
    _HEAD_STARTS.add(name)

    def run() -> None:
        wait_requested(0.5)
        with contextlib.suppress(Exception):  # only a head start
            work()

    threading.Thread(target=run, name=f"head-start-{name}", daemon=True).start()


class ShardReader:
    """The default reader: records ``[start, stop)`` of a shard via ``read_records``.

    Args:
        indexes: Shard indexes by path (for formats and seek offsets), or a sequence of them
            (such as a :class:`~datamodules.shards.dataset_index.ShardTable`); a path without
            one is read by its extension from the beginning.
        on_error: ``"raise"`` or ``"skip"`` bad records; must match how they were indexed.
        columns: Parquet columns to read (None: all).
        options: How remote shards are opened: storage options, retries, timeout.
        cache: Where remote shards are copied before they are read (None: read in place,
            unless ``prefetch_shards`` asks for copies in a private temporary folder).
        prefetch_shards: Remote shards to download ahead of the one being read, once the
            stream has told the reader its plan (:meth:`plan`); more of them while the next
            ones add up to less than :data:`PREFETCH_BYTES` (sizes from the indexes).
        index_cache: The index cache the indexes came from (``index_cache=`` of the
            DataModule): a remote shard found changed has its trusted entry dropped there.
    """

    def __init__(
        self,
        indexes: Mapping[str, ShardIndex] | Sequence[ShardIndex] | None = None,
        on_error: str = "raise",
        columns: Sequence[str] | None = None,
        options: RemoteOptions | None = None,
        cache: ShardCache | None = None,
        prefetch_shards: int = 0,
        index_cache: Any = None,
    ) -> None:
        if isinstance(indexes, Mapping) or indexes is None:
            self.indexes: Any = dict(indexes or {})
            self._positions: dict[str, int] | None = None
        else:  # a sequence: looked up by path when first asked
            self.indexes = indexes
            self._positions = None
        self.index_cache = index_cache
        self._expected: set[str] = set()
        self.on_error = on_error
        self.columns = columns
        self.options = options or default_options()
        if cache is None and prefetch_shards > 0:
            cache = ShardCache(None, None, self.options)
        self.cache = cache
        self.prefetch_shards = prefetch_shards
        self._prefetcher: Prefetcher | None = None
        self._plan: list[str] = []
        self._position = -1  # the planned shard being read (-1: none yet)
        self._lock = threading.RLock()  # the reader's thread and the prefetch threads
        #: Continue a local shard's read where the previous range stopped (set by a mixed
        #: stream, which reads shards in chunks).
        self.continues = False
        self._open = OpenReads()
        self._extents: dict[str, list[tuple[int, int]]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_prefetcher"] = None  # threads stay in their process
        state["_positions"] = None
        state["_expected"] = set()  # registered per process
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def index_of(self, path: str) -> ShardIndex | None:
        """The index of the shard ``path`` (None: not indexed)."""
        if isinstance(self.indexes, dict):
            return self.indexes.get(path)
        if self._positions is None:
            paths = getattr(self.indexes, "paths", None)
            if paths is None:
                paths = [s.path for s in self.indexes]
            self._positions = {p: k for k, p in enumerate(paths)}
        k = self._positions.get(path)
        return None if k is None else self.indexes[k]

    def _expect(self, path: str, index: ShardIndex | None) -> None:
        """Registers, once per process, what the shard must look like when it is opened."""
        if index is None or path in self._expected:
            return
        self._expected.add(path)
        forget = trusted_index_file(index, self.index_cache) if index.listed_in is None else None
        expect(
            path,
            Expected(index.size, validators_of(index.version), index.listed_in,
                     (forget,) if forget else ()),
        )  # fmt: skip

    def plan(self, paths: Sequence[str]) -> None:
        """Tells the reader the shards it will read next, in order; starts prefetching them.

        Without a persistent cache the first of them is streamed in place (it has no shard to
        hide behind), so prefetching starts with the second.
        """
        self._plan = list(paths)
        if self._keeps_copies():  # the first shard is read once copied: its fetch is a read
            self._prefetch_after(-1, read_first=True)
        else:  # after the first shard's first parts: requests under way are not preempted
            self._prefetch_after(0, after_reading=bool(paths) and is_remote(paths[0]))

    def _keeps_copies(self) -> bool:
        return self.cache is not None and self.cache.keep

    def _prefetch_after(
        self, position: int, after_reading: bool = False, read_first: bool = False
    ) -> None:
        """Keeps the shards after ``position`` (the planned shard being read) fetched ahead:
        ``prefetch_shards`` of them downloading (more while they add up to less than
        :data:`PREFETCH_BYTES`), and, as each copy completes, the next one started while at
        most ``prefetch_shards`` complete copies wait to be read (so at most twice
        ``prefetch_shards`` shards ahead, beyond that budget). The next shard's requests are
        then in flight while the current one is read, even when a copy is read faster than
        the shard after it can be fetched (a copy read in milliseconds would otherwise leave
        the next shard's whole fetch, its latency first, to be waited for)."""
        if self.cache is None or self.prefetch_shards <= 0:
            return
        with self._lock:
            if self._prefetcher is None:
                self._prefetcher = Prefetcher(self.cache, self.prefetch_shards, self._fetched)
            self._position = position
            upcoming, total, ready = [], 0, 0
            for path in self._plan[position + 1 :]:
                if self._prefetcher.fetched(path):  # a complete copy, waiting to be read
                    ready += 1
                    if ready > self.prefetch_shards:
                        break
                    continue
                size = getattr(self.index_of(path), "size", None) or PREFETCH_BYTES
                if len(upcoming) >= self.prefetch_shards and total + size > PREFETCH_BYTES:
                    break
                upcoming.append(self._identity(path))
                total += size
            self._prefetcher.schedule(upcoming, after_reading, read_first)

    def _fetched(self, url: str) -> None:
        """A copy fetched ahead is complete (called in the thread that fetched it): the
        shards after it may start."""
        self._prefetch_after(self._position)

    def _identity(self, path: str) -> tuple[str, str | None, int | None]:
        index = self.index_of(path)
        self._expect(path, index)
        return path, getattr(index, "version", None), getattr(index, "size", None)

    def __call__(self, path: str, start: int, stop: int) -> Iterator[Any]:
        """The records ``[start, stop)`` of a shard."""
        if self.continues and not is_remote(path):
            bound = self._bound(path, start, stop)
            read = lambda: self._read(read_records, path, start, bound)  # noqa: E731
            return self._open.records(path, start, stop, bound, read)
        return self._read(read_records, path, start, stop)

    def blocks(self, path: str, start: int, stop: int) -> Iterator[tuple[Any, list[Any] | None]]:
        """The same records as blocks of columns (Parquet, JSONL; see
        :func:`~datamodules.shards.records.read_blocks`)."""
        if self.continues and not is_remote(path):
            bound = self._bound(path, start, stop)
            read = lambda: self._read(read_blocks, path, start, bound)  # noqa: E731
            return self._open.blocks(path, start, stop, bound, read)
        return self._read(read_blocks, path, start, stop)

    def expect(self, extents: dict[str, list[tuple[int, int]]]) -> None:
        """Tells a continuing reader the ranges of each shard it will read in turn (the
        worker's pieces, joined where one starts at the previous one's end), so that a read
        continued stops at its range's end instead of reading ahead to the shard's."""
        self._extents = extents

    def _bound(self, path: str, start: int, stop: int) -> int:
        """Where a read from ``start`` may go on to: the end of the expected range holding
        ``[start, stop)``, else of the shard (at least ``stop``)."""
        for first, last in self._extents.get(path, ()):
            if first <= start and stop <= last:
                return last
        index = self.index_of(path)
        return max(stop, index.count) if index is not None else stop

    def _read(self, read: Callable[..., Iterator[Any]], path: str, start: int, stop: int):
        index = self.index_of(path)
        self._expect(path, index)
        fmt = index.fmt if index is not None else None
        # An index that gives only the count (another tool's): read from the shard's start,
        # finding bad records as a read without an index does.
        seek = None if index is not None and index.counted_only else index
        streamed = bool(self._plan) and path == self._plan[0] and not self._keeps_copies()
        if streamed:
            self._prefetch_after(0)
        if self.cache is None or not is_remote(path) or streamed:
            if index is not None and not is_remote(path):
                self._check_local(path)
            records = read(
                path, fmt, self.on_error, start, stop, seek, columns=self.columns,
                options=self.options,
            )  # fmt: skip
        else:  # (the index names a copy's records by the shard's URL)
            records = self._read_copy(read, path, fmt, start, stop, index)
        # (a local shard was checked above; a remote one is checked on the response)
        return _named_changes(records, path) if is_remote(path) else records

    def _check_local(self, path: str) -> None:
        try:
            check_local(path, local_path(path))
        except ShardChanged as changed:
            raise ShardError(path, None, changed.reason) from None

    def _read_copy(
        self,
        read: Callable[..., Iterator[Any]],
        path: str,
        fmt: str | None,
        start: int,
        stop: int,
        index: ShardIndex | None,
    ) -> Iterator[Any]:
        assert self.cache is not None
        if path in self._plan:
            self._prefetch_after(self._plan.index(path))
        if self._prefetcher is not None:
            self._prefetcher.wait(path)
        _, version, size = self._identity(path)
        try:
            with self.cache.open(path, version, size) as local:
                yield from read(local, fmt, self.on_error, start, stop, index, columns=self.columns)
        except RemoteError as error:
            raise ShardError(path, None, f"cannot download shard ({error.reason})") from error


def _named_changes(records: Iterator[Any], path: str) -> Iterator[Any]:
    """The records; a shard found changed when opened raises a ShardError that says just that
    (not "cannot read past line N")."""
    try:
        yield from records
    except RecordError as error:
        cause: BaseException | None = error
        while cause is not None and not isinstance(cause, ShardChanged):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        raise ShardError(path, None, cause.reason) from error


class SliceReader:
    """Adapts ``read_shard(path) -> Iterator[record]`` (no seeking) to a range reader.

    Records before ``start`` are read and dropped, so a worker whose range starts deep in a
    shard pays for reading that far.
    """

    def __init__(self, read_shard: Callable[[str], Iterable[Any]]) -> None:
        self.read_shard = read_shard

    def __call__(self, path: str, start: int, stop: int) -> Iterator[Any]:
        return islice(iter(self.read_shard(path)), start, stop)
