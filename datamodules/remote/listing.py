"""Finding files and telling their versions apart, local or remote, and where caches live.

* :func:`expand_files`: a path, URL, glob, brace pattern, directory or list of them -> the
  files, each once.
* :func:`expand_braces`: webdataset's shard patterns (``shard-{000000..000099}.tar``,
  ``{train,extra}-*.tar``), expanded in order by the ``braceexpand`` package;
  :func:`check_not_pipe`: ``pipe:`` URLs refused, naming the fsspec URL to use instead.
* :func:`list_folder`: every file under a remote folder, recursively (an object store's
  listing, or over HTTP the links of the folder's index page), with the version its listing
  gives.
* :func:`file_version`: what identifies one version of a file (size and mtime, or for a URL
  its size and ETag / Last-Modified), so that caches built from it know when it changed.
* :func:`cache_root`: ``$DATAMODULES_CACHE/NAME``, or ``~/.cache/datamodules/NAME``.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from datamodules.core.checks import check_not_pipe  # (its home: argument checks)
from datamodules.remote.files import default_options, is_remote, local_path, remote_fs
from datamodules.remote.retrying import RemoteError, RemoteOptions, call_with_retries

__all__ = [
    "VALIDATORS",
    "cache_root",
    "check_not_pipe",
    "expand_braces",
    "expand_files",
    "file_version",
    "has_magic",
    "list_folder",
]

#: A brace pattern: ``{a,b}`` or ``{000..099}`` (what braceexpand expands).
_BRACES = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")

#: Keys of ``fs.info()`` that change when a remote file does (the first ones found are kept).
VALIDATORS = (
    "ETag",
    "etag",
    "md5Hash",
    "LastModified",
    "Last-Modified",
    "last_modified",
    "updated",
    "mtime",
    "generation",
)


def cache_root(name: str) -> str:
    """``$DATAMODULES_CACHE/name``, else ``$XDG_CACHE_HOME/datamodules/name`` (by default
    ``~/.cache/datamodules/name``)."""
    root = os.environ.get("DATAMODULES_CACHE")
    if root:
        return os.path.join(root, name)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "datamodules", name)


def has_magic(spec: str) -> bool:
    """Whether ``spec`` is a glob pattern."""
    return any(c in spec for c in "*?[")


def expand_braces(spec: str) -> list[str]:
    """A webdataset shard pattern expanded in order, as the ``braceexpand`` package does:
    ``"s-{000..002}.tar"`` -> ``["s-000.tar", "s-001.tar", "s-002.tar"]`` (zero padding
    kept), ``"{a,b}-*.tar"`` -> ``["a-*.tar", "b-*.tar"]``; a spec without braces unchanged."""
    if not _BRACES.search(spec):
        return [spec]
    from braceexpand import braceexpand

    return list(braceexpand(spec))


def expand_files(
    spec: str | os.PathLike | Iterable[str | os.PathLike],
    options: RemoteOptions | None = None,
    known: Callable[[str], bool] | None = None,
    what: str = "shard",
) -> list[str]:
    """Turns a file specification into a list of file paths/URLs.

    Args:
        spec: A path or URL; a glob (``"data/*.jsonl"``, ``"s3://b/train-*.parquet"``; local
            globs may use ``**``); a brace pattern (``"shard-{000000..000099}.tar"``,
            ``"{train,extra}-*.tar"``, expanded in order first); a local directory (its files
            that ``known`` accepts); or a list of any of those. Globs and directories expand
            sorted; a list and a brace pattern keep their order.
        options: How remote globs are listed: storage options, retries, timeout.
        known: Which files of a directory to keep (default: all).
        what: What a file is called in the errors (``"shard"``, ``"file"``).

    Returns:
        The files, each once.

    Raises:
        ValueError: Nothing matched, a file is listed twice (it would be read twice), or a
            ``pipe:`` URL (:func:`check_not_pipe`).
    """
    given = [spec] if isinstance(spec, (str, os.PathLike)) else list(spec)
    items: list[str] = []
    for item in given:
        text = os.fspath(item)
        check_not_pipe(text)
        items.extend(expand_braces(text))
    out: list[str] = []
    for item in items:
        if is_remote(item):
            if has_magic(item):
                fs, pattern = remote_fs(item, options)
                opts = options or default_options()
                paths = call_with_retries(item, opts, lambda fs=fs, p=pattern: fs.glob(p))
                found = sorted(fs.unstrip_protocol(p) if "://" not in p else p for p in paths)
            else:
                found = [item]
        else:
            local = local_path(item)
            if has_magic(local):
                found = sorted(p for p in glob.glob(local, recursive=True) if os.path.isfile(p))
            elif os.path.isdir(local):
                found = sorted(
                    str(p)
                    for p in Path(local).rglob("*")
                    if p.is_file() and (known is None or known(str(p)))
                )
            else:
                found = [local]
        if not found:
            raise ValueError(f"no {what} matches {item!r}.")
        out.extend(found)
    if not out:
        raise ValueError(f"no {what}s given: {spec!r}.")
    seen: set[str] = set()
    for path in out:
        key = path if is_remote(path) else os.path.abspath(path)
        if key in seen:
            raise ValueError(f"{what} {path!r} is listed twice; its records would be read twice.")
        seen.add(key)
    return out


def file_version(path: str, options: RemoteOptions | None = None) -> dict[str, Any] | None:
    """What identifies this version of a file; None if it cannot be told apart.

    A local file: its absolute path, size and mtime (ns). A URL: its size and the validators
    its server gives (ETag, Last-Modified, ...; see :data:`VALIDATORS`).

    Raises:
        FileNotFoundError: A local file that does not exist.
        RemoteError: A URL that cannot be reached (naming it and the status).
    """
    if not is_remote(path):
        local = local_path(path)
        st = os.stat(local)
        return {"path": os.path.abspath(local), "size": st.st_size, "mtime": st.st_mtime_ns}
    opts = options or default_options()
    fs, fpath = call_with_retries(path, opts, lambda: remote_fs(path, opts))
    info = call_with_retries(path, opts, lambda: fs.info(fpath))
    found = {k: str(info[k]) for k in VALIDATORS if info.get(k)}
    if not found or info.get("size") is None:
        return None
    return {"path": path, "size": info["size"], **found}


#: What to give instead of a remote folder that cannot be listed.
_INSTEAD = "Give a manifest (JSONL) of its files, tar shards or a Parquet table instead."


def list_folder(
    url: str, options: RemoteOptions | None = None
) -> list[tuple[str, str, str | None]]:
    """Every file under the remote folder ``url``, recursively, sorted by URL.

    An object store (S3, GCS, ...) is listed by fsspec's ``find``. HTTP has no listing of its
    own: the folder's index page is read for its links, as fsspec's HTTP filesystem does (a
    link ending in ``/`` is a sub-folder, listed in turn), which Python's ``http.server`` and
    the autoindex of nginx or Apache give. Each call lists afresh (fsspec's cached listings of
    the folder and under it are dropped first).

    Args:
        url: The folder's URL (with or without a trailing ``/``).
        options: Storage options, retries and timeout of the requests.

    Returns:
        ``(url, relative, version)`` per file: its URL, its path under the folder
        (``/``-separated, the percent-escapes of an HTTP link decoded) and what its listing
        says of its version (its size and ETag / Last-Modified; None where the listing gives
        none, as an HTTP index page does).

    Raises:
        ValueError: The folder cannot be listed (naming the URL, the status, and what to give
            instead: over HTTP, a server without index pages) or lists no file.
    """
    opts = options or default_options()
    root = url.rstrip("/")
    http = root.split("://", 1)[0].lower() in ("http", "https")
    try:
        fs, path = call_with_retries(url, opts, lambda: remote_fs(root + "/", opts))
        found = _http_files(fs, root, opts) if http else _store_files(fs, path, url, opts)
    except RemoteError as error:
        how = (
            "over HTTP a folder is listed from its index page of links (as Python's "
            "http.server gives)"
            if http
            else "listed with fsspec"
        )
        raise ValueError(
            f"{url}: cannot list the folder ({how}): {error.reason}. {_INSTEAD}"
        ) from error
    if not found:
        how = (
            "its index page has no links to files (a server without index pages cannot list "
            "a folder over HTTP)"
            if http
            else "is it the folder's URL?"
        )
        raise ValueError(f"{url}: the folder lists no files ({how}). {_INSTEAD}")
    return sorted(found)


def _forget_listings(fs: Any, base: str) -> None:
    """Drops fsspec's cached listings of ``base``, its parents and everything under it (an
    object's size and ETag are taken from them: a rewritten one would be read at its old
    size)."""
    fs.invalidate_cache(base)
    for key in [k for k in list(fs.dircache) if k.startswith(base.rstrip("/") + "/")]:
        fs.dircache.pop(key, None)


def _http_files(fs: Any, root: str, opts: RemoteOptions) -> list[tuple[str, str, str | None]]:
    """The files linked from ``root``'s index page and its sub-folders' (a ``/`` link)."""
    from urllib.parse import unquote

    found: list[tuple[str, str, str | None]] = []
    pending = [root + "/"]
    while pending:
        folder = pending.pop()
        _forget_listings(fs, folder)
        entries = call_with_retries(folder, opts, lambda f=folder: fs.ls(f, detail=True))
        for entry in entries:
            name = entry["name"]
            if not name.startswith(folder) or name == folder:
                continue  # a link out of the folder (fsspec keeps those under it only)
            if name.endswith("/"):
                pending.append(name)
            else:
                found.append((name, unquote(name[len(root) + 1 :]), None))
    return found


def _store_files(
    fs: Any, path: str, url: str, opts: RemoteOptions
) -> list[tuple[str, str, str | None]]:
    """The files under ``path`` of an object store, each with its size and first validator."""
    base = path.rstrip("/")
    _forget_listings(fs, base)
    infos = call_with_retries(url, opts, lambda: fs.find(base, detail=True))
    found: list[tuple[str, str, str | None]] = []
    for name, info in infos.items():
        if info.get("type") == "directory" or not name.startswith(base + "/"):
            continue
        tags = [str(info[k]) for k in VALIDATORS if info.get(k)]
        version = ";".join([str(info.get("size")), *tags[:1]])
        found.append((fs.unstrip_protocol(name), name[len(base) + 1 :], version))
    return found
