"""One remote file over several concurrent range requests: read ahead in order, or downloaded.

A single connection to an object store is slow (tens of MB/s, after a request's latency);
the AWS CLI, s5cmd and litdata fetch one object over parallel range requests. Here:

* :class:`ReadAhead`: a raw file that yields a remote file's bytes in order, from an
  offset, while the next parts download concurrently (at most ``READ_AHEAD`` bytes ahead).
  The first part is streamed as its bytes arrive, so the first record does not wait for a
  whole part, let alone the whole file.
* :func:`download`: a whole file into a local file, each part written at its offset
  (``os.pwrite``).
* **Bounded.** Every range request of a process runs in one pool of ``connections`` threads
  (:func:`connections`: a node budget of ``NODE_CONNECTIONS`` shared by the node's processes,
  2 to ``MAX_CONNECTIONS`` each), the file being read before the files being prefetched.
* **Retried per part.** A part that fails is requested again from the byte it reached, with
  the retry policy of :func:`~datamodules.remote.retrying.call_with_retries`.
* **Servers without ranges.** The first request asks for the first part. A ``206`` gives
  the file's size (``Content-Range``); a ``200`` (a server that ignores ``Range``, as
  Python's ``http.server``) is the whole body: the file is then read over that one
  response, in order, and a retry (``Range: bytes=N-``, answered whole again) skips the
  bytes already read. Other fsspec filesystems
  (S3, GCS...) read parts with ``cat_file(start, end)``, the size from ``info``.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import queue
import re
import sys
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from datamodules.remote.files import remote_fs
from datamodules.remote.retrying import CutShort, RemoteError, RemoteOptions, call_with_retries

__all__ = [
    "MAX_CONNECTIONS",
    "NODE_CONNECTIONS",
    "PART_SIZE",
    "READ_AHEAD",
    "ReadAhead",
    "RemoteFile",
    "connections",
    "download",
    "part_size",
]

#: Bytes per range request (chosen by measurement: docs/benchmarks.md, "Remote streams").
PART_SIZE = 4 << 20
#: Bytes a :class:`ReadAhead` keeps requested ahead of the reader.
READ_AHEAD = 32 << 20
#: Range requests one node's processes may have open at once, all together.
NODE_CONNECTIONS = 64
#: The most range requests one process has open at once.
MAX_CONNECTIONS = 8
_CHUNK = 256 << 10  # bytes per read from a response body
# Priorities in the pool: the file being read before the files fetched ahead.
READING, PREFETCH = 0, 1


def part_size(options: RemoteOptions) -> int:
    """Bytes per range request: ``options.part_size``, else :data:`PART_SIZE`."""
    return options.part_size or PART_SIZE


def connections(options: RemoteOptions) -> int:
    """Range requests this process may have open at once.

    ``options.connections`` when given; else :data:`NODE_CONNECTIONS` shared by the node's
    processes (``LOCAL_WORLD_SIZE`` ranks times this rank's DataLoader workers), at least 2
    and at most :data:`MAX_CONNECTIONS` each.
    """
    if options.connections:
        return options.connections
    processes = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    data = sys.modules.get("torch.utils.data")  # never imported here: the CLI runs without torch
    info = data.get_worker_info() if data is not None else None
    if info is not None:
        processes *= max(1, info.num_workers)
    return max(2, min(MAX_CONNECTIONS, NODE_CONNECTIONS // processes))


# ---------------------------------------------------------------------- the process's pool
class _Pool:
    """``size`` threads that run range requests, lowest priority number first, then FIFO."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.pid = os.getpid()
        self.tasks: queue.PriorityQueue = queue.PriorityQueue()
        self.order = itertools.count()
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.running = 0  # requests open now (read by the tests)
        self.most = 0  # the most open at once

    def submit(self, priority: int, call: Callable[[], Any]) -> Future:
        future: Future = Future()
        self.tasks.put((priority, next(self.order), call, future))
        with self.lock:
            if len(self.threads) < self.size:
                thread = threading.Thread(target=self._run, name="ranges", daemon=True)
                self.threads.append(thread)
                thread.start()
        return future

    def _run(self) -> None:
        while True:
            _, _, call, future = self.tasks.get()
            if not future.set_running_or_notify_cancel():
                continue
            with self.lock:
                self.running += 1
                self.most = max(self.most, self.running)
            try:
                future.set_result(call())
            except BaseException as error:  # noqa: BLE001 (handed to whoever waits)
                future.set_exception(error)
            finally:
                with self.lock:
                    self.running -= 1


_pool_lock = threading.Lock()
_pool_now: _Pool | None = None


def pool(options: RemoteOptions) -> _Pool:
    """This process's pool (a fresh one after a fork: threads do not cross it)."""
    global _pool_now
    with _pool_lock:
        if _pool_now is None or _pool_now.pid != os.getpid():
            _pool_now = _Pool(connections(options))
        return _pool_now


# ---------------------------------------------------------------------- one remote file
# Hosts seen answering range requests with 206 / with 200 (ignoring them), in this process.
_RANGES: set[str] = set()
_NO_RANGES: set[str] = set()
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


class RemoteFile:
    """A remote file's filesystem, size and range support; reads ``[start, end)`` into a sink.

    Args:
        url: The file's URL.
        options: Storage options, retries, timeout, part size and connections.
        size: The file's size when known (a shard index records it); else learnt from the
            first response (HTTP) or ``info`` (other filesystems).
    """

    def __init__(self, url: str, options: RemoteOptions, size: int | None = None) -> None:
        self.url, self.options, self.size = url, options, size
        self.fs, self.fpath = call_with_retries(url, options, lambda: remote_fs(url, options))
        protocols = (self.fs.protocol,) if isinstance(self.fs.protocol, str) else self.fs.protocol
        self.http = bool({"http", "https"} & set(protocols))
        self.host = url.split("://", 1)[-1].split("/", 1)[0]
        #: Whether the server answers ranges: None until the first answer (HTTP).
        self.ranges: bool | None = None if self.http else True
        if self.http and self.host in _RANGES:
            self.ranges = True
        elif self.http and self.host in _NO_RANGES:
            self.ranges = False
        if not self.http and self.size is None:
            info = call_with_retries(url, options, lambda: self.fs.info(self.fpath))
            self.size = int(info["size"])

    def fetch(self, part: _Part, sink: Callable[[int, bytes], bool]) -> None:
        """Reads ``part`` (``[start, end)``; ``end`` None: to the end of the file) into
        ``sink(offset, data)``, which returns False once nobody wants the rest. A failure
        is retried from the byte reached. The first answer settles ``size`` and ``ranges``
        (then ``part.known`` is set): a ``200`` makes the part the rest of the file."""
        pos = part.start

        def attempt() -> None:
            nonlocal pos
            if not self.http:
                data = self.fs.cat_file(self.fpath, start=pos, end=part.end)
                if len(data) != part.end - pos:
                    raise CutShort(f"a range of {part.end - pos} bytes gave {len(data)}")
                sink(pos, data)
                pos = part.end
                return
            stream = self._open(pos, part)
            if stream is None:
                return
            try:
                while part.end is None or pos < part.end:
                    want = _CHUNK if part.end is None else min(_CHUNK, part.end - pos)
                    data = stream.read(want)
                    if not data:
                        if part.end is None:  # the end of the file, unless cut short
                            if self.size is not None and pos < self.size:
                                raise CutShort(f"{self.size - pos} of its bytes never came")
                            return
                        raise CutShort(f"{part.end - pos} bytes of a range never came")
                    if not sink(pos, data):
                        return
                    pos += len(data)
            finally:
                with contextlib.suppress(Exception):
                    stream.close()

        try:
            if part.end is None or pos < part.end:
                call_with_retries(self.url, self.options, attempt)
        finally:
            part.known.set()  # also on failure: the waiter then finds the error

    def _open(self, pos: int, part: _Part) -> Any:
        """One HTTP request from ``pos``: a range up to ``part.end`` (or the end), its body
        positioned at ``pos`` (a ``200`` has its first ``pos`` bytes skipped)."""
        if self.ranges is False or part.end is None:
            header = f"bytes={pos}-"
        else:
            header = f"bytes={pos}-{part.end - 1}"
        try:
            stream = self.fs.open(
                self.fpath, "rb", block_size=0, size=-1, headers={"Range": header}
            )
        except Exception as error:
            if getattr(error, "status", None) != 416:
                raise
            if self.size is None:
                self.size = pos  # nothing from pos on: the end of the file
            part.end = pos
            if self.ranges is None:
                self.ranges = True
            part.known.set()
            return None
        response = getattr(stream, "r", None)
        status = getattr(response, "status", 200)
        headers = getattr(response, "headers", {}) or {}
        length = getattr(response, "content_length", None)
        if status == 206:
            match = _CONTENT_RANGE.match(headers.get("Content-Range", ""))
            if match is None or int(match.group(1)) != pos:
                stream.close()
                raise RemoteError(
                    self.url, 206, f"a range from byte {pos} was answered with "
                    f"Content-Range {headers.get('Content-Range')!r}"
                )  # fmt: skip
            if match.group(3) != "*":
                self.size = int(match.group(3))
            if self.ranges is None:
                self.ranges = self.size is not None
                if self.ranges:
                    _RANGES.add(self.host)
            if self.size is not None and part.end is not None:
                part.end = min(part.end, self.size)
        else:  # the whole body: the server ignores ranges
            if length is not None:
                self.size = length
            if self.ranges is not False:
                _NO_RANGES.add(self.host)
                _RANGES.discard(self.host)
            self.ranges = False
            if part.first:  # the first answer: this response to the end of the file
                part.end = None
            try:
                skip = pos
                while skip:
                    data = stream.read(min(skip, _CHUNK))
                    if not data:
                        raise CutShort(f"ended {skip} bytes before offset {pos}")
                    skip -= len(data)
            except BaseException:
                stream.close()
                raise
        part.known.set()
        return stream


class _Part:
    """Bytes ``[start, end)`` of a file, handed from a request to a reader as they arrive;
    at most ``limit`` bytes wait (the request pauses beyond)."""

    def __init__(self, start: int, end: int | None, limit: int, first: bool = False) -> None:
        self.start, self.end, self.limit = start, end, limit
        #: The file's first request, whose answer tells its size and range support.
        self.first = first
        self.known = threading.Event()
        self.chunks: deque[bytes] = deque()
        self.waiting = 0
        self.cond = threading.Condition()
        self.done = False
        self.error: BaseException | None = None
        self.abandoned = False
        self.future: Future | None = None

    def put(self, offset: int, data: bytes) -> bool:
        with self.cond:
            while self.waiting >= self.limit and not self.abandoned:
                self.cond.wait()
            if self.abandoned:
                return False
            self.chunks.append(data)
            self.waiting += len(data)
            self.cond.notify_all()
        return True

    def finish(self, future: Future) -> None:
        with self.cond:
            self.error = None if future.cancelled() else future.exception()
            self.done = True
            self.cond.notify_all()

    def take(self, n: int) -> bytes:
        """Up to ``n`` bytes, waiting for the first; b"" at the part's end."""
        with self.cond:
            while not self.chunks and not self.done:
                self.cond.wait()
            if self.chunks:
                data = self.chunks.popleft()
                if len(data) > n:
                    data, rest = data[:n], data[n:]
                    self.chunks.appendleft(rest)
                self.waiting -= len(data)
                self.cond.notify_all()
                return data
            if self.error is not None:
                raise self.error
            return b""

    def abandon(self) -> None:
        with self.cond:
            self.abandoned = True
            self.chunks.clear()
            self.cond.notify_all()
        if self.future is not None:
            self.future.cancel()


class ReadAhead(io.RawIOBase):
    """A remote file read in order from ``offset``, its next parts fetched concurrently.

    The first part is requested alone (its answer tells the size and whether ranges are
    served); then 2 parts are kept requested, twice as many with each part read, up to
    :data:`READ_AHEAD` bytes; the process's pool decides how many run at once.

    Args:
        url: The file's URL.
        offset: The first byte to read.
        options: Storage options, retries, timeout, part size and connections.
        size: The file's size when known.
    """

    def __init__(
        self, url: str, offset: int, options: RemoteOptions, size: int | None = None
    ) -> None:
        super().__init__()
        self.url = url
        self.file = RemoteFile(url, options, size)
        self.pool = pool(options)
        self.part = part_size(options)
        # Parts requested ahead: 2 at first, doubled with each part read, up to READ_AHEAD
        # bytes (a reader that stops early has asked for about twice what it read).
        self.depth = max(2, READ_AHEAD // self.part)
        self.window = 2
        self.pos = offset
        self.next = offset  # the first byte not yet requested
        self.parts: deque[_Part] = deque()
        self.probe: _Part | None = None  # the first request, until it is answered

    def readable(self) -> bool:
        return True

    def _schedule(self, start: int, end: int | None, first: bool = False) -> None:
        limit = READ_AHEAD if end is None else max(end - start, 1)
        part = _Part(start, end, limit, first)
        part.future = self.pool.submit(READING, lambda: self.file.fetch(part, part.put))
        part.future.add_done_callback(lambda future: part.finish(future))
        self.parts.append(part)
        self.next = end if end is not None else -1
        if first:
            self.probe = part

    def _fill(self) -> None:
        """Requests parts up to ``window`` ahead, once the first answer told the size."""
        file = self.file
        if self.probe is not None:
            if not self.probe.known.is_set():
                return  # waiting for the first answer
            self.probe = None
        if self.next < 0:
            return  # all requested
        if file.ranges is None or file.size is None:
            if not self.parts:  # the first request, one part: its answer tells the rest
                self._schedule(self.next, self.next + self.part, first=True)
            return
        if file.ranges is False:
            if not self.parts:
                self._schedule(self.next, None)  # one response to the end
            return
        while len(self.parts) < self.window and self.next < file.size:
            self._schedule(self.next, min(self.next + self.part, file.size))

    def readinto(self, buffer: Any) -> int:
        while True:
            self._fill()
            if not self.parts:
                return 0
            head = self.parts[0]
            data = head.take(len(buffer))
            if data:
                n = len(data)
                buffer[:n] = data
                self.pos += n
                return n
            self.parts.popleft()
            self.window = min(self.depth, 2 * self.window)
            if head.end is None:  # a response to the end of the file: done
                self.next = -1

    def close(self) -> None:
        for part in self.parts:
            part.abandon()
        self.parts.clear()
        super().close()


def download(url: str, path: str, options: RemoteOptions, size: int | None = None) -> int:
    """Downloads ``url`` into ``path`` over concurrent range requests (parts written at their
    offsets); returns the bytes written. ``size``: the file's, if known (parts are requested
    up to it at once; the answers' ``Content-Range`` must agree).

    Raises:
        RemoteError: A part failed for good (after its retries), naming the URL.
    """
    file = RemoteFile(url, options, size)
    workers = pool(options)
    step = part_size(options)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    written = 0
    lock = threading.Lock()

    def sink(offset: int, data: bytes) -> bool:
        nonlocal written
        if failed.is_set():
            return False
        os.pwrite(fd, data, offset)
        with lock:
            written += len(data)
        return True

    def start(begin: int, end: int | None, first: bool = False) -> Future:
        part = _Part(begin, end, 0, first)
        future = workers.submit(PREFETCH, lambda: file.fetch(part, sink))
        futures.append(future)
        parts.append(part)
        return future

    futures: list[Future] = []
    parts: list[_Part] = []
    failed = threading.Event()
    try:
        begin: int | None = 0
        if file.size is None or file.ranges is None:  # the first answer says how
            future = start(0, step, first=True)
            parts[0].known.wait()
            if file.ranges is None:  # no answer: the error
                future.result()
            begin = parts[0].end  # None: that answer is the whole file
        if begin is not None and file.ranges and file.size is not None:
            for a in range(begin, file.size, step):
                start(a, min(a + step, file.size))
        elif begin is not None and (file.size is None or begin < file.size):
            start(begin, None)  # no ranges: one response to the end
        for future in futures:
            future.result()
    except BaseException:
        failed.set()
        for future in futures:
            future.cancel()
        raise
    finally:
        for future in futures:  # no write after the file is closed
            with contextlib.suppress(BaseException):
                future.result()
        os.close(fd)
    if file.size is not None and file.size != written:  # a file changed while downloading
        raise RemoteError(url, None, f"{written} bytes downloaded, the server says {file.size}")
    return written
