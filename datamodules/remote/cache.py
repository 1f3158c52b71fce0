"""A local cache of remote shards, shared by epochs, runs and processes, and their prefetch.

With ``cache_dir``, a remote shard is downloaded there once and read from local disk after:

* **Atomic and validated.** A shard downloads to a temporary file, is checked against the
  size the index recorded, and is renamed into place with a small JSON beside it that holds
  the version it was downloaded at (size and ETag / Last-Modified, from
  :class:`~datamodules.shards.shard_index.ShardIndex`). A copy of another version is
  downloaded again.
* **Shared.** Later epochs, later runs and other processes of the machine use the same copy;
  the ranks of one node download a shard once, under an exclusive file lock.
* **Bounded.** Beyond ``limit`` bytes, copies are evicted least recently used first. A copy
  some process is reading is never evicted: readers hold a shared lock on it while they read,
  and eviction only takes copies whose lock it gets at once.

Without ``cache_dir`` but with prefetch, shards go to a private temporary folder and each is
deleted once read.

:class:`Prefetcher` downloads a worker's next shards in a background thread while it reads
the current one (``prefetch_shards``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import multiprocessing.util
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

from datamodules.core.checks import check_size
from datamodules.remote.files import is_remote
from datamodules.remote.pool import PREFETCH, READING, pool
from datamodules.remote.ranges import download
from datamodules.remote.retrying import RemoteError, RemoteOptions

__all__ = ["Prefetcher", "ShardCache", "parse_size"]


def parse_size(value: Any, name: str = "cache_limit") -> int | None:
    """Bytes from an int or a string such as ``"50GB"`` or ``"512 MiB"`` (None stays None):
    :func:`~datamodules.core.checks.check_size`, which says what is accepted.

    Raises:
        TypeError: Neither an int nor a string (a float, a bool...), naming ``name``.
        ValueError: An int <= 0 or a string that is not a size, naming ``name``.
    """
    return check_size(value, name, allow_none=True)


class ShardCache:
    """Local copies of remote shards in ``directory``, at most ``limit`` bytes (LRU).

    Args:
        directory: The cache folder (made if missing); None: a private temporary folder whose
            copies are deleted once read (prefetch without a cache).
        limit: Bytes the copies may take (None: no limit).
        options: How the shards are downloaded (retries, timeout, storage options).
    """

    def __init__(
        self, directory: str | os.PathLike | None, limit: int | None, options: RemoteOptions
    ) -> None:
        self.keep = directory is not None
        self.directory = os.fspath(directory) if directory is not None else None
        self.limit = limit
        self.options = options
        #: Downloads this process made (a shard another process fetched first is not counted).
        self.downloads = 0

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def _root(self) -> str:
        if self.directory is None:  # each process its own folder, made on first use
            self.directory = tempfile.mkdtemp(prefix="datamodules-prefetch-")
            # Removed, with the copies' lock and version files, when the process that made it
            # ends (a DataLoader worker included: multiprocessing runs a process's exit
            # finalizers as it exits; a forked child does not inherit them).
            multiprocessing.util.Finalize(
                None, shutil.rmtree, args=(self.directory,), kwargs={"ignore_errors": True},
                exitpriority=0,
            )  # fmt: skip
        os.makedirs(self.directory, exist_ok=True)
        return self.directory

    def entry(self, url: str) -> str:
        """The path of ``url``'s copy (it may not exist yet)."""
        digest = hashlib.sha1(url.encode()).hexdigest()[:20]
        name = re.sub(r"[^A-Za-z0-9._-]", "_", url.rsplit("/", 1)[-1])[-60:]
        return os.path.join(self._root(), f"{digest}-{name}")

    @contextlib.contextmanager
    def open(self, url: str, version: str | None, size: int | None) -> Iterator[str]:
        """A context holding a valid local copy of ``url`` (downloaded if needed), locked
        against eviction while inside it; yields the copy's path."""
        path = self.ensure(url, version, size)
        lock = _lock_file(path)
        try:
            fcntl.flock(lock, fcntl.LOCK_SH)
            if not self._valid(path, version, size):  # evicted between ensure and lock
                fcntl.flock(lock, fcntl.LOCK_UN)
                path = self.ensure(url, version, size)
                fcntl.flock(lock, fcntl.LOCK_SH)
            with contextlib.suppress(OSError):
                os.utime(path)  # last use, for LRU eviction
            yield path
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            os.close(lock)
            if not self.keep:
                _remove(path)

    def ensure(
        self,
        url: str,
        version: str | None,
        size: int | None,
        priority: tuple[int, int] = READING,
        requested: threading.Event | None = None,
        share: int | None = None,
    ) -> str:
        """Downloads ``url`` unless a valid copy is there; returns the copy's path.
        ``priority``: its requests' in the process's pool (default: needed now);
        ``requested``: set once they are all asked for; ``share``: the connections its parts
        spread over (:func:`~datamodules.remote.ranges.download`)."""
        path = self.entry(url)
        if self._valid(path, version, size):
            return path
        lock = _lock_file(path)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one download per machine
            if not self._valid(path, version, size):
                self._download(url, path, version, size, priority, requested, share)
                self.downloads += 1
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            os.close(lock)
        if self.keep and self.limit is not None:
            self.evict(keep=path)
        return path

    def _valid(self, path: str, version: str | None, size: int | None) -> bool:
        try:
            with open(path + ".json") as f:
                meta = json.load(f)
            actual = os.path.getsize(path)
        except (OSError, ValueError):
            return False
        if size is not None and actual != size:
            return False
        return meta.get("version") == version and meta.get("size") == actual

    def _download(
        self,
        url: str,
        path: str,
        version: str | None,
        size: int | None,
        priority: tuple[int, int] = READING,
        requested: threading.Event | None = None,
        share: int | None = None,
    ) -> None:
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.part"
        try:
            download(url, tmp, self.options, size, priority, requested, share)
            got = os.path.getsize(tmp)
            if size is not None and got != size:
                raise RemoteError(url, None, f"downloaded {got} bytes, the index says {size}")
            os.replace(tmp, path)
            meta_tmp = tmp + ".json"
            with open(meta_tmp, "w") as f:
                json.dump({"url": url, "version": version, "size": got}, f)
            os.replace(meta_tmp, path + ".json")
        finally:
            _remove(tmp)

    def entries(self) -> list[tuple[float, int, str]]:
        """``(last use, bytes, path)`` of every copy, least recently used first."""
        found = []
        root = self._root()
        for name in os.listdir(root):
            if name.endswith((".json", ".lock", ".part")):
                continue
            path = os.path.join(root, name)
            with contextlib.suppress(OSError):
                st = os.stat(path)
                found.append((st.st_mtime, st.st_size, path))
        return sorted(found)

    def evict(self, keep: str | None = None) -> int:
        """Deletes least recently used copies until the total is within ``limit``; never a copy
        that is being read (or ``keep``). Returns the bytes freed."""
        if self.limit is None:
            return 0
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        freed = 0
        for _, size, path in entries:
            if total <= self.limit:
                break
            if path == keep:
                continue
            lock = _lock_file(path)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # someone reads it
                os.close(lock)
                continue
            try:
                _remove(path + ".json")
                _remove(path)
                total -= size
                freed += size
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
                os.close(lock)
        return freed


