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

import gzip
import io
from typing import IO, Any

from datamodules.remote.ranges import ReadAhead
from datamodules.remote.retrying import CutShort, RemoteOptions, call_with_retries
from datamodules.remote.streams import (
    BUFFER,
    default_options,
    is_remote,
    local_path,
    remote_fs,
)
from datamodules.remote.versions import check_remote

__all__ = [
    "BUFFER",
    "RangeFile",
    "ZstdFrames",
    "decompress",
    "default_options",
    "is_remote",
    "local_path",
    "open_binary",
    "open_seekable_remote",
    "remote_fs",
]


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
    return io.BufferedReader(ReadAhead(path, offset, options or default_options(), size), BUFFER)


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
