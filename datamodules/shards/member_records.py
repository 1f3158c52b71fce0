"""Records of tar and Parquet shards read once for their small members, their large ones
located for reading later: what a kind that indexes shards and reads their images at batch
time is built on (detection: an image and a ``json`` of boxes; segmentation: an image and a
mask).

:func:`scan_members` reads a shard's records once, through the shard layer (local, or remote
with the remote options): of a tar, the members whose extension is in ``read`` are read
(raw bytes), and those in ``located`` are stepped over while their byte range is kept; of a
Parquet file, the ``read`` columns are read and each row's ``located`` columns are reached
by row. Each record becomes a :class:`MemberRecord`, and each located member a
:class:`MemberRef`, a short string an index can hold (a path-like locator).

:class:`MemberReader` reads a referenced member at batch time: a tar member by its byte range
(one seek, or one retried range request through
:class:`~datamodules.remote.random_access.RandomAccessFiles`), a Parquet cell by reading its
row group's column (the last few row groups kept per process).
"""

from __future__ import annotations

import bisect
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from datamodules.remote.files import is_remote, local_path, open_binary
from datamodules.remote.random_access import RandomAccessFiles
from datamodules.shards.errors import ShardError
from datamodules.shards.formats import detect_format
from datamodules.shards.parquet import parquet_batches, parquet_file
from datamodules.shards.tar import split_name
from datamodules.shards.tar_members import TarDamage, TarMembers

__all__ = ["MemberReader", "MemberRecord", "MemberRef", "is_member_shard", "scan_members"]

#: Shard files :func:`scan_members` reads.
SHARD_SUFFIXES = (".tar", ".parquet", ".pq")


def is_member_shard(path: str) -> bool:
    """Whether ``path`` names a shard :func:`scan_members` reads (an uncompressed ``.tar``, or
    Parquet)."""
    return path.lower().endswith(SHARD_SUFFIXES)


@dataclass(frozen=True)
class MemberRef:
    """Where one member of a record is: a tar member's byte range, or a Parquet cell.

    Attributes:
        shard: The shard's path or URL.
        key: The record's key (a tar key, or ``row N`` of a Parquet file, from 0).
        name: The member's extension (tar) or column (Parquet).
        offset: Tar: the member data's first byte; Parquet: the row.
        size: Tar: the member's bytes; Parquet: -1.
    """

    shard: str
    key: str
    name: str
    offset: int
    size: int

    def encode(self) -> str:
        """The reference as one string (what an index stores as the image's path)."""
        return json.dumps([self.shard, self.key, self.name, self.offset, self.size])

    @classmethod
    def decode(cls, text: str) -> MemberRef:
        """The reference :meth:`encode` gave."""
        shard, key, name, offset, size = json.loads(text)
        return cls(shard, key, name, int(offset), int(size))

    @property
    def where(self) -> str:
        """The record and member, for messages: ``"shard.tar: key 'k' (.jpg)"``."""
        place = f"key {self.key!r}" if self.size >= 0 else self.key
        return f"{self.shard}: {place} (.{self.name})"


@dataclass
class MemberRecord:
    """One record of a shard.

    Attributes:
        shard: Its shard.
        key: Its key (tar) or ``row N`` (Parquet, from 0).
        read: The members read: raw bytes (tar), the values (Parquet).
        located: References of the located members present.
        problem: What makes the record unreadable (a member repeated), or None.
    """

    shard: str
    key: str
    read: dict[str, Any] = field(default_factory=dict)
    located: dict[str, MemberRef] = field(default_factory=dict)
    problem: str | None = None

    @property
    def where(self) -> str:
        """``"shard: key 'k'"`` or ``"shard: row N"``."""
        return f"{self.shard}: key {self.key!r}" if not self.key.startswith("row ") else (
            f"{self.shard}: {self.key}"
        )  # fmt: skip


def scan_members(
    path: str,
    *,
    read: Sequence[str],
    located: Sequence[str],
    files: RandomAccessFiles | None = None,
) -> Iterator[MemberRecord]:
    """The records of a tar or Parquet shard, read once (see the module's docstring).

    Args:
        path: The shard's path or URL (``.tar`` uncompressed, or ``.parquet``).
        read: Extensions (tar) or columns (Parquet) to read.
        located: Extensions or columns to locate (a :class:`MemberRef` each).
        files: How remote shards are read (None: local, default options).

    Raises:
        ShardError: The shard cannot be opened, is damaged, is compressed (byte ranges need
            an uncompressed tar) or lacks a column, naming it.
    """
    files = files or RandomAccessFiles()
    fmt, compression = detect_format(path)
    if fmt == "parquet":
        yield from _parquet_records(path, read, located, files)
        return
    if fmt != "tar" or compression is not None:
        raise ShardError(
            path, None, "not a shard of records with located members: give an uncompressed "
            ".tar (members are read by byte range) or a .parquet file",
        )  # fmt: skip
    yield from _tar_records(path, set(read), set(located), files)


