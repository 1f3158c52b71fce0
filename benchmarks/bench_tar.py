"""Tar shards: our reader and writer against the standard library's ``tarfile``.

Ours is ``datamodules/streaming/tar_members.py`` (``TarMembers``: members walked from any byte
offset, damage detected and named) under ``tar.py`` (``scan_tar``, ``read_tar``: WebDataset
records), and ``tar_header`` / ``TarShard`` in ``writer.py`` (``write_shards(fmt="tar")``).
The question it answers: would moving onto ``tarfile`` keep today's speed and behaviour?

Data, written once to a temporary directory by ``write_shards``: ``--records`` WebDataset
records (default 6,000) in 2 shards; every record has ``.cls`` (int), ``.txt`` (8-40 words)
and ``.json`` (a small dict), every 4th also a ``.jpg`` of 20-100 KB of random bytes (seeded:
the same arguments give the same bytes). Every tarfile case reads through the same 1 MB
buffered file as ours, and writes through the same 1 MB buffer, so the ratios compare the
tar code, not buffer sizes. Where a case needs records, tarfile's members go through the
same grouping rules as ours (key and extension by ``split_name``, typed members decoded by
``decode_field``, repeated keys and extensions flagged): what a move onto tarfile would run.
Those members' data is read the fastest way tarfile allows: straight from the file at
``TarInfo.offset_data`` (checked whole), or with ``extractfile`` in a stream (``r|``).

1. **Index scan**, per shard: ``scan_tar`` (typed members read and decoded, the rest stepped
   over, the offset of every 16th record kept) against tarfile ``r:`` with the same grouping
   and decoding; and the bare walk, headers only:
   ``TarMembers.next()/skip()`` against ``tarfile.open(..., "r:").getmembers()``, both keeping
   the offset of every record.
2. **Full read**: ``read_tar(index=...)`` (every record as a decoded dict; the index checked
   the headers, so their checksums are not checked again), and ``read_tar()`` without an
   index (checksums checked, keys remembered: the same work as tarfile with our grouping,
   so tarfile is compared with it) against tarfile ``r:`` and ``r|`` (streaming) with the
   same grouping; and members' bytes only:
   ``TarMembers.next()/read()`` against ``extractfile(m).read()`` (``r:`` and ``r|``) and
   against tarfile's headers with the data read directly at ``m.offset_data``.
3. **Middle read**: ``--span`` records (default 64) from the middle record of each shard (a
   multiple of 16, so the index holds its offset): ``read_tar(start=..., index=...)`` against
   tarfile ``r:`` walking from the start, and against ``TarInfo.fromtarfile`` after seeking to
   the same offset from our index. Milliseconds per read (``--reads`` reads a repeat).
4. **Writing** the same records: ``write_shards(records, out, fmt="tar")`` against
   ``tarfile.open(mode="w")`` + ``addfile(TarInfo, BytesIO)`` (fields encoded by the same
   ``encode_field``; mode 0444, time 0, as ours); and the headers alone: ``tar_header``
   against ``TarInfo.tobuf``. The two writers' shards are compared byte for byte.

Every repeat runs every case once, in turn (so drifting load on a shared machine hits all
alike), after one warm-up pass; a ratio is ours' speed over tarfile's (>1x: ours is faster),
taken within each repeat, against the ``ours`` case just above: the table gives its median
and [min-max] over ``--repeats``. MB/s counts the shards' bytes a case covers (a scan steps
over most of them).
Last, **damage**: shard 0 corrupted five ways (a header's checksum, a size field, cut inside
a header, cut inside a member's data, a gzip copy cut short), each read by ``scan_tar`` and
by tarfile (every member read); what each says, and how many records it returned.

Run: ``python benchmarks/bench_tar.py [--records 6000] [--repeats 5]``; ``--quick`` for a
smoke run (400 records, 1 repeat).
"""

from __future__ import annotations

