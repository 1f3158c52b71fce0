"""Where AudioDataModule's inputs and audio files are read from: local paths, or URLs (HTTP(S),
S3, anything fsspec opens) through the shared remote layer (:mod:`datamodules.remote`).

:class:`AudioFiles` holds the remote options of streams (``storage_options``, ``retries``,
``timeout``, ``cache_dir``, ``cache_limit``) and is what the clip index and the decoder open
files with:

* manifests, tars and Parquet / Arrow tables are read by the shard layer with its options
  (:attr:`AudioFiles.options`): retried, resumed at the byte offset;
* an audio file is opened for random access
  (:class:`~datamodules.remote.random_access.RandomAccessFiles`:
  range requests, or a spooled copy from a server that ignores ranges), so that a header read
  or a segment reads what it needs; with ``cache_dir`` it is downloaded once into the shared
  cache (:class:`~datamodules.remote.cache.ShardCache`, LRU within ``cache_limit``), its version
  (size and ETag / Last-Modified) checked once per process.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from typing import IO

from datamodules.audio.decoding import AudioInfo, audio_info
from datamodules.audio.header_cache import HeaderCache
from datamodules.remote.files import is_remote
from datamodules.remote.random_access import RandomAccessFiles
from datamodules.remote.retrying import RemoteError, RemoteOptions

__all__ = ["AudioFiles", "folder_of", "resolve"]


def folder_of(path: str) -> str:
    """The folder of a manifest: its absolute local folder, or its URL up to the last ``/``."""
    if is_remote(path):
        return path.rsplit("/", 1)[0]
    return os.path.dirname(os.path.abspath(path))


def resolve(given: str, base: str) -> str:
    """``given`` (a manifest's ``audio_filepath``) as a path or URL: absolute paths and URLs as
    they are, relative ones joined to ``base`` (a folder or a folder's URL)."""
    if os.path.isabs(given) or "://" in given:
        return given
    return posixpath.join(base, given) if is_remote(base) else os.path.join(base, given)


class AudioFiles:
    """Opens inputs and audio files, local or remote (see the module's docstring).

    Args:
        options: How remote files are read (storage options, retries, timeout); None: the
            defaults.
        cache_dir: Keep remote audio files in this directory (None: read them in place).
        cache_limit: Bytes the cache may hold (LRU), or None.
        index_dir: Where headers are cached across runs
            (:class:`~datamodules.audio.header_cache.HeaderCache`); None: read at every setup.
    """

    def __init__(
        self,
        options: RemoteOptions | None = None,
        cache_dir: str | os.PathLike | None = None,
        cache_limit: int | None = None,
        index_dir: str | None = None,
    ) -> None:
        #: Opens files whole or by range (the shared remote layer).
        self.remote = RandomAccessFiles(options, cache_dir, cache_limit)
        self.options = self.remote.options
        #: Headers read once per input and cached across runs.
        self.headers = HeaderCache(index_dir, self.options)

    def exists(self, path: str) -> bool:
        """Whether a local file exists; a URL is taken to (a missing one fails when read,
        named), so that a manifest costs no request per clip."""
        return is_remote(path) or os.path.exists(path)

    def info(self, path: str) -> AudioInfo:
        """``path``'s header (frames, rate, channels): from the header cache, else read.

        Raises:
            AudioDecodeError: The header cannot be read (missing, unreachable, not audio).
        """
        return self.headers.info(path, lambda p: audio_info(p, self))

    def open(self, path: str) -> contextlib.AbstractContextManager[str | IO[bytes]]:
        """A local path, or a binary file object of a URL (a local copy with ``cache_dir``):
        :meth:`~datamodules.remote.random_access.RandomAccessFiles.open`.

        Raises:
            RemoteError: The URL cannot be read (after the retries), naming it and the status.
        """
        return self.remote.open(path)

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        """What :meth:`open` raises for a file that cannot be read."""
        return (RemoteError, OSError)
