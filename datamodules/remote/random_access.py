"""Random access to local and remote files: opened whole, or read by byte range.

:class:`RandomAccessFiles` holds the remote options of streams (``storage_options``, retries,
timeout, and an optional shared cache) and is what kinds that read a file's parts at batch
time go through (audio clips, images inside tar shards):

* :meth:`RandomAccessFiles.open` gives a local path, or a random-access file object of a URL
  (range requests, or a spooled copy from a server that ignores ranges), or with
  ``cache_dir`` a local copy downloaded once into the shared cache
  (:class:`~datamodules.remote.cache.ShardCache`, LRU within ``cache_limit``);
* :meth:`RandomAccessFiles.read_range` reads ``size`` bytes at ``offset``: a seek in a local
  file (or a cached copy), one retried range request otherwise.

A URL's version (size and ETag / Last-Modified) is asked once per process; with ``expected``
(the version an index was built from) a file that changed since raises, naming it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import IO, Any

from datamodules.remote.cache import ShardCache
from datamodules.remote.files import is_remote, open_seekable_remote
from datamodules.remote.listing import file_version
from datamodules.remote.retrying import CutShort, RemoteError, RemoteOptions, call_with_retries
from datamodules.remote.streams import default_options, local_path, remote_fs

__all__ = ["RandomAccessFiles", "version_text"]


def version_text(found: dict[str, Any] | None) -> tuple[str | None, int | None]:
    """``(version, size)`` of what :func:`~datamodules.remote.listing.file_version` gives: the
    validators (ETag, Last-Modified, ...) as one string, and the size."""
    found = dict(found or {})
    size = found.pop("size", None)
    found.pop("path", None)
    found.pop("mtime", None)
    return ";".join(f"{k}={v}" for k, v in sorted(found.items())) or None, size


class RandomAccessFiles:
    """Opens local and remote files whole or by byte range (see the module's docstring).

    Args:
        options: How remote files are read (storage options, retries, timeout); None: the
            defaults.
        cache_dir: Keep remote files in this directory (None: read them in place).
        cache_limit: Bytes the cache may hold (LRU), or None.
    """

    def __init__(
        self,
        options: RemoteOptions | None = None,
        cache_dir: str | os.PathLike | None = None,
        cache_limit: int | None = None,
    ) -> None:
        self.options = options or default_options()
        self.cache = None if cache_dir is None else ShardCache(cache_dir, cache_limit, self.options)
        self._versions: dict[str, tuple[str | None, int | None]] = {}
        self._fs: dict[str, tuple[Any, str]] = {}
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_versions"], state["_fs"] = {}, {}  # checked and opened once per process
        return state

    def version(self, url: str) -> tuple[str | None, int | None]:
        """``(version, size)`` of a URL, asked once per process."""
        if url not in self._versions:
            self._versions[url] = version_text(file_version(url, self.options))
        return self._versions[url]

    def check(self, url: str, expected: tuple[str | None, int | None]) -> None:
        """Raises when ``url`` is no longer the version ``expected`` (an index's)."""
        found = self.version(url)
        if expected[1] is not None and found[1] is not None and expected != found:
            raise RemoteError(
                url, None, f"changed since it was indexed (then {expected}, now {found}); "
                "rebuild the index (delete its cache folder)",
            )  # fmt: skip

    @contextlib.contextmanager
    def open(self, path: str) -> Iterator[str | IO[bytes]]:
        """A local path, or a binary file object of a URL (a local copy with ``cache_dir``).

        Raises:
            RemoteError: The URL cannot be read (after the retries), naming it and the status.
        """
        if not is_remote(path):
            yield path
            return
        if self.cache is not None:
            version, size = self.version(path)
            with self.cache.open(path, version, size) as local:
                yield local
            return
        file = open_seekable_remote(path, self.options)
        try:
            yield file
        finally:
            file.close()

    def read_range(self, path: str, offset: int, size: int) -> bytes:
        """``size`` bytes of ``path`` at ``offset`` (a seek locally or in a cached copy, one
        retried range request otherwise).

        Raises:
            OSError: The file cannot be read or ends before the range does (naming it).
        """
        if not is_remote(path) or self.cache is not None:
            with self.open(path) as local:
                assert isinstance(local, str)
                with open(local_path(local), "rb") as file:
                    file.seek(offset)
                    data = file.read(size)
            if len(data) != size:
                raise OSError(f"{path}: ends inside bytes {offset}..{offset + size}")
            return data
        if self._pid != os.getpid():  # a forked worker makes its own clients
            self._fs, self._pid = {}, os.getpid()
        if path not in self._fs:
            self._fs[path] = call_with_retries(
                path, self.options, lambda: remote_fs(path, self.options)
            )
        fs, fpath = self._fs[path]

        def fetch() -> bytes:
            data = fs.cat_file(fpath, start=offset, end=offset + size)
            if len(data) != size:
                raise CutShort(f"a range of {size} bytes gave {len(data)}")
            return data

        return call_with_retries(path, self.options, fetch)

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        """What :meth:`open` and :meth:`read_range` raise for a file that cannot be read."""
        return (RemoteError, OSError)
