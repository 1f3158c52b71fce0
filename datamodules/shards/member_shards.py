"""The shards of a split whose records have located members, and reading those members back
with the shards' versions checked: what the kinds built on
:mod:`~datamodules.shards.member_records` share (detection: an image and a JSON of boxes per
record; segmentation: an image and a mask).

* :func:`is_member_spec`: whether a split's spec names such shards (a list, a URL, a pattern,
  a ``.tar`` / ``.parquet`` file, a dataset index ``*.index.json``, or a folder of shards);
* :func:`member_shard_files`: the shards it names, in order;
* :func:`shard_versions`: each remote shard's ``(version, size)`` at indexing time, what
  :class:`MemberBytes` checks once per process before reading a member of it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from datamodules.remote.files import is_remote
from datamodules.remote.listing import expand_files
from datamodules.remote.random_access import RandomAccessFiles
from datamodules.shards.dataset_index import parse_dataset_index
from datamodules.shards.member_records import MemberReader, MemberRef, is_member_shard

__all__ = ["MemberBytes", "is_member_spec", "member_shard_files", "shard_versions"]

#: What a split is told when it names no shard.
ACCEPTED = "tar or Parquet shards (paths, URLs, globs, brace patterns, a folder or a list)"


def is_member_spec(spec: Any, layouts: Sequence[str] = ()) -> bool:
    """Whether a split's spec names shards: a list, a URL, a brace pattern or glob, a
    ``.tar`` / ``.parquet`` file, a dataset index, or a folder holding shard files and none of
    the sub-folders ``layouts`` (which mark another input, such as a VOC root)."""
    if isinstance(spec, (list, tuple)):
        return True
    text = os.fspath(spec)
    if text.lower().endswith(".index.json"):
        return True
    if is_remote(text) or "{" in text or "*" in text or "?" in text or is_member_shard(text):
        return True
    if os.path.isdir(text) and not any(os.path.exists(os.path.join(text, s)) for s in layouts):
        return any(is_member_shard(name) for name in os.listdir(text))
    return False


def _listed(path: str, files: RandomAccessFiles) -> list[str]:
    """The shards a dataset index (``*.index.json``, webdataset's wids format) lists."""
    size = files.version(path)[1] if is_remote(path) else os.path.getsize(path)
    return parse_dataset_index(files.read_range(path, 0, int(size or 0)), path).paths


def member_shard_files(
    spec: Any,
    files: RandomAccessFiles,
    what: str = "shard",
    error: type[Exception] = ValueError,
) -> list[str]:
    """The shards a split names, in order (folders and globs sorted; a dataset index
    ``*.index.json`` gives the shards it lists).

    Args:
        spec: A path or URL, a glob or brace pattern, a folder, a dataset index, or a list.
        files: How remote listings and indexes are read.
        what: What a shard is called in the error (``"detection shard"``).
        error: The error raised for a file that is not a shard, with the message only.
    """
    given = [os.fspath(s) for s in (spec if isinstance(spec, (list, tuple)) else [spec])]
    items = []
    for item in given:
        items += _listed(item, files) if item.lower().endswith(".index.json") else [item]
    found = expand_files(items, files.options, known=is_member_shard, what="shard")
    bad = [path for path in found if not is_member_shard(path)]
    if bad:
        raise error(f"{bad[0]}: not a {what}: give {ACCEPTED}")
    return found


def shard_versions(
    shards: Sequence[str], files: RandomAccessFiles, error: type[Exception] = FileNotFoundError
) -> dict[str, tuple[str | None, int | None]]:
    """``{shard: (version, size)}`` of the remote shards (asked once per process and kept
    by ``files``); raises ``error`` naming a local shard that does not exist."""
    versions = {}
    for shard in shards:
        if is_remote(shard):
            versions[shard] = files.version(shard)
        elif not os.path.isfile(shard):
            raise error(f"{shard}: the shard does not exist")
    return versions


class MemberBytes:
    """Reads a member an index refers to (its :meth:`MemberRef.encode` string), checking a
    remote shard's version against the index's once per process.

    Args:
        files: How local and remote shards are read.
    """

    def __init__(self, files: RandomAccessFiles | None = None) -> None:
        self.reader = MemberReader(files)

    @property
    def files(self) -> RandomAccessFiles:
        """How shards are read."""
        return self.reader.files

    def __call__(self, ref_text: str, versions: dict[str, Any] | None = None) -> tuple[bytes, str]:
        """The member's bytes, and how errors name it (``"shard.tar: key 'k' (.png)"``).

        Raises:
            RemoteError: A remote shard changed since ``versions`` were taken.
            OSError: The member cannot be read, naming shard and key.
        """
        ref = MemberRef.decode(ref_text)
        if is_remote(ref.shard) and versions is not None and ref.shard in versions:
            version, size = versions[ref.shard]
            self.files.check(ref.shard, (version, size))
        return self.reader.read(ref), ref.where
