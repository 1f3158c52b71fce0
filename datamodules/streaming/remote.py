"""Opening shard files, local or remote (fsspec), for sequential or random access.

* :func:`open_binary`: a buffered binary stream of a shard from a byte offset: a local file
  seeks; an HTTP(S) URL from offset 0 is one streaming GET; otherwise a seek, or, when the
  server ignores byte ranges (as Python's ``http.server`` does), the bytes before the offset
  are read and dropped.
* :func:`open_seekable_remote`: a random-access remote file (Parquet footers), or a spooled
  local copy when the server cannot serve ranges.
* :func:`decompress`: gzip and zstd streams over a raw one.
"""

from __future__ import annotations

import gzip
import io
import os
from typing import IO

BUFFER = 1 << 20


def is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def local_path(path: str) -> str:
    return os.path.expanduser(path[len("file://") :] if path.startswith("file://") else path)


def open_binary(path: str, offset: int = 0) -> IO[bytes]:
    """Opens a shard for binary reading at ``offset`` (seeks when it can, else skips bytes)."""
    if not is_remote(path):
        f = open(local_path(path), "rb", buffering=BUFFER)  # noqa: SIM115
        if offset:
            f.seek(offset)
        return f
    import fsspec

    fs, fpath = fsspec.core.url_to_fs(path)
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    is_http = bool({"http", "https"} & set(protocols))
    if offset == 0 and is_http:  # one streaming GET rather than a range request per block
        return io.BufferedReader(fs.open(fpath, "rb", block_size=0), BUFFER)
    f = fs.open(fpath, "rb")
    if offset:
        try:
            f.seek(offset)
            f.read(1)
            f.seek(offset)
        except (ValueError, OSError):  # the server does not serve byte ranges: stream and skip
            f.close()
            f = fs.open(fpath, "rb", block_size=0) if is_http else fs.open(fpath, "rb")
            left = offset
            while left:
                chunk = f.read(min(left, BUFFER))
                if not chunk:
                    break
                left -= len(chunk)
    return io.BufferedReader(f, BUFFER)


def decompress(raw: IO[bytes], compression: str | None) -> IO[bytes]:
    if compression is None:
        return raw
    if compression == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    try:
        import zstandard
    except ImportError as err:
        raise ImportError("reading .zst shards needs `pip install zstandard`.") from err
    reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    return io.BufferedReader(reader, BUFFER)


def open_seekable_remote(path: str) -> IO[bytes]:
    """A random-access remote file; if the server ignores byte ranges, a local spooled copy
    (on disk past 64 MiB, so memory stays bounded)."""
    import tempfile

    import fsspec

    fs, fpath = fsspec.core.url_to_fs(path)
    f = fs.open(fpath, "rb")
    try:
        size = f.size
        if size:
            f.seek(max(size - 8, 0))
            f.read(8)
            f.seek(0)
        return f
    except (ValueError, OSError):
        f.close()
    spool = tempfile.SpooledTemporaryFile(max_size=64 << 20)  # noqa: SIM115
    with fs.open(fpath, "rb", block_size=0) as src:
        while chunk := src.read(BUFFER):
            spool.write(chunk)
    spool.seek(0)
    return spool  # type: ignore[return-value]
