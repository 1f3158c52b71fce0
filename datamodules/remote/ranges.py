"""One remote file over several concurrent range requests: read ahead in order, or downloaded.

One connection to an object store is slow (a request's latency, then tens of MB/s); the AWS
CLI, s5cmd and litdata fetch an object over parallel range requests. Here:

* :class:`ReadAhead`: a remote file's bytes in order from an offset while its next parts
  download (at most :data:`READ_AHEAD` bytes ahead); a part is read as its bytes arrive.
* :func:`download`: a whole file into a local file, parts written at their offsets (pwrite).
* **Bounded.** A process's range requests run in its pool
  (:func:`~datamodules.remote.pool.pool`: a node's connections shared by its processes),
  the file being read before the files fetched ahead.
* **Retried per part**, from the byte it reached, as
  :func:`~datamodules.remote.retrying.call_with_retries` says.
* **Servers without ranges.** The first answer tells: a ``206`` gives the size
  (``Content-Range``); a ``200`` (a server that ignores ``Range``, as Python's
  ``http.server``) is the whole body, read in order over that one response (a retry skips
  the bytes already read). Other fsspec filesystems (S3, GCS...) read parts with
  ``cat_file(start, end)``, the size from ``info`` unless given.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from datamodules.remote.pool import READING, pool
from datamodules.remote.retrying import CutShort, RemoteError, RemoteOptions, call_with_retries
from datamodules.remote.streams import ResumableRemoteFile, check_response, remote_fs, skip_body
from datamodules.remote.versions import check_remote

__all__ = ["MAX_PART", "MIN_PART", "READ_AHEAD", "ReadAhead", "RemoteFile", "download", "part_size"]

#: Bytes per range request: a file's bytes spread over the process's connections, within
#: these bounds (chosen by measurement: docs/benchmarks.md, "Remote streams").
MIN_PART, MAX_PART = 1 << 20, 8 << 20
#: Bytes a :class:`ReadAhead` keeps requested ahead of the reader.
READ_AHEAD = 32 << 20
_CHUNK = 256 << 10  # bytes per read from a response body


def part_size(options: RemoteOptions, size: int | None, connections: int) -> int:
    """Bytes per range request for ``size`` bytes: ``options.part_size`` when given; else the
    bytes spread over ``connections`` requests, from :data:`MIN_PART` to :data:`MAX_PART`
    (:data:`MIN_PART` while the size is unknown)."""
    if options.part_size:
        return options.part_size
    if size is None:
        return MIN_PART
    share = -(-size // max(1, connections))
    return min(MAX_PART, max(MIN_PART, -(-share // _CHUNK) * _CHUNK))


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
        if not self.http:  # (one HEAD, as fsspec's open makes): the size, the version
            info = call_with_retries(url, options, lambda: self.fs.info(self.fpath))
            check_remote(url, info.get("size"), info)  # the version indexed, if registered
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
        if part.guess and not (self.ranges or (status == 206 and self.ranges is None)):
            # A part asked for before the first answer, on a server that ignores ranges: the
            # first part is the whole file (if the server serves ranges after all, the part
            # is asked again).
            stream.close()
            part.void, part.end = part.end, part.start
            part.known.set()
            return None
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
            total = None if match.group(3) == "*" else int(match.group(3))
            if total is not None:
                self.size = total
            check_response(self.url, stream, total, headers)
            if self.ranges is None:
                self.ranges = self.size is not None
                if self.ranges:
                    _RANGES.add(self.host)
            if self.size is not None and part.end is not None:
                part.end = min(part.end, self.size)
        else:  # the whole body: the server ignores ranges
            whole = None if headers.get("Content-Encoding") else length
            check_response(self.url, stream, whole, headers)
            if length is not None:
                self.size = length
                if part.end is not None:
                    part.end = min(part.end, length)
            if self.ranges is not True:  # (one 200 among 206s: a part read from it, below)
                _NO_RANGES.add(self.host)
                _RANGES.discard(self.host)
                self.ranges = False
                if part.first and part.whole:  # a download: this response to the end
                    part.end = None
            try:
                skip_body(stream, pos, _CHUNK)
            except BaseException:
                stream.close()
                raise
        part.known.set()
        return stream


class _Part:
    """Bytes ``[start, end)`` of a file, handed from a request to a reader as they arrive."""

    def __init__(
        self,
        start: int,
        end: int | None,
        first: bool = False,
        guess: bool = False,
        whole: bool = False,
    ) -> None:
        self.start, self.end = start, end
        #: If the first answer is the whole body (no ranges), read it all (else [start, end)).
        self.whole = whole
        #: The file's first request, whose answer tells its size and range support.
        self.first = first
        #: Asked for, not first, before that answer: void if ranges are not served.
        self.guess = guess
        #: A void guess's end (it was answered 200), to ask again if ranges are served.
        self.void: int | None = None
        self.known = threading.Event()
        self.chunks: deque[bytes] = deque()
        self.cond = threading.Condition()
        self.done = False
        self.error: BaseException | None = None
        self.abandoned = False
        self.future: Future | None = None

    def put(self, offset: int, data: bytes) -> bool:
        with self.cond:
            if self.abandoned:
                return False
            self.chunks.append(data)
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

    The part being read and as many after it as the process may request at once (at most
    :data:`READ_AHEAD` bytes) are kept requested; without ``size``, the first part is
    requested alone (its answer tells the size). Until a first answer says whether the server
    serves ranges, the parts after the first are a guess: a ``200`` to one of them is closed
    at once (and the part asked again if the server serves ranges after all). From a server
    that ignores ranges, the rest after the first part is read in this thread, over one
    response (:class:`~datamodules.remote.streams.ResumableRemoteFile`), as a pool thread
    waiting on a slow reader would hold one of the process's connections.

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
        self.options = options
        self.step: int | None = None  # bytes per part
        self.pos = offset
        self.next = offset  # the first byte not yet requested
        self.parts: deque[_Part] = deque()
        self.asked_first = False
        self.seq: ResumableRemoteFile | None = None  # a server without ranges: in order
        self.pool.add_file()  # shares the pool's connections with the others read or fetched
        self.counted = True

    def readable(self) -> bool:
        return True

    def _request(self, start: int, end: int, first: bool = False, guess: bool = False) -> _Part:
        part = _Part(start, end, first, guess)
        part.future = self.pool.submit(READING, lambda: self.file.fetch(part, part.put))
        part.future.add_done_callback(lambda future: part.finish(future))
        return part

    def _add(self, end: int, first: bool = False, guess: bool = False) -> None:
        self.parts.append(self._request(self.next, end, first, guess))
        self.next = end
        self.asked_first = self.asked_first or first

    def _fill(self) -> None:
        """Requests parts up to ``window`` ahead; without the size, the first part alone."""
        file = self.file
        if self.next < 0:
            return  # all requested
        if file.ranges is False:  # once the parts asked for are read: one response to the end,
            if not self.parts:  # read in this thread (it would hold a connection of the pool)
                if file.size is None or self.pos < file.size:
                    self.seq = ResumableRemoteFile(self.url, self.pos, self.options)
                self.next = -1
            return
        if file.size is None:
            if not self.parts:  # the first request: its answer tells the size
                self._add(self.next + part_size(self.options, None, 1), first=True)
            return
        if self.step is None:  # once the size is known
            self.step = part_size(self.options, file.size - self.next, self.pool.share())
        window = max(2, min(self.pool.size + 1, READ_AHEAD // self.step))
        while len(self.parts) < window and self.next < file.size:
            # Read once: the first answer may come meanwhile (a part asked for before it is a
            # guess, void if ranges are not served; none is asked for after a 200).
            ranges = file.ranges
            if ranges is False:
                break
            first = ranges is None and not self.asked_first  # its answer says if ranges are
            self._add(min(self.next + self.step, file.size), first, ranges is None and not first)

    def readinto(self, buffer: Any) -> int:
        while True:
            self._fill()
            if not self.parts:
                if self.seq is None:
                    return 0
                n = self.seq.readinto(buffer)
                self.pos += n
                return n
            head = self.parts[0]
            data = head.take(len(buffer))
            if data:
                n = len(data)
                buffer[:n] = data
                self.pos += n
                return n
            self.parts.popleft()
            if head.void is not None and self.file.ranges:  # ranges are served after all
                self.parts.appendleft(self._request(head.start, head.void))
            elif head.void is not None:  # no ranges: the rest is read in order from here
                self._drop()

    def _drop(self) -> None:
        for part in self.parts:
            part.abandon()
        self.parts.clear()

    def close(self) -> None:
        if getattr(self, "counted", False):
            self.counted = False
            self.pool.add_file(-1)
        self._drop()
        if self.seq is not None:
            self.seq.close()
        super().close()


def download(
    url: str,
    path: str,
    options: RemoteOptions,
    size: int | None = None,
    priority: tuple[int, int] = READING,
    requested: threading.Event | None = None,
    share: int | None = None,
) -> int:
    """Downloads ``url`` into ``path`` over concurrent range requests (parts written at their
    offsets); returns the bytes written. ``size``: the file's, if known (all parts are then
    requested at once; the answers' ``Content-Range`` must agree). ``priority``: in the
    process's pool (:data:`~datamodules.remote.pool.READING`: needed now). ``requested``:
    set once every part has been asked for (or the download ended). ``share``: the
    connections its parts spread over (default: the pool's; a caller fetching several files
    at once gives each a share, so that each is asked for in fewer, larger parts).

    Raises:
        RemoteError: A part failed for good (after its retries), naming the URL.
    """
    file = RemoteFile(url, options, size)
    workers = pool(options)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    written = 0
    lock = threading.Lock()
    failed = threading.Event()
    parts: list[_Part] = []

    def sink(offset: int, data: bytes) -> bool:
        nonlocal written
        if failed.is_set():
            return False
        os.pwrite(fd, data, offset)
        with lock:
            written += len(data)
        return True

    def start(begin: int, end: int | None, first: bool = False, guess: bool = False) -> _Part:
        part = _Part(begin, end, first, guess, whole=True)
        part.future = workers.submit(priority, lambda: file.fetch(part, sink))
        parts.append(part)
        return part

    def wait() -> None:
        for part in parts:
            assert part.future is not None
            part.future.result()

    try:
        begin: int | None = 0
        if file.ranges is not False and file.size is None:  # the first answer tells the size
            first = start(0, part_size(options, None, 1), first=True)
            first.known.wait()
            if file.ranges is None:  # no answer: its error
                wait()
            begin = first.end  # None: that answer was the whole file
        if begin is None:
            pass
        elif file.ranges is False or file.size is None:
            start(begin, None)  # one response to the end
        else:
            step = part_size(options, file.size - begin, share or workers.size)
            for a in range(begin, file.size, step):
                ranges = file.ranges  # read once: the first answer may come meanwhile
                if ranges is False:  # a 200 to the first part, which reads the whole body
                    break
                start(
                    a, min(a + step, file.size), ranges is None and a == 0, ranges is None and a > 0
                )
        if requested is not None:
            requested.set()
        wait()
        void = [part for part in parts if part.void is not None]
        if void and file.ranges:  # guesses answered 200 by a server that serves ranges
            for part in void:
                start(part.start, part.void)
            wait()
    except BaseException:
        failed.set()
        for part in parts:
            assert part.future is not None
            part.future.cancel()
        raise
    finally:
        if requested is not None:
            requested.set()
        for part in parts:  # no write after the file is closed
            with contextlib.suppress(BaseException):
                part.future.result()  # type: ignore[union-attr]
        os.close(fd)
    if file.size is not None and file.size != written:  # a file changed while downloading
        raise RemoteError(url, None, f"{written} bytes downloaded, the server says {file.size}")
    return written