import argparse
import gc
import gzip
import io
import logging
import os
import platform
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Ours: every import of the tar modules is here.
from datamodules.shards.tar import (  # noqa: E402
    INT_EXTENSIONS,
    REFUSED_EXTENSIONS,
    TEXT_EXTENSIONS,
    decode_field,
    encode_field,
    read_tar,
    scan_tar,
    split_name,
)
from datamodules.shards.tar_members import TarMembers  # noqa: E402
from datamodules.shards.writer import tar_header, write_shards  # noqa: E402

# Benchmarks print figures, not the DataModules' summaries (logged at INFO).
logging.getLogger("datamodules").setLevel(logging.WARNING)

SHARDS, EVERY, BUFFER = 2, 16, 1 << 20
TYPED = (*INT_EXTENSIONS, *TEXT_EXTENSIONS, "json", *REFUSED_EXTENSIONS)
WORDS = ("a", "cat", "sits", "on", "the", "red", "mat", "near", "two", "dogs", "by", "old", "walls")


def make_records(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` WebDataset records, the same for the same ``(n, seed)``."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        words = rng.choice(WORDS, int(rng.integers(8, 41))).tolist()
        record: dict[str, Any] = {"__key__": f"sample{i:07d}"}
        if i % 4 == 0:  # some records carry an image: random bytes behind a JPEG signature
            record["jpg"] = b"\xff\xd8\xff\xe0" + rng.bytes(int(rng.integers(20_000, 100_001)) - 4)
        record["cls"] = int(rng.integers(0, 1000))
        record["json"] = {"id": i, "width": int(rng.integers(64, 1024)), "tags": words[:3]}
        record["txt"] = " ".join(words)
        records.append(record)
    return records


def _file(path: str | Path) -> io.BufferedReader:
    """The file every reader reads through (ours opens local shards the same way)."""
    return open(path, "rb", buffering=BUFFER)  # noqa: SIM115 (closed by the caller)


def _typed(ext: str) -> bool:
    return ext.rsplit(".", 1)[-1] in TYPED


def _all(ext: str) -> bool:
    return True


# ---------------------------------------------------------------------------- tarfile


class Group:
    """A record being gathered from tarfile's members (as ``tar._Group``)."""

    __slots__ = ("start", "key", "fields", "problem")

    def __init__(self, start: int, key: str) -> None:
        self.start, self.key = start, key
        self.fields: dict[str, Any] = {}
        self.problem: str | None = None


def direct(f: IO[bytes]) -> Callable[[tarfile.TarInfo], bytes]:
    """Reads a member's data straight from the file at ``offset_data`` (tarfile's fastest way
    for an uncompressed file), checking that it is whole as ``extractfile`` would."""

    def read(info: tarfile.TarInfo) -> bytes:
        f.seek(info.offset_data)
        data = f.read(info.size)
        if len(data) != info.size:
            raise tarfile.ReadError("unexpected end of data")
        return data

    return read


def extract(tf: tarfile.TarFile) -> Callable[[tarfile.TarInfo], bytes]:
    """Reads a member's data with ``extractfile`` (the only way in a stream, ``r|``)."""
    return lambda info: tf.extractfile(info).read()  # type: ignore[union-attr]


def tarfile_groups(
    infos: Iterable[tarfile.TarInfo],
    wanted: Callable[[str], bool],
    read: Callable[[tarfile.TarInfo], bytes],
) -> Iterator[Group]:
    """Our grouping rules over tarfile's members: what a move onto tarfile would run.

    ``wanted(ext)`` says which members to ``read`` and decode; like ours, a group is yielded
    before the next record's first member is read.
    """
    group: Group | None = None
    seen: set[str] = set()
    for info in infos:
        if not info.isreg():
            continue
        parts = split_name(info.name)
        if parts is None:
            continue
        key, ext = parts
        if group is None or key != group.key:
            if group is not None:
                yield group
            group = Group(info.offset, key)
            if key in seen:
                group.problem = f"key {key!r} repeats an earlier record's (not adjacent)"
            seen.add(key)
        if ext in group.fields:
            group.problem = group.problem or f"member {info.name!r} repeats .{ext}"
        elif wanted(ext):
            data = read(info)
            try:
                group.fields[ext] = decode_field(ext, data)
            except ValueError as err:
                group.problem = group.problem or f"member {info.name!r}: {err}"
        else:
            group.fields[ext] = None
    if group is not None:
        yield group


def _checked(group: Group, path: str) -> None:
    if group.problem is not None:
        raise ValueError(f"{path}: key {group.key!r}: {group.problem}")


def from_offset(tf: tarfile.TarFile, offset: int) -> Iterator[tarfile.TarInfo]:
    """tarfile's members from a header's byte offset: seek, then ``TarInfo.fromtarfile``."""
    tf.offset = offset
    while True:
        tf.fileobj.seek(tf.offset)
        try:
            info = tarfile.TarInfo.fromtarfile(tf)  # sets tf.offset to the next header
        except (tarfile.EOFHeaderError, tarfile.EmptyHeaderError):
            return
        yield info


# ---------------------------------------------------------------------------- the cases
# Each case takes the shards (and their indexes) and returns (records or members, bytes).


def ours_scan(shards: list[str], indexes: list[Any]) -> tuple[int, int]:
    return sum(scan_tar(p, None, "raise").count for p in shards), _size(shards)


def tarfile_scan(shards: list[str], indexes: list[Any]) -> tuple[int, int]:
    count = 0
    for path in shards:
        offsets, n = [], 0
        with _file(path) as f, tarfile.open(fileobj=f, mode="r:") as tf:
            for group in tarfile_groups(tf, _typed, direct(f)):
                _checked(group, path)
                if n % EVERY == 0:
                    offsets.append(group.start)
                n += 1
        count += n
    return count, _size(shards)


def ours_walk(shards: list[str], indexes: list[Any]) -> tuple[int, int]:
    count = 0
    for path in shards:
        offsets, last = [], None
        with _file(path) as f:
            members = TarMembers(f, 0, os.path.getsize(path))
            while (member := members.next()) is not None:
                parts = split_name(member.name)
                if parts is not None and parts[0] != last:
                    offsets.append(member.start)
                    last = parts[0]
                members.skip()
        count += len(offsets)
    return count, _size(shards)


def tarfile_walk(shards: list[str], indexes: list[Any]) -> tuple[int, int]:
    count = 0
    for path in shards:
        offsets, last = [], None
        with _file(path) as f, tarfile.open(fileobj=f, mode="r:") as tf:
            for info in tf.getmembers():
                parts = split_name(info.name) if info.isreg() else None
                if parts is not None and parts[0] != last:
                    offsets.append(info.offset)
                    last = parts[0]
        count += len(offsets)
    return count, _size(shards)


def ours_read(shards: list[str], indexes: list[Any]) -> tuple[int, int]:
    count = 0
    for path, index in zip(shards, indexes, strict=True):
        count += sum(1 for _ in read_tar(path, None, "raise", index=index))
    return count, _size(shards)


def ours_read_unindexed(shards: list[str], indexes: list[Any]) -> tuple[int, int]:
    """Without an index: every header's checksum checked and every key remembered (to find
    one that repeats), which tarfile and our grouping over it do too."""
    count = 0
    for path in shards:
        count += sum(1 for _ in read_tar(path, None, "raise"))
    return count, _size(shards)


def _tarfile_read(shards: list[str], mode: str) -> tuple[int, int]:
    count = 0
    for path in shards:
        with _file(path) as f, tarfile.open(fileobj=f, mode=mode) as tf:
            read = extract(tf) if mode == "r|" else direct(f)
            for group in tarfile_groups(tf, _all, read):
                _checked(group, path)
                record = {"__key__": group.key, "__url__": path}
                record.update(group.fields)
                count += 1
    return count, _size(shards)


def tarfile_read(shards: list[str], indexes: list[Any]) -> tuple[int, int]:
    return _tarfile_read(shards, "r:")


def tarfile_stream_read(shards: list[str], indexes: list[Any]) -> tuple[int, int]:
    return _tarfile_read(shards, "r|")


def ours_members(shards: list[str], indexes: list[Any]) -> tuple[int, int]:
    count = 0
    for path in shards:
        with _file(path) as f:
            members = TarMembers(f, 0, os.path.getsize(path))
            while members.next() is not None:
                members.read()
                count += 1
    return count, _size(shards)


def _tarfile_members(shards: list[str], mode: str) -> tuple[int, int]:
    count = 0
    for path in shards:
        with _file(path) as f, tarfile.open(fileobj=f, mode=mode) as tf:
            for info in tf:
                if info.isreg():
                    tf.extractfile(info).read()  # type: ignore[union-attr]
                    count += 1
    return count, _size(shards)


def tarfile_members(shards: list[str], indexes: list[Any]) -> tuple[int, int]:
    return _tarfile_members(shards, "r:")


def tarfile_stream_members(shards: list[str], indexes: list[Any]) -> tuple[int, int]:
    return _tarfile_members(shards, "r|")


def tarfile_direct_members(shards: list[str], indexes: list[Any]) -> tuple[int, int]:
    """tarfile's headers, the data read directly from the file at ``offset_data``."""
    count = 0
    for path in shards:
        with _file(path) as f, tarfile.open(fileobj=f, mode="r:") as tf:
            for info in tf:
                if info.isreg():
                    f.seek(info.offset_data)
                    f.read(info.size)
                    count += 1
    return count, _size(shards)


def _middle(index: Any) -> int:
    """The middle record, a multiple of the index's step (so its offset is indexed)."""
    return index.count // 2 // EVERY * EVERY


class Middle:
    """``reads`` reads of ``span`` records from the middle of each shard, in turns."""

    def __init__(self, span: int, reads: int) -> None:
        self.span, self.reads = span, reads

    def run(self, shards: list[str], indexes: list[Any], read_one) -> tuple[int, int]:
        count = 0
        for k in range(self.reads):
            path, index = shards[k % len(shards)], indexes[k % len(shards)]
            start = _middle(index)
            got = read_one(path, index, start, self.span)
            assert got == min(self.span, index.count - start), (path, got)
            count += got
        return count, 0

    def ours(self, shards: list[str], indexes: list[Any]) -> tuple[int, int]:
        def one(path: str, index: Any, start: int, span: int) -> int:
            return sum(1 for _ in read_tar(path, None, "raise", start, start + span, index))

        return self.run(shards, indexes, one)

    def tarfile_from_start(self, shards: list[str], indexes: list[Any]) -> tuple[int, int]:
        def one(path: str, index: Any, start: int, span: int) -> int:
            left, got = [start], 0  # records still to pass over

            def reading(ext: str) -> bool:
                return left[0] == 0

            with _file(path) as f, tarfile.open(fileobj=f, mode="r:") as tf:
                # The records before ``start`` are grouped, their data stepped over (as ours).
                for group in tarfile_groups(tf, reading, direct(f)):
                    _checked(group, path)
                    if left[0]:
                        left[0] -= 1
                        continue
                    got += 1
                    if got == span:
                        break
            return got

        return self.run(shards, indexes, one)

    def tarfile_seek(self, shards: list[str], indexes: list[Any]) -> tuple[int, int]:
        def one(path: str, index: Any, start: int, span: int) -> int:
            got = 0
            with _file(path) as f, tarfile.open(fileobj=f, mode="r:") as tf:
                infos = from_offset(tf, index.offsets[start // index.every])
                for group in tarfile_groups(infos, _all, direct(f)):
                    _checked(group, path)
                    got += 1
                    if got == span:
                        break
            return got

        return self.run(shards, indexes, one)


class Writing:
    """The same records written by ours and by tarfile, each into a fresh folder."""

    def __init__(self, records: list[dict[str, Any]], root: Path) -> None:
        self.records, self.root = records, root
        self.per_shard = -(-len(records) // SHARDS)
        self.headers = [
            (f"{r['__key__']}.{field}", len(encode_field(field, value)))
            for r in records
            for field, value in r.items()
            if not field.startswith("__")
        ]
        self.runs = {"ours": 0, "tarfile": 0}

    def _out(self, name: str) -> Path:
        """A fresh folder for this run."""
        self.runs[name] += 1
        return self.root / f"{name}-{self.runs[name]}"

    def clean(self) -> None:
        """Removes all but each writer's last folder (called between cases, not timed)."""
        for name, last in self.runs.items():
            for run in range(max(last - 1, 0), last):
                shutil.rmtree(self.root / f"{name}-{run}", ignore_errors=True)

    def ours(self, shards: list[str], indexes: list[Any]) -> tuple[int, int]:
        out = self._out("ours")
        paths = write_shards(
            self.records, out, fmt="tar", max_bytes="1TB", max_records=self.per_shard
        )
        return len(self.records), _size(paths)

    def tarfile(self, shards: list[str], indexes: list[Any]) -> tuple[int, int]:
        out = self._out("tarfile")
        out.mkdir(parents=True)
        paths = []
        for k in range(0, len(self.records), self.per_shard):
            path = out / f"shard-{k // self.per_shard:06d}.tar"
            with (
                open(path, "wb", buffering=BUFFER) as f,
                tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tf,
            ):
                for record in self.records[k : k + self.per_shard]:
                    key = record["__key__"]
                    for field, value in record.items():
                        if field.startswith("__"):
                            continue
                        data = encode_field(field, value)
                        info = tarfile.TarInfo(f"{key}.{field}")
                        info.size, info.mode, info.mtime = len(data), 0o444, 0
                        tf.addfile(info, io.BytesIO(data))
            paths.append(str(path))
        return len(self.records), _size(paths)

    def ours_headers(self, shards: list[str], indexes: list[Any]) -> tuple[int, int]:
        n = sum(len(tar_header(name, size)) for name, size in self.headers)
        return len(self.headers), n

    def tarfile_headers(self, shards: list[str], indexes: list[Any]) -> tuple[int, int]:
        n = 0
        for name, size in self.headers:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = size, 0o444, 0
            n += len(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
        return len(self.headers), n

    def same_bytes(self) -> bool:
        """Whether the last runs' shards hold the same members byte for byte (tarfile pads
        the end of the archive to a 10 KB record; ours writes the two end blocks only)."""
        ours = sorted((self.root / f"ours-{self.runs['ours']}").glob("*.tar"))
        theirs = sorted((self.root / f"tarfile-{self.runs['tarfile']}").glob("*.tar"))
        same = len(ours) == len(theirs) == SHARDS
        for a, b in zip(ours, theirs, strict=False):  # the lengths: above
            mine, other = a.read_bytes(), b.read_bytes()
            tail = other[len(mine) :]
            same &= other[: len(mine)] == mine and tail.count(0) == len(tail)
        return same


def _size(paths: Iterable[str]) -> int:
    return sum(os.path.getsize(p) for p in paths)


# ---------------------------------------------------------------------------- damage


def _header_offsets(path: str) -> list[tuple[str, int, int, int]]:
    """``(name, header offset, data offset, size)`` of every member, by ours."""
    with _file(path) as f:
        members = TarMembers(f, 0, os.path.getsize(path))
        out = []
        while (m := members.next()) is not None:
            out.append((m.name, m.start, m.data, m.size))
            members.skip()
    return out


def damaged_copies(shard: str, index: Any, root: Path) -> list[tuple[str, str, str | None]]:
    """Copies of ``shard`` damaged five ways: ``(what, path, compression)``."""
    data = Path(shard).read_bytes()
    members = _header_offsets(shard)
    mid_key = f"sample{_middle(index):07d}"
    mid = next(m for m in members if m[0].startswith(mid_key + "."))
    jpg = next(m for m in members if m[1] > mid[1] and m[0].endswith(".jpg"))
    root.mkdir(parents=True, exist_ok=True)
    cases = []

    def save(what: str, name: str, content: bytes, compression: str | None = None) -> None:
        path = root / name
        path.write_bytes(content)
        cases.append((what, str(path), compression))

    at = mid[1]
    corrupt = bytearray(data)
    corrupt[at + 5] ^= 0x01  # a bit of the name: the checksum no longer matches
    save(f"a header's checksum (record {_middle(index)})", "checksum.tar", bytes(corrupt))
    bad = bytearray(data)
    bad[at + 124 : at + 136] = b"00000x00000\0"
    bad[at + 148 : at + 156] = b" " * 8  # a checksum that matches: only the size is wrong
    bad[at + 148 : at + 156] = b"%06o\0 " % sum(bad[at : at + 512])
    save(f"a size field that is not a number (record {_middle(index)})", "size.tar", bytes(bad))
    save("cut inside a header", "cut-header.tar", data[: at + 200])
    save(f"cut inside {jpg[0]}'s data", "cut-data.tar", data[: jpg[2] + jpg[3] // 2])
    packed = gzip.compress(data, compresslevel=1)
    save("a .tar.gz cut at 60%", "cut.tar.gz", packed[: len(packed) * 6 // 10], "gzip")
    return cases


def _tarfile_reads(path: str, compression: str | None) -> tuple[int, str]:
    """Records tarfile delivers (every member read), and its error if any."""
    count = 0
    mode = "r:gz" if compression == "gzip" else "r:"
    try:
        with _file(path) as f, tarfile.open(fileobj=f, mode=mode) as tf:
            for group in tarfile_groups(tf, _all, extract(tf)):
                _checked(group, path)
                count += 1
    except Exception as err:  # noqa: BLE001 (reported)
        return count, f"{type(err).__name__}: {err}"
    return count, "no error: the archive just ends"


def damage(shard: str, index: Any, root: Path) -> None:
    print(f"\ndamage: shard 0 ({index.count:,} records) corrupted; each reader reads it to the end")
    for what, path, compression in damaged_copies(shard, index, root):
        name = os.path.basename(path)
        try:
            scan_tar(path, compression, "raise")
            ours = "no error"
        except Exception as err:  # noqa: BLE001 (reported)
            ours = f"{type(err).__name__}: {err}".replace(str(root) + os.sep, "")
        kept = scan_tar(path, compression, "skip")
        count, theirs = _tarfile_reads(path, compression)
        print(f"  {what} ({name})")
        print(f"    ours:    {kept.count:,} records (skip) | raise: {ours}")
        print(f"    tarfile: {count:,} records | {theirs.replace(str(root) + os.sep, '')}")


# ---------------------------------------------------------------------------- driver


Case = tuple[str, str, Callable[[list[str], list[Any]], tuple[int, int]], str]


def plan(middle: Middle, writing: Writing, span: int) -> list[Case]:
    """``(task, case, function, unit)`` of every case, in the order they run; a tarfile case
    is compared with the ``ours`` case above it."""
    scan, full, mid, write = (
        "1. index scan",
        "2. full read",
        f"3. middle read, {span} records",
        "4. writing",
    )
    return [
        (scan, "ours: scan_tar", ours_scan, "records/s"),
        (scan, "tarfile r:, same grouping + decoding", tarfile_scan, "records/s"),
        (scan, "ours: TarMembers next/skip (headers)", ours_walk, "records/s"),
        (scan, "tarfile r: getmembers() (headers)", tarfile_walk, "records/s"),
        (full, "ours: read_tar(index=...)", ours_read, "records/s"),
        (full, "ours: read_tar(), no index (as tarfile)", ours_read_unindexed, "records/s"),
        (full, "tarfile r:, same grouping + decoding", tarfile_read, "records/s"),
        (full, "tarfile r| (stream), same grouping", tarfile_stream_read, "records/s"),
        (full, "ours: TarMembers next/read (bytes)", ours_members, "members/s"),
        (full, "tarfile r: extractfile(m).read()", tarfile_members, "members/s"),
        (full, "tarfile r| extractfile(m).read()", tarfile_stream_members, "members/s"),
        (full, "tarfile r: headers, read at offset_data", tarfile_direct_members, "members/s"),
        (mid, "ours: read_tar(start, index=...)", middle.ours, "ms/read"),
        (mid, "tarfile r:, walked from the start", middle.tarfile_from_start, "ms/read"),
        (mid, "tarfile seek + TarInfo.fromtarfile", middle.tarfile_seek, "ms/read"),
        (write, "ours: write_shards(fmt='tar')", writing.ours, "records/s"),
        (write, "tarfile w: addfile(TarInfo, BytesIO)", writing.tarfile, "records/s"),
        (write, "ours: tar_header (headers only)", writing.ours_headers, "headers/s"),
        (write, "tarfile TarInfo.tobuf (headers only)", writing.tarfile_headers, "headers/s"),
    ]


def report(
    cases: list[Case], seconds: list[list[float]], done: list[tuple[int, int]], reads: int
) -> None:
    """The table: each case's median rate, and each tarfile case's ratio against ours (within
    each repeat: median [min-max])."""
    task, ours = None, 0
    for i, (this_task, name, _, unit) in enumerate(cases):
        if this_task != task:
            task = this_task
            print(f"\n{task:<42} {'median':>20} {'MB/s':>7}  ours vs it [min-max]")
        median = statistics.median(seconds[i])
        n, nbytes = done[i]
        rate = median / reads * 1e3 if unit == "ms/read" else n / median
        mbs = f"{nbytes / median / 1e6:7,.0f}" if nbytes and unit != "headers/s" else " " * 7
        ratio = ""
        if name.startswith("ours"):
            ours = i
        else:
            ratios = [t / o for t, o in zip(seconds[i], seconds[ours], strict=True)]
            ratio = f"{statistics.median(ratios):6.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"
        shown = f"{rate:,.2f}" if unit == "ms/read" else f"{rate:,.0f}"
        print(f"  {name:<40} {shown:>10} {unit:<9} {mbs}  {ratio}")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=6000, help="records in all (2 shards)")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes of every case")
    parser.add_argument("--span", type=int, default=64, help="records of a middle read")
    parser.add_argument("--reads", type=int, default=20, help="middle reads per repeat")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="400 records, 1 repeat")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.repeats, args.reads = 400, 1, 4

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        records = make_records(args.records, args.seed)
        shards = write_shards(
            records, root / "shards", fmt="tar", max_bytes="1TB",
            max_records=-(-len(records) // SHARDS),
        )  # fmt: skip
        indexes = [scan_tar(p, None, "raise") for p in shards]
        assert sum(i.count for i in indexes) == len(records)
        writing = Writing(records, root / "written")
        cases = plan(Middle(args.span, args.reads), writing, args.span)
        seconds: list[list[float]] = [[] for _ in cases]
        done: list[tuple[int, int]] = [(0, 0)] * len(cases)
        for repeat in range(args.repeats + 1):  # the first pass is a warm-up
            for i, (_, _, fn, _) in enumerate(cases):
                writing.clean()
                gc.collect()
                start = time.perf_counter()
                done[i] = fn(shards, indexes)
                took = time.perf_counter() - start
                if repeat:
                    seconds[i].append(took)
        same = writing.same_bytes()

        print(
            f"{args.records:,} records in {SHARDS} tar shards, {_size(shards) / 1e6:,.1f} MB "
            f"({sum(len(r) - 1 for r in records):,} members, every 4th record a 20-100 KB "
            f".jpg), seed {args.seed}; median of {args.repeats} after a warm-up pass; "
            f"{_cpu_name()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
        )
        report(cases, seconds, done, args.reads)
        print(f"\nthe two writers' shards hold the same bytes (tarfile pads the end): {same}")
        damage(shards[0], indexes[0], root / "damaged")


if __name__ == "__main__":
    main()
