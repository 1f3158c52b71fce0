"""Audio headers read once into the clip index and cached across runs.

A clip whose duration its input does not give (a manifest record without ``duration``, every
file of a class folder) is measured from its file's header: frames, rate and channels, no
decode. :class:`HeaderCache` keeps those headers per input, in one small file per input under
``index_cache`` (``$DATAMODULES_CACHE/audio`` by default), so that a later run over the same
inputs reads no header at all:

* a manifest's entry is keyed by the manifest's version (local: path, size and mtime; a URL:
  its size and ETag / Last-Modified, one request); a class folder's by its path or URL;
* each local audio file's header is kept with its size and mtime, checked by a ``stat``: a file
  rewritten since is read again; a remote file's header is trusted while its manifest is
  unchanged (so that a warm cache makes no request per clip); the files of a remote folder
  are checked against the version its listing gives (an object store's size and ETag; none
  from an HTTP index page: kept while listed).

Each input's file is written atomically (a temporary file renamed into place) when it gained
headers; ranks and runs that race write the same content.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from datamodules.audio.decoding import AudioInfo
from datamodules.remote.files import is_remote
from datamodules.remote.listing import cache_root, file_version
from datamodules.remote.retrying import RemoteOptions

__all__ = ["HeaderCache", "index_cache_dir"]

#: The format of a cache file; another one is ignored (and rewritten).
VERSION = 1


def index_cache_dir(value: Any) -> str | None:
    """The directory of ``index_cache``: a directory as given, None or True: the default
    (``cache_root("audio")``), False: None (headers are read at every setup).

    Raises:
        TypeError: Another type, naming the argument and what is accepted.
    """
    if value is False:
        return None
    if value is None or value is True:
        return cache_root("audio")
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    raise TypeError(
        f"index_cache={value!r} is not accepted: use a directory, None or True (the default "
        f"{cache_root('audio')}) or False (headers read at every setup)."
    )


def _stamp(path: str) -> str | None:
    """A local file's size and mtime (None for a URL: trusted under its manifest)."""
    if is_remote(path):
        return None
    try:
        st = os.stat(path)
    except OSError:
        return "missing"
    return f"{st.st_size}:{st.st_mtime_ns}"


class HeaderCache:
    """Headers of one input at a time, from and into its cache file.

    Args:
        directory: Where the cache files live; None keeps headers in memory only.
        options: How a remote manifest's version is asked for.

    Attributes:
        reads: Headers read from files (not from the cache) by this process.
    """

    def __init__(self, directory: str | None, options: RemoteOptions | None = None) -> None:
        self.directory, self.options = directory, options
        self.reads = 0
        self._file: str | None = None
        self._key: Any = None
        self._headers: dict[str, list[Any]] = {}
        self._changed = False
        self._pending: tuple[str, bool] | None = None
        self._stamps: dict[str, str | None] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(
            _file=None, _key=None, _headers={}, _changed=False, _pending=None, _stamps=None
        )
        return state

    def _load(self, key: Any) -> None:
        digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
        self._file = os.path.join(self.directory, f"{digest}.json") if self.directory else None
        self._key, self._headers, self._changed = key, {}, False
        if self._file is None:
            return
        with contextlib.suppress(OSError, ValueError):
            with open(self._file) as f:
                saved = json.load(f)
            if saved.get("version") == VERSION and saved.get("key") == key:
                self._headers = dict(saved["headers"])

    def _save(self) -> None:
        if self._file is None or not self._changed:
            return
        os.makedirs(os.path.dirname(self._file), exist_ok=True)
        body = {"version": VERSION, "key": self._key, "headers": self._headers}
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(self._file), suffix=".part")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(body, f)
            os.replace(tmp, self._file)
        finally:
            with contextlib.suppress(OSError):
                os.remove(tmp)

    @contextlib.contextmanager
    def of(
        self, source: str, folder: bool = False, stamps: dict[str, str | None] | None = None
    ) -> Iterator[None]:
        """Within the block, headers are those cached for the input ``source`` (a manifest, or
        with ``folder`` a class folder), loaded at the first header asked for (a manifest whose
        records all give durations costs nothing); saved after the block if new ones were
        read. ``stamps``: the version of each remote file as its folder's listing gives it
        (a header kept under another is read again)."""
        self._pending, self._stamps = (source, folder), stamps
        try:
            yield
        finally:
            self._save()
            self._pending, self._file, self._headers, self._stamps = None, None, {}, None

    def _open_pending(self) -> None:
        if self._pending is None:
            return
        source, folder = self._pending
        self._pending = None
        if folder:
            self._load(
                {"folder": source.rstrip("/") if is_remote(source) else os.path.abspath(source)}
            )
        else:
            self._load({"manifest": file_version(source, self.options) or {"path": source}})

    def info(self, path: str, read: Callable[[str], AudioInfo]) -> AudioInfo:
        """``path``'s header from the cache when its file is unchanged, else ``read(path)``
        (kept for the next run)."""
        self._open_pending()
        stamp = self._stamps.get(path) if self._stamps is not None else _stamp(path)
        kept = self._headers.get(path)
        if kept is not None and kept[3] == stamp:
            return AudioInfo(int(kept[0]), int(kept[1]), int(kept[2]))
        info = read(path)
        self.reads += 1
        self._headers[path] = [info.frames, info.sample_rate, info.channels, stamp]
        self._changed = True
        return info