class Prefetcher:
    """Downloads upcoming shards into a :class:`ShardCache` in background threads.

    Args:
        cache: Where the copies go.
        ahead: How many shards to fetch ahead of the one being read, at least (the caller
            may schedule more).
    """

    #: Downloads at once, at most (each waits on its range requests, which the process's
    #: pool of connections bounds).
    THREADS = 16
    #: Seconds a first prefetch waits for the shard being read to ask for its parts: requests
    #: under way are not preempted, and that shard is needed first.
    GRACE = 0.5

    def __init__(
        self, cache: ShardCache, ahead: int, on_fetched: Callable[[str], Any] | None = None
    ) -> None:
        self.cache = cache
        self.ahead = ahead
        #: Called with a shard's URL once its copy is complete (in the thread that fetched it).
        self.on_fetched = on_fetched
        self._pool: ThreadPoolExecutor | None = None
        self._futures: dict[str, Future] = {}
        self._order = itertools.count()  # the shards' order: the next one's requests first
        self._requested = threading.Event()  # the last scheduled shard's parts are asked for
        self._requested.set()

    def schedule(
        self,
        upcoming: Sequence[tuple[str, str | None, int | None]],
        after_reading: bool = False,
        read_first: bool = False,
    ) -> None:
        """Starts fetching ``upcoming`` ``(url, version, size)`` not fetched yet, in order;
        with ``after_reading``, once a shard being read has asked for its first parts (or
        after :attr:`GRACE` seconds). Each counts among the files that share the process's
        connections (:meth:`~datamodules.remote.pool.RequestPool.share`) until it is
        fetched: a few shards at once are each asked for in fewer, larger parts.
        ``read_first``: the first of them is the shard about to be read (a cache's first
        shard, read once copied): its requests run as a read's
        (:data:`~datamodules.remote.pool.READING`), which is also what a worker's head start
        waits for (:func:`~datamodules.remote.pool.wait_requested`)."""
        if self.ahead <= 0:
            return
        new = {url: (url, version, size) for url, version, size in upcoming
               if is_remote(url) and url not in self._futures}  # fmt: skip
        if not new:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.THREADS, thread_name_prefix="prefetch")
        workers = pool(self.cache.options)
        workers.add_file(len(new))  # all counted before the first starts
        workers.asking_for(len(new))
        for k, (url, version, size) in enumerate(new.values()):
            order = next(self._order)
            reading = read_first and k == 0 and url == upcoming[0][0]
            priority = READING if reading else (PREFETCH, order)
            before, self._requested = self._requested, _Requested(workers)
            future = self._pool.submit(
                self._fetch, url, version, size, priority, after_reading, before, self._requested
            )
            self._futures[url] = future
            future.add_done_callback(partial(self._done, url))

    def _done(self, url: str, future: Future) -> None:
        if self.on_fetched is not None and not future.cancelled() and not future.exception():
            self.on_fetched(url)

    def fetched(self, url: str) -> bool:
        """Whether ``url`` was fetched ahead and its copy is complete, not yet read."""
        future = self._futures.get(url)
        return future is not None and future.done() and not future.exception()

    def _fetch(self, url, version, size, priority, after, before, requested) -> str:  # noqa: ANN001
        """Downloads one shard once the one before it has asked for its parts (requests
        that have started are not preempted: the next shard's go first)."""
        try:
            workers = pool(self.cache.options)
            if after:
                workers.reading.wait(self.GRACE)
            before.wait(self.GRACE)
            share = workers.share()
            return self.cache.ensure(url, version, size, priority, requested, share)
        finally:
            pool(self.cache.options).add_file(-1)
            requested.set()

    def wait(self, url: str) -> None:
        """Waits for ``url``'s fetch, if one runs (its errors surface when the shard is read)."""
        future = self._futures.pop(url, None)
        if future is not None:
            with contextlib.suppress(Exception):
                future.result()


class _Requested(threading.Event):
    """Set once a prefetched shard has asked for all its parts (or its fetch ended); the
    process's pool then counts it as no longer asking (set from its fetch's thread only)."""

    def __init__(self, workers: Any) -> None:
        super().__init__()
        self.workers = workers

    def set(self) -> None:
        if not self.is_set():
            super().set()
            self.workers.asking_for(-1)


def _lock_file(path: str) -> int:
    return os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
