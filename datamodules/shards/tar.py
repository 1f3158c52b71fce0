"""Tar shards as WebDataset writes them: members grouped into records by key, decoded by extension.

Convention (webdataset's):

* A member ``a/b.c.jpg`` has the key ``a/b`` (its path up to the first dot of its basename)
  and the extension ``c.jpg`` (the rest, lower-cased). A record is the run of adjacent members
  with one key: ``{"__key__": "a/b", "__url__": shard, "c.jpg": value, ...}``.
* Values are decoded by the last part of the extension as webdataset's ``.decode()`` decodes
  them (:mod:`~datamodules.shards.tar_fields`): ``cls`` ... -> int, ``txt`` ... -> str,
  ``json`` -> parsed, ``npy`` -> an array, ``mp`` -> unpacked (with msgpack installed),
  ``X.gz`` -> decompressed and decoded as ``X``; anything else stays bytes. ``pyd``,
  ``pickle``, ``pkl`` and ``pth`` members are refused: nothing is ever unpickled.
* Members named ``__*__`` (metadata), members without an extension and non-file members
  (directories, links) are not part of any record.

A record is bad when a member of it does not decode, is refused, repeats an extension of the
record, or when its key already named an earlier record of the shard (its members are not
adjacent). The archive is damaged where a header is corrupt or the file ends anywhere but
after its two end-of-archive zero blocks (inside a header, a member's data or padding, right
after a member): the records before stay readable, the record open at the damage is bad (a
member of it is cut, or its later members may be lost) and nothing after the damage can be
read. Under ``on_error="raise"`` indexing the shard raises,
naming the shard and the member or key; under ``"skip"`` bad records are left out and
counted, and the index remembers where they start so that every reader, from any offset,
leaves out the same ones.

:func:`scan_tar` indexes a shard (record count, the offset of every 16th record, the bad
records); :func:`read_tar` yields its records ``[start, stop)``, seeking to the nearest
indexed offset. Compressed shards (``.tar.gz``, ``.tgz``, ``.tar.zst``) are read from the
beginning.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from typing import Any

from datamodules.core.skipped import Skipped
from datamodules.remote.files import decompress, is_remote, local_path, open_binary
from datamodules.remote.retrying import RemoteOptions
from datamodules.shards.errors import RecordError, ShardError
from datamodules.shards.shard_index import ShardIndex
from datamodules.shards.tar_fields import (
    INT_EXTENSIONS,
    REFUSED_EXTENSIONS,
    TEXT_EXTENSIONS,
    decode_field,
    encode_field,
    typed,
)
from datamodules.shards.tar_members import TarDamage, TarMembers

__all__ = [
    "INT_EXTENSIONS",
    "REFUSED_EXTENSIONS",
    "TEXT_EXTENSIONS",
    "decode_field",
    "encode_field",
    "read_tar",
    "scan_tar",
    "split_name",
]

EVERY = 16  # the index keeps the offset of every 16th record
_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_META = re.compile(r"__[^/]*__($|/)")


def split_name(name: str) -> tuple[str, str] | None:
    """``(key, extension)`` of a member name (extension lower-cased); None for a member that
    belongs to no record (``__*__`` metadata, no extension)."""
    if _META.match(name) or ("/" not in name and name.startswith("__") and name.endswith("__")):
        return None
    match = _NAME.match(name)
    if match is None:
        return None
    return match.group(1), match.group(2).lower()


# ---------------------------------------------------------------------------- grouping


class _Group:
    """One record's members as read: where it starts, its key, its decoded fields, and what
    makes it bad (None: good)."""

    __slots__ = ("start", "key", "fields", "problem")

    def __init__(self, start: int, key: str) -> None:
        self.start, self.key = start, key
        self.fields: dict[str, Any] = {}
        self.problem: str | None = None


def _groups(
    members: TarMembers,
    wanted: Callable[[str], bool],
    seen: set[str] | None,
) -> Iterator[_Group]:
    """The records of the archive from the members' position, as groups.

    ``wanted(ext)`` says which members' data to read and decode (the others are stepped
    over); ``seen`` collects keys to find one that repeats (None: do not check). A damaged
    archive ends the groups: the group open at the damage (a member of it cut, or members of
    it perhaps lost after the damage) is yielded with the damage as its problem and marks the
    damage counted, then :class:`TarDamage` is raised.
    """
    group: _Group | None = None
    while True:
        try:
            member = members.next()
        except TarDamage as damage:
            if group is not None:
                if not damage.at_end:  # members of the open record may be lost
                    reason = damage.reason
                    if damage.member is not None and repr(damage.member) not in reason:
                        reason += f" in member {damage.member!r}"
                    group.problem = f"{reason}; the record may lack members"
                    damage.counted = True
                yield group
            raise
        if member is None:
            break
        parts = split_name(member.name)
        if parts is None:
            members.skip()
            continue
        key, ext = parts
        if group is None or key != group.key:
            if group is not None:
                yield group
            group = _Group(member.start, key)
            if seen is not None:
                if key in seen:
                    group.problem = f"key {key!r} repeats an earlier record's (not adjacent)"
                seen.add(key)
        try:
            if ext in group.fields:
                members.skip()
                group.problem = group.problem or f"member {member.name!r} repeats .{ext}"
            elif wanted(ext):
                try:
                    group.fields[ext] = decode_field(ext, members.read())
                except ValueError as err:
                    group.problem = group.problem or f"member {member.name!r}: {err}"
            else:
                members.skip()
                group.fields[ext] = None
        except TarDamage as damage:
            group.problem = damage.reason
            if damage.member not in damage.reason:  # a cut compressed stream
                group.problem = f"member {member.name!r} is cut: {damage.reason}"
            damage.counted = True
            yield group
            raise
    if group is not None:
        yield group


def _size(path: str, compression: str | None) -> int | None:
    if compression is None and not is_remote(path):
        return os.path.getsize(local_path(path))
    return None


def _open(
    path: str,
    compression: str | None,
    offset: int,
    options: RemoteOptions | None,
    size: int | None = None,
):
    try:
        raw = open_binary(path, offset, options, size)
        return raw, decompress(raw, compression)
    except Exception as err:
        raise ShardError(path, None, f"cannot open shard ({type(err).__name__}: {err})") from err


def _damage(path: str, damage: TarDamage) -> RecordError:
    return ShardError(path, f"member {damage.member!r}" if damage.member else None,
                      f"damaged tar archive at byte {damage.offset}: {damage.reason}")  # fmt: skip


def _lost(damage: TarDamage) -> str:
    """What a skip counter says of damage that no record it cut stands for."""
    where = f" (member {damage.member!r})" if damage.member else ""
    lost = "the records before it are whole" if damage.at_end else "nothing after it is read"
    return f"damaged tar archive: {damage.reason}{where}; {lost}"


def scan_tar(
    path: str, compression: str | None, on_error: str, options: RemoteOptions | None = None
) -> ShardIndex:
    """Indexes a tar shard: its good records, the offset of every 16th, where bad ones start.

    Every member whose decoding can fail (all but plain bytes) is read and decoded;
    bytes members are stepped over (a seek in a local uncompressed file).

    Raises:
        RecordError: A bad record or a damaged archive under ``on_error="raise"``, naming the
            shard and the member or key.
    """
    skips = Skipped()
    every = EVERY if compression is None else 0
    offsets: list[int] = []
    bad: list[int] = []
    count = 0
    damaged = None
    raw, stream = _open(path, compression, 0, options)
    members = TarMembers(stream, 0, _size(path, compression))
    try:
        try:
            for group in _groups(members, typed, set()):
                if group.problem is not None:
                    if on_error == "raise":
                        raise RecordError(path, f"key {group.key!r}", group.problem)
                    skips.record(path, f"key {group.key!r}", group.problem)
                    bad.append(group.start)
                    continue
                if every and count % every == 0:
                    offsets.append(group.start)
                count += 1
        except TarDamage as damage:
            if on_error == "raise":
                raise _damage(path, damage) from damage
            damaged = str(_damage(path, damage))
            if not damage.counted:  # else the record it cut was counted above
                skips.record(path, f"byte {damage.offset}", _lost(damage))
        except OSError as err:  # a dropped connection, an unreadable file
            reason = f"cannot read shard ({type(err).__name__}: {err})"
            raise ShardError(path, None, reason) from err
    finally:
        stream.close()
        raw.close()
    return ShardIndex(
        path,
        "tar",
        compression,
        on_error,
        count,
        every=every if offsets else 0,
        offsets=tuple(offsets),
        skipped=skips.records,
        problems=tuple(skips),
        damage=damaged,
        bad_offsets=tuple(bad),
    )


def read_tar(
    path: str,
    compression: str | None,
    on_error: str,
    start: int = 0,
    stop: int | None = None,
    index: ShardIndex | None = None,
    counter: Skipped | None = None,
    options: RemoteOptions | None = None,
    fields: Callable[[str], bool] | None = None,
) -> Iterator[dict[str, Any]]:
    """Yields the records ``[start, stop)`` of a tar shard (see the module docstring).

    Args:
        path: Path or URL.
        compression: ``"gzip"``, ``"zstd"`` or None.
        on_error: ``"raise"`` or ``"skip"`` bad records; must match ``index``.
        start: First record (bad records, under ``"skip"``, take no position).
        stop: One past the last record (None: to the end).
        index: The shard's index: seeks to the nearest kept offset and knows the bad records.
        counter: Receives the records skipped here (only without an index, which counted
            them already).
        options: How a remote shard is opened.
        fields: Which extensions to read (None: all); the others are stepped over and left
            out of the records.
    """
    offset, skip = 0, start
    if index is not None:  # what follows the indexed records is damage the index found
        stop = index.count if stop is None else min(stop, index.count)
        if start >= stop:
            return
    if index is not None and index.every and index.offsets and start >= index.every:
        slot = min(start // index.every, len(index.offsets) - 1)
        offset, skip = index.offsets[slot], start - slot * index.every
    # With an index the bad records are known by where they start; without one they are found
    # here, from the beginning, the way the index finds them.
    bad = set(index.bad_offsets) if index is not None else None
    wanted = fields or (lambda ext: True)

    def read_member(ext: str) -> bool:  # the records skipped to reach ``start`` are not decoded
        return (skip == 0 and wanted(ext)) or (bad is None and typed(ext))

    shard = index.path if index is not None else path  # a cached copy is named as its URL
    raw, stream = _open(path, compression, offset, options, getattr(index, "size", None))
    # The index checked every header (and is keyed by the file's size and time or ETag).
    members = TarMembers(stream, offset, _size(path, compression), verify=index is None)
    left = None if stop is None else stop - start
    try:
        for group in _groups(members, read_member, set() if bad is None else None):
            if group.problem is not None or (bad is not None and group.start in bad):
                reason = group.problem or "left out when the shard was indexed"
                if on_error == "raise":
                    raise RecordError(shard, f"key {group.key!r}", reason)
                if bad is None and counter is not None:
                    counter.record(shard, f"key {group.key!r}", reason)
                continue
            if skip:
                skip -= 1
                continue
            record: dict[str, Any] = {"__key__": group.key, "__url__": shard}
            for ext, value in group.fields.items():
                if wanted(ext):
                    record[ext] = value
            yield record
            if left is not None:
                left -= 1
                if left == 0:
                    return
    except TarDamage as damage:
        if on_error == "raise":
            raise _damage(shard, damage) from damage
        if bad is None and counter is not None and not damage.counted:
            counter.record(shard, f"byte {damage.offset}", _lost(damage))
    except OSError as err:
        raise ShardError(shard, None, f"cannot read shard ({type(err).__name__}: {err})") from err
    finally:
        stream.close()
        raw.close()
