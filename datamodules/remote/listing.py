"""Finding files and telling their versions apart, local or remote, and where caches live.

* :func:`expand_files`: a path, URL, glob, brace pattern, directory or list of them -> the
  files, each once.
* :func:`expand_braces`: webdataset's shard patterns (``shard-{000000..000099}.tar``,
  ``{train,extra}-*.tar``), expanded in order by the ``braceexpand`` package;
  :func:`check_not_pipe`: ``pipe:`` URLs refused, naming the fsspec URL to use instead.
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
from datamodules.remote.retrying import RemoteOptions, call_with_retries

__all__ = [
    "VALIDATORS",
    "cache_root",
    "check_not_pipe",
    "expand_braces",
    "expand_files",
    "file_version",
    "has_magic",
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
