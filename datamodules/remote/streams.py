"""One remote file's bytes at the lowest level: the filesystem of a URL, and one response read
sequentially from a byte offset, resumed there when the network fails.

Both the openers (:mod:`~datamodules.remote.files`) and the concurrent range reads
(:mod:`~datamodules.remote.ranges`) stand on this module; it imports neither.
"""

from __future__ import annotations

import contextlib
import io
import os
from functools import cache
from typing import Any

from datamodules.remote.retrying import CutShort, RemoteOptions, call_with_retries
from datamodules.remote.versions import check_remote

__all__ = [
    "BUFFER",
    "ResumableRemoteFile",
    "check_response",
    "default_options",
    "is_remote",
    "local_path",
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
