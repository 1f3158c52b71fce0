"""Opening shard files, local or remote (fsspec), for sequential or random access.

* :func:`open_binary`: a buffered binary stream of a shard from a byte offset: a local file
  seeks; a remote one is read ahead over concurrent range requests
  (:mod:`~datamodules.remote.ranges`), or, when the server ignores byte ranges (as Python's
  ``http.server`` does), over one response with the bytes before the offset dropped.
* :func:`open_seekable_remote`: a random-access remote file (Parquet footers), or a spooled
  local copy when the server cannot serve ranges.
* :func:`decompress`: gzip and zstd streams over a raw one; a stream cut short raises
  ``EOFError`` after the bytes before the cut (:class:`ZstdFrames` for zstd).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
from functools import cache
from typing import IO, Any

from datamodules.remote.retrying import CutShort, RemoteOptions, call_with_retries
from datamodules.remote.versions import check_remote

__all__ = [
    "BUFFER",
    "RangeFile",
    "ResumableRemoteFile",
    "ZstdFrames",
    "check_response",
    "decompress",
    "default_options",
    "is_remote",
    "local_path",
    "open_binary",
    "open_seekable_remote",
    "remote_fs",
    "skip_body",
]

BUFFER = 1 << 20


@cache
def default_options() -> RemoteOptions:
    """The options of remote reads outside a DataModule: no storage options, 5 retries, 60 s."""
    return RemoteOptions()


def is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def local_path(path: str) -> str:
    return os.path.expanduser(path[len("file://") :] if path.startswith("file://") else path)


def remote_fs(url: str, options: RemoteOptions | None = None) -> tuple[Any, str]:
    """``(filesystem, path)`` of a URL, with ``options``' storage options and timeout."""
    import fsspec

    options = options or default_options()
    protocol = url.split("://", 1)[0]
    return fsspec.core.url_to_fs(url, **options.fs_options(protocol))


def open_binary(
    path: str, offset: int = 0, options: RemoteOptions | None = None, size: int | None = None
) -> IO[bytes]:
    """Opens a shard for binary reading at ``offset``.

    A local file seeks. A remote one is a :class:`~datamodules.remote.ranges.ReadAhead`: its
    bytes in order while the next parts download over concurrent range requests, each retried
    and resumed where it stopped when the network fails; a server that ignores ranges is read
    over one response, the bytes before ``offset`` skipped. ``size``: the file's, if known.
    """
    if not is_remote(path):
        f = open(local_path(path), "rb", buffering=BUFFER)  # noqa: SIM115
        if offset:
            f.seek(offset)
        return f
    from datamodules.remote.ranges import ReadAhead

    return io.BufferedReader(ReadAhead(path, offset, options or default_options(), size), BUFFER)


def check_response(url: str, stream: Any, total: int | None, found: Any) -> None:
    """Checks that an opened response is of the version indexed
    (:func:`~datamodules.remote.versions.check_remote`: its total size and the validators in
    ``found``, headers or ``info()``); else closes ``stream`` and raises ShardChanged."""
    try:
        check_remote(url, total, found or {})
    except BaseException:
        with contextlib.suppress(Exception):
            stream.close()
        raise


def skip_body(stream: Any, skip: int, chunk: int = BUFFER) -> None:
    """Reads and drops the first ``skip`` bytes of a whole body (a server that ignored a
    range request).

    Raises:
        CutShort: The body ended first.
    """
    offset = skip
    while skip:
        data = stream.read(min(skip, chunk))
        if not data:
            raise CutShort(f"ended {skip} bytes before offset {offset}")
        skip -= len(data)


class ResumableRemoteFile(io.RawIOBase):
    """A remote file read sequentially from an offset, resumed at the byte offset on failure:
    how :class:`~datamodules.remote.ranges.ReadAhead` reads from a server that ignores ranges.

    Each (re)open is one streaming request from the current position: HTTP(S) with a
    ``Range: bytes=N-`` header (a ``200`` answer to it, from a server that ignores ranges, has
    its first N bytes skipped), other filesystems by a seek. A transient failure while opening
    or reading (see :mod:`datamodules.remote.retrying`) closes the stream, waits, and opens
    it again at the position already read, so no byte is read twice or lost; a body that ends
    before the length its response announced counts as such a failure.

    Args:
        url: The file's URL.
        offset: The first byte to read.
        options: Storage options, retries and timeout (default: :func:`default_options`).
    """

    def __init__(self, url: str, offset: int = 0, options: RemoteOptions | None = None) -> None:
        super().__init__()
        self.url = url
        self.options = options or default_options()
        self.fs, self.fpath = call_with_retries(url, self.options, lambda: remote_fs(url, options))
        protocols = (self.fs.protocol,) if isinstance(self.fs.protocol, str) else self.fs.protocol
        self.http = bool({"http", "https"} & set(protocols))
        self.pos = offset
        self.end: int | None = None  # where the current response's body ends, if announced
        self.stream: Any = None

    def readable(self) -> bool:
        return True

    def _open(self) -> None:
        if self.http:
            headers = {"Range": f"bytes={self.pos}-"} if self.pos else {}
            # A size given to fsspec spares the HEAD request it otherwise sends before each
            # GET; a streaming file (block_size=0) does not use it.
            stream = self.fs.open(self.fpath, "rb", block_size=0, size=-1, headers=headers)
            response = getattr(stream, "r", None)
            length = getattr(response, "content_length", None)
            status = getattr(response, "status", 200)
            self._check(stream, response, status, length)
            if self.pos and status == 200:  # the server ignored the range: skip to pos
                skip_body(stream, self.pos)
                self.end = length
            else:
                self.end = None if length is None else self.pos + length
        else:
            stream = self.fs.open(self.fpath, "rb")
            size = getattr(stream, "size", None)
            # The version opened is the one indexed (s3fs: the details of its HEAD).
            total = size if isinstance(size, int) else None
            check_response(self.url, stream, total, getattr(stream, "details", None))
            stream.seek(self.pos)
            self.end = size if isinstance(size, int) else None
        self.stream = stream

    def _check(self, stream: Any, response: Any, status: int, length: int | None) -> None:
        """The response is of the version indexed (:mod:`~datamodules.remote.versions`):
        its total size (``Content-Range``, or the length of a whole body) and validators."""
        headers = getattr(response, "headers", None) or {}
        total = None
        span = headers.get("Content-Range", "")
        if "/" in span and span.rsplit("/", 1)[1].strip().isdigit():
            total = int(span.rsplit("/", 1)[1])
        elif status == 200 and length is not None and not headers.get("Content-Encoding"):
            total = length
        check_response(self.url, stream, total, headers)

    def _reset(self) -> None:
        stream, self.stream = self.stream, None
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()

    def _read_some(self, size: int) -> bytes:
        if self.stream is None:
            self._open()
        data = self.stream.read(size)
        if not data and self.end is not None and self.pos < self.end:
            raise CutShort(f"{self.end - self.pos} of its bytes never came")
        return data

    def readinto(self, buffer: Any) -> int:
        data = call_with_retries(
            self.url, self.options, lambda: self._read_some(len(buffer)), self._reset
        )
        n = len(data)
        buffer[:n] = data
        self.pos += n
        return n

    def close(self) -> None:
        self._reset()
        super().close()


