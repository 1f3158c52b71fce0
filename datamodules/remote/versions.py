"""Checking, when a shard is opened, that it is still the version its index describes.

An index says how many records a shard holds and where they start. Setup trusts it without
asking the storage (a dataset index file lists the shards; the index cache remembers remote
shards by URL), so a shard rewritten since would be read wrongly. Instead, every open of a
shard compares what the storage answers with what the index recorded:

* :func:`expect`: what a reader registers before it opens a shard (its size, the ETag /
  Last-Modified it was indexed at, the index that listed it, cache entries to drop if it
  changed). Registered per process, by URL.
* :func:`check_remote`: called by the remote openers (:mod:`datamodules.remote.files`) with
  the response's total size and validators: no request of its own.
* :func:`check_local`: a local file's size and modification time (a ``stat``).
* :class:`ShardChanged`: the error, naming the shard, the index and both versions. A remote
  shard indexed by the cache has its cache entry dropped first, so the next setup indexes it
  again.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from datamodules.remote.retrying import RemoteError

__all__ = ["Expected", "ShardChanged", "check_local", "check_remote", "expect", "validators_of"]


@dataclass(frozen=True)
class Expected:
    """What a shard must look like when opened.

    Attributes:
        size: Its size in bytes (None: not known).
        validators: ``(name, value)`` pairs it was indexed at (ETag, Last-Modified, mtime).
        listed_in: The dataset index file that listed it (None: the index cache).
        forget: Cache files to delete when it changed (its trusted index entry).
    """

    size: int | None
    validators: tuple[tuple[str, str], ...] = ()
    listed_in: str | None = None
    forget: tuple[str, ...] = ()


class ShardChanged(RemoteError):
    """A shard that is not the version its index describes; it is not read."""

    def __init__(self, url: str, status: Any = None, reason: str = "", transient: bool = False):
        super().__init__(url, status, reason, False)


_EXPECTED: dict[str, Expected] = {}


def expect(url: str, expected: Expected | None) -> None:
    """Registers what ``url`` must look like when this process opens it (None: forget)."""
    if expected is None:
        _EXPECTED.pop(url, None)
    else:
        _EXPECTED[url] = expected


def validators_of(version: str | None) -> tuple[tuple[str, str], ...]:
    """The validators in a :class:`~datamodules.shards.shard_index.ShardIndex` ``version``
    (a JSON object of ``size`` and ETag / Last-Modified / mtime)."""
    if not version:
        return ()
    try:
        data = json.loads(version)
    except ValueError:
        return ()
    if not isinstance(data, dict):
        return ()
    return tuple((k, str(v)) for k, v in sorted(data.items()) if k not in ("path", "size"))


def _norm(key: Any) -> str:
    return str(key).lower().replace("-", "").replace("_", "")


def _lookup(found: Mapping[str, Any], name: str) -> str | None:
    want = _norm(name)
    for key, value in found.items():
        if value is not None and _norm(key) == want:
            return str(value)
    return None


def check_remote(url: str, size: int | None, found: Mapping[str, Any]) -> None:
    """Compares a remote shard's response (total ``size``, headers or ``info()`` in ``found``)
    with what was registered for ``url``.

    Raises:
        ShardChanged: The size or a validator differs (naming shard, index and both values).
    """
    exp = _EXPECTED.get(url)
    if exp is None:
        return
    changes = []
    if exp.size is not None and size is not None and int(size) != exp.size:
        changes.append(("size", exp.size, int(size)))
    for name, old in exp.validators:
        new = _lookup(found, name)
        if new is not None and new != old:
            changes.append((name, old, new))
    if changes:
        _changed(url, exp, changes)


def check_local(path: str, local: str) -> None:
    """Compares a local shard (a ``stat`` of ``local``) with what was registered for ``path``.

    Raises:
        ShardChanged: Its size or modification time differs.
    """
    exp = _EXPECTED.get(path)
    if exp is None:
        return
    try:
        st = os.stat(local)
    except OSError:
        return  # missing: the open itself says so
    changes: list[tuple[str, Any, Any]] = []
    if exp.size is not None and st.st_size != exp.size:
        changes.append(("size", exp.size, st.st_size))
    mtime = dict(exp.validators).get("mtime")
    if not changes and mtime is not None and str(st.st_mtime_ns) != mtime:
        changes.append(("mtime", mtime, st.st_mtime_ns))
    if changes:
        _changed(path, exp, changes)


def _changed(url: str, exp: Expected, changes: list[tuple[str, Any, Any]]) -> None:
    for file in exp.forget:
        with contextlib.suppress(OSError):
            os.remove(file)
    if exp.listed_in is not None:
        name, old, new = changes[0]
        what = f"is {new} bytes" if name == "size" else f"has {name} {new!r}"
        said = f"{old} bytes" if name == "size" else f"{name} {old!r}"
        raise ShardChanged(
            url,
            reason=(
                f"the shard {what}, but the dataset index {exp.listed_in} says {said}: it was "
                "rewritten after the index was made, and its records would be read wrongly, so "
                f"it is not read. Make the index again (python -m datamodules index ... "
                f"--output {exp.listed_in})."
            ),
        )
    detail = ", ".join(
        f"{name} {old} -> {new}" if name == "size" else f"{name} {old!r} -> {new!r}"
        for name, old, new in changes
    )
    raise ShardChanged(
        url,
        reason=(
            f"the shard changed since it was indexed ({detail}): its record count and offsets "
            "no longer hold, so it is not read. Its cached index was dropped: run again and "
            "setup indexes it anew."
        ),
    )