def _tar_records(
    path: str, read: set[str], located: set[str], files: RandomAccessFiles
) -> Iterator[MemberRecord]:
    size = None if is_remote(path) else os.path.getsize(local_path(path))
    try:
        stream = open_binary(path, 0, files.options, size)
    except Exception as err:
        raise ShardError(path, None, f"cannot open shard ({type(err).__name__}: {err})") from err
    members = TarMembers(stream, 0, size)
    record: MemberRecord | None = None
    try:
        while (member := members.next()) is not None:
            parts = split_name(member.name)
            if parts is None:
                members.skip()
                continue
            key, ext = parts
            if record is None or key != record.key:
                if record is not None:
                    yield record
                record = MemberRecord(path, key)
            if ext in record.read or ext in record.located:
                record.problem = record.problem or f"member {member.name!r} repeats .{ext}"
                members.skip()
            elif ext in read:
                record.read[ext] = members.read()
            else:
                if ext in located:
                    record.located[ext] = MemberRef(path, key, ext, member.data, member.size)
                members.skip()
    except TarDamage as damage:
        raise ShardError(path, None, f"damaged tar archive: {damage}") from damage
    except OSError as err:
        raise ShardError(path, None, f"cannot read shard ({type(err).__name__}: {err})") from err
    finally:
        stream.close()
    if record is not None:
        yield record


def _parquet_records(
    path: str, read: Sequence[str], located: Sequence[str], files: RandomAccessFiles
) -> Iterator[MemberRecord]:
    with parquet_file(path, files.options) as pf:
        names = set(pf.schema_arrow.names)
        columns = [c for c in read if c in names]
        present = [c for c in located if c in names]
        # Nothing to read (every member located): the rows are counted from the footer.
        rows = (
            (values for batch in parquet_batches(pf, path, 0, None, columns)
             for values in batch.to_pylist())
            if columns else ({} for _ in range(pf.metadata.num_rows))
        )  # fmt: skip
        for row, values in enumerate(rows):
            key = f"row {row}"
            record = MemberRecord(path, key, dict(values))
            for column in present:
                record.located[column] = MemberRef(path, key, column, row, -1)
            yield record


class MemberReader:
    """Reads referenced members at batch time (see the module's docstring).

    Args:
        files: How local and remote shards are read.
        row_groups: Parquet row groups kept per process (the last ones read).
    """

    def __init__(self, files: RandomAccessFiles | None = None, row_groups: int = 2) -> None:
        self.files = files or RandomAccessFiles()
        self.row_groups = row_groups
        self._pid = -1
        self._groups: dict[tuple[str, int, str], Any] = {}
        self._starts: dict[str, list[int]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_groups"], state["_starts"], state["_pid"] = {}, {}, -1
        return state

    def read(self, ref: MemberRef) -> bytes:
        """The member's bytes (a Parquet image struct's ``bytes``).

        Raises:
            OSError: The shard cannot be read, naming it (and the record).
        """
        if ref.size >= 0:
            try:
                return self.files.read_range(ref.shard, ref.offset, ref.size)
            except OSError as err:
                raise OSError(f"{ref.where}: cannot read the member: {err}") from err
        value = self._cell(ref)
        if isinstance(value, dict):
            value = value.get("bytes")
        if not isinstance(value, (bytes, bytearray)):
            raise OSError(f"{ref.where}: holds {type(value).__name__}, not encoded bytes")
        return bytes(value)

    def _cell(self, ref: MemberRef) -> Any:
        if self._pid != os.getpid():  # a forked worker opens its own
            self._groups, self._starts, self._pid = {}, {}, os.getpid()
        starts = self._starts.get(ref.shard)
        if starts is not None:
            group = bisect.bisect_right(starts, ref.offset) - 1
            found = self._groups.get((ref.shard, group, ref.name))
            if found is not None:
                return found[ref.offset - starts[group]].as_py()
        try:
            with parquet_file(ref.shard, self.files.options) as pf:
                meta = pf.metadata
                starts = [0]
                for g in range(meta.num_row_groups):
                    starts.append(starts[-1] + meta.row_group(g).num_rows)
                self._starts[ref.shard] = starts
                if not 0 <= ref.offset < starts[-1]:
                    raise ShardError(ref.shard, None, f"has {starts[-1]} rows")
                group = bisect.bisect_right(starts, ref.offset) - 1
                table = pf.read_row_group(group, columns=[ref.name], use_threads=False)
        except (ShardError, OSError, KeyError) as err:
            raise OSError(f"{ref.where}: cannot read the cell: {err}") from err
        while len(self._groups) >= self.row_groups:
            self._groups.pop(next(iter(self._groups)))
        self._groups[(ref.shard, group, ref.name)] = column = table.column(0)
        return column[ref.offset - starts[group]].as_py()