def decompress(raw: IO[bytes], compression: str | None) -> IO[bytes]:
    if compression is None:
        return raw
    if compression == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    try:
        import zstandard
    except ImportError as err:
        raise ImportError("reading .zst shards needs `pip install zstandard`.") from err
    return io.BufferedReader(ZstdFrames(raw, zstandard.ZstdDecompressor()), BUFFER)


class ZstdFrames(io.RawIOBase):
    """The decompressed bytes of a zstd stream of one or more frames. A stream that ends
    inside a frame raises ``EOFError`` once the bytes before the cut are read, as gzip does:
    zstandard's ``stream_reader`` ends quietly there, which would lose the rest of a shard
    without a word."""

    def __init__(self, raw: IO[bytes], decompressor: Any) -> None:
        self._raw, self._zstd = raw, decompressor
        self._frame: Any = None  # the frame being decompressed
        self._left = b""  # input after the end of the last frame
        self._out = memoryview(b"")  # decompressed, not yet read

    def readable(self) -> bool:
        return True

    def _more(self) -> bytes:
        while True:
            data, self._left = self._left or self._raw.read(1 << 16), b""
            if not data:
                if self._frame is not None:
                    raise EOFError("the zstd stream ends inside a frame (the file is cut)")
                return b""
            if self._frame is None:
                self._frame = self._zstd.decompressobj()
            out = self._frame.decompress(data)
            if self._frame.eof:  # the next frame (or nothing) starts in what is left
                self._left, self._frame = self._frame.unused_data, None
            if out:
                return out

    def readinto(self, buffer: Any) -> int:
        if not self._out:
            self._out = memoryview(self._more())
        n = min(len(buffer), len(self._out))
        buffer[:n] = self._out[:n]
        self._out = self._out[n:]
        return n


def open_seekable_remote(path: str, options: RemoteOptions | None = None) -> IO[bytes]:
    """A random-access remote file (for Parquet footers and row groups).

    Every read is a range request, retried as :func:`call_with_retries` says. A server that
    ignores byte ranges gets a local spooled copy instead (on disk past 64 MiB, so memory
    stays bounded), downloaded through a :class:`ResumableRemoteFile`.
    """
    import tempfile

    options = options or default_options()
    fs, fpath = call_with_retries(path, options, lambda: remote_fs(path, options))
    info = call_with_retries(path, options, lambda: fs.info(fpath))
    size = info.get("size")
    check_remote(path, size, info)  # the version indexed (datamodules.remote.versions)
    if size is not None and _serves_ranges(path, fs, fpath, size, options):
        return io.BufferedReader(RangeFile(path, fs, fpath, int(size), options), BUFFER)
    spool = tempfile.SpooledTemporaryFile(max_size=64 << 20)  # noqa: SIM115
    with open_binary(path, 0, options) as src:
        while chunk := src.read(BUFFER):
            spool.write(chunk)
    spool.seek(0)
    return spool  # type: ignore[return-value]


def _serves_ranges(path: str, fs: Any, fpath: str, size: int, options: RemoteOptions) -> bool:
    if not size:
        return True
    start = max(size - 8, 0)
    tail = call_with_retries(path, options, lambda: fs.cat_file(fpath, start=start, end=size))
    return len(tail) == size - start


class RangeFile(io.RawIOBase):
    """A seekable remote file of known size; each read is one retried range request."""

    def __init__(self, url: str, fs: Any, fpath: str, size: int, options: RemoteOptions) -> None:
        super().__init__()
        self.url, self.fs, self.fpath, self.size, self.options = url, fs, fpath, size, options
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: Any) -> int:
        stop = min(self.size, self.pos + len(buffer))
        if stop <= self.pos:
            return 0
        start = self.pos

        def fetch() -> bytes:
            data = self.fs.cat_file(self.fpath, start=start, end=stop)
            if len(data) != stop - start:
                raise CutShort(f"a range of {stop - start} bytes gave {len(data)}")
            return data

        data = call_with_retries(self.url, self.options, fetch)
        buffer[: len(data)] = data
        self.pos = stop
        return len(data)
