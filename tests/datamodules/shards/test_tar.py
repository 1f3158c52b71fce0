"""Tar shards: WebDataset's keys and decoding, seeks from the index, and every kind of damage
under both policies (raised naming shard and member or key; skipped and counted the same way
by the index and by every reader, from any offset)."""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
from pathlib import Path

import msgpack
import numpy as np
import pytest
import webdataset as wds

from datamodules.core.skipped import Skipped
from datamodules.shards import tar_fields
from datamodules.shards.errors import RecordError
from datamodules.shards.formats import detect_format
from datamodules.shards.index import index_shard
from datamodules.shards.records import read_records
from datamodules.shards.tar import split_name
from datamodules.shards.tar_fields import decode_field, encode_field
from datamodules.streaming import write_shards


def add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_tar(path: Path, members: list[tuple[str, bytes]], fmt: int = tarfile.PAX_FORMAT):
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, data in members:
            add(tar, name, data)
    return path


def sample_members(n: int) -> list[tuple[str, bytes]]:
    """Record ``i``: key ``d/s{i}``, a 700 + i byte image, a class, JSON and text."""
    members = []
    for i in range(n):
        members += [
            (f"d/s{i:03d}.jpg", bytes([i % 256]) * (700 + i)),
            (f"d/s{i:03d}.cls", str(i).encode()),
            (f"d/s{i:03d}.meta.json", json.dumps({"i": i}).encode()),
            (f"d/s{i:03d}.TXT", f"caption {i}".encode()),
        ]
    return members


def ids(records) -> list[int]:
    return [r["cls"] for r in records]


def test_keys_and_extensions_follow_webdataset() -> None:
    assert split_name("a/b.c.jpg") == ("a/b", "c.jpg")
    assert split_name("x.JPG") == ("x", "jpg")
    assert split_name("./a/b.seg.png") == ("./a/b", "seg.png")
    assert split_name("__index__.json") == ("__index__", "json")  # not named __*__
    for meta in ("__meta__", "__dir__/a.jpg", "README"):
        assert split_name(meta) is None


def test_values_are_decoded_by_the_last_part_of_the_extension() -> None:
    assert [decode_field(e, b"12\n") for e in ("cls", "cls2", "index", "id", "x.cls")] == [12] * 5
    assert decode_field("txt", "é".encode()) == "é" and decode_field("text", b"t") == "t"
    assert decode_field("json", b'{"a": [1]}') == {"a": [1]}
    assert decode_field("jpg", b"\xff\xd8") == b"\xff\xd8"
    for ext in ("pyd", "pickle", "pkl", "pth", "x.pth", "pth.gz"):
        with pytest.raises(ValueError, match="unpickled"):
            decode_field(ext, b"\x80\x04K\x01.")
    with pytest.raises(ValueError, match="not an integer"):
        decode_field("cls", b"cat")
    for ext, value in (("cls", 3), ("txt", "é"), ("json", {"a": 1}), ("jpg", b"\x00\x01")):
        assert decode_field(ext, encode_field(ext, value)) == value
    with pytest.raises(TypeError, match="holds an int"):
        encode_field("cls", "3")
    with pytest.raises(ValueError, match="refused"):
        encode_field("pickle", object())


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
def test_records_group_members_and_keep_their_bytes(tmp_path: Path, fmt: int) -> None:
    long = "l" * 120 if fmt != tarfile.USTAR_FORMAT else "l" * 60
    members = sample_members(3) + [(f"{long}/x.cls", b"9"), ("__meta__", b"m")]
    path = write_tar(tmp_path / "a.tar", members, fmt)
    with tarfile.open(path, "a", format=fmt) as tar:
        tar.addfile(tarfile.TarInfo("emptydir/"))  # a directory member is no record's
    records = list(read_records(str(path)))
    assert records[0] == {
        "__key__": "d/s000",
        "__url__": str(path),
        "jpg": b"\x00" * 700,
        "cls": 0,
        "meta.json": {"i": 0},
        "txt": "caption 0",
    }
    assert ids(records) == [0, 1, 2, 9] and records[3]["__key__"] == f"{long}/x"
    assert index_shard(str(path), cache_dir=False).count == 4


@pytest.mark.parametrize("suffix", [".tar", ".tar.gz", ".tgz"])
def test_every_range_equals_the_slice_of_a_full_read(tmp_path: Path, suffix: str) -> None:
    raw = write_tar(tmp_path / "r.tar", sample_members(50))
    path = tmp_path / f"s{suffix}"
    if suffix == ".tar":
        raw.rename(path)
    else:
        path.write_bytes(gzip.compress(raw.read_bytes()))
    assert detect_format(str(path)) == ("tar", None if suffix == ".tar" else "gzip")
    index = index_shard(str(path), cache_dir=False)
    assert index.count == 50 and bool(index.offsets) == (suffix == ".tar")
    full = ids(read_records(str(path)))
    assert full == list(range(50))
    for start in (0, 1, 15, 16, 17, 33, 49):
        for stop in (start + 1, min(start + 20, 50), 50):
            assert (
                ids(read_records(str(path), start=start, stop=stop, index=index))
                == full[start:stop]
            )


def npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=True)
    return out.getvalue()


def typed_members(n: int) -> list[tuple[str, bytes]]:
    """Record ``i``: a member of every type webdataset's ``.decode()`` knows but pickles."""
    members = []
    for i in range(n):
        key = f"t/r{i}"
        members += [
            (f"{key}.jpg", bytes([i]) * 50),
            (f"{key}.jpg.gz", gzip.compress(bytes([i]) * 60)),
            (f"{key}.txt.gz", gzip.compress(f"caption {i} é".encode())),
            (f"{key}.meta.json.gz", gzip.compress(json.dumps({"i": i}).encode())),
            (f"{key}.transcript", f"said {i}".encode()),
            (f"{key}.jsn", json.dumps([i, "x"]).encode()),
            (f"{key}.cls", str(i).encode()),
            (f"{key}.inx", f"{10 + i}\n".encode()),
            (f"{key}.class", str(20 + i).encode()),
            (f"{key}.count", str(30 + i).encode()),
            (f"{key}.npy", npy(np.arange(i + 3, dtype=np.int32))),
            (f"{key}.emb.npy.gz", gzip.compress(npy(np.full((2, 3), i, np.float16)))),
            (f"{key}.mp", msgpack.packb({"i": i, "v": [1.5, "a"]})),
            (f"{key}.msg", msgpack.packb([i, None])),
            (f"{key}.msgpack", msgpack.packb({"k": i})),
        ]
    return members


def same(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and np.array_equal(a, b)
        )
    return type(a) is type(b) and a == b


def test_members_decode_as_webdataset_decodes_them(tmp_path: Path) -> None:
    members = typed_members(4)
    path = write_tar(tmp_path / "typed.tar", members)
    theirs = list(wds.WebDataset(str(path), shardshuffle=False).decode())
    ours = list(read_records(str(path)))
    raw = dict(members)
    assert [r["__key__"] for r in ours] == [r["__key__"] for r in theirs]
    for mine, their in zip(ours, theirs, strict=True):
        assert set(mine) == set(their) - {"__local_path__"}  # a .gz member's key stays X.gz
        for ext in set(mine) - {"__key__", "__url__"}:
            if ext in ("class", "count", "msgpack"):
                # webdataset 1.0 leaves these bytes (its docstring and 0.2 decode them)
                assert their[ext] == raw[f"{mine['__key__']}.{ext}"]
                expected = msgpack.unpackb(their[ext]) if ext == "msgpack" else int(their[ext])
                assert same(mine[ext], expected), ext
            else:
                assert same(mine[ext], their[ext]), (ext, mine[ext], their[ext])
    assert ours[2]["npy"].tolist() == [0, 1, 2, 3, 4] and ours[2]["txt.gz"] == "caption 2 é"
    assert ours[1]["mp"] == {"i": 1, "v": [1.5, "a"]} and ours[3]["jpg.gz"] == bytes([3]) * 60
    # Written back by write_shards, the values read the same.
    back = write_shards([{k: v for k, v in r.items() if k != "__url__"} for r in ours], tmp_path)
    again = list(read_records(back[0]))
    assert all(same(a[k], b[k]) for a, b in zip(again, ours, strict=True) for k in a if k[0] != "_")


def test_msgpack_members_stay_bytes_without_msgpack(tmp_path: Path, monkeypatch) -> None:
    path = write_tar(tmp_path / "typed.tar", typed_members(2))
    monkeypatch.setattr(tar_fields, "_msgpack", lambda: None)  # as if it were not installed
    record = next(iter(read_records(str(path))))
    assert record["mp"] == msgpack.packb({"i": 0, "v": [1.5, "a"]})
    assert record["msg"] == msgpack.packb([0, None]) and record["cls"] == 0


def test_nothing_is_unpickled(tmp_path: Path) -> None:
    members = sample_members(3)
    members.insert(1, ("d/s000.obj.npy", npy(np.array([{"a": 1}], dtype=object))))
    members.insert(6, ("d/s001.pkl", b"\x80\x04K\x01."))
    path = write_tar(tmp_path / "p.tar", members)
    with pytest.raises(RecordError, match=r"s000.obj.npy': not a .npy array .*allow_pickle"):
        index_shard(str(path), cache_dir=False)
    counter = Skipped()
    assert ids(read_records(str(path), on_error="skip", counter=counter)) == [2]
    assert "refused" in counter.messages[1]


def write_bad(tmp_path: Path, case: str) -> tuple[Path, list[int]]:
    """A 30-record shard with one kind of damage; returns it and the records still good."""
    members = sample_members(30)
    good = list(range(30))
    if case == "repeated key":  # record 20's key is record 5's again, not adjacent
        members[80:84] = [(n.replace("s020", "s005"), d) for n, d in members[80:84]]
        good.remove(20)
    elif case == "duplicate extension":
        members.insert(49, ("d/s012.cls", b"12"))
        good.remove(12)
    elif case == "bad class":
        members[4 * 7 + 1] = ("d/s007.cls", b"seven")
        good.remove(7)
    elif case == "bad json":
        members[4 * 9 + 2] = ("d/s009.meta.json", b"{nope")
        good.remove(9)
    elif case == "pickle member":
        members.insert(4 * 3 + 1, ("d/s003.pyd", b"\x80\x04K\x01."))
        good.remove(3)
    path = write_tar(tmp_path / "bad.tar", members)
    if case in ("truncated data", "truncated header"):
        data = path.read_bytes()
        with tarfile.open(path) as tar:
            member = next(m for m in tar.getmembers() if m.name == "d/s025.jpg")
        cut = member.offset_data + 100 if case == "truncated data" else member.offset + 200
        path.write_bytes(data[:cut])
        # A cut header may have been record 24's next member: record 24 may be incomplete.
        good = list(range(25 if case == "truncated data" else 24))
    if case == "corrupt header":
        data = bytearray(path.read_bytes())
        with tarfile.open(path) as tar:
            member = next(m for m in tar.getmembers() if m.name == "d/s018.jpg")
        data[member.offset + 10] ^= 0xFF  # the checksum no longer matches
        path.write_bytes(bytes(data))
        good = list(range(17))  # record 17 may have had more members after the damage
    return path, good


BAD = {
    "truncated data": r"key 'd/s025': the archive ends inside member 'd/s025.jpg' \(in its data",
    "truncated header": r"key 'd/s024': the archive ends inside a header after member 'd/s024.TXT'",
    "corrupt header": r"key 'd/s017': corrupt header after member 'd/s017.TXT' \(checksum",
    "repeated key": r"key 'd/s005': key 'd/s005' repeats an earlier record's",
    "duplicate extension": r"key 'd/s012': member 'd/s012.cls' repeats \.cls",
    "bad class": r"key 'd/s007': member 'd/s007.cls': not an integer",
    "bad json": r"key 'd/s009': member 'd/s009.meta.json': invalid JSON",
    "pickle member": r"key 'd/s003': member 'd/s003.pyd'.*refused",
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_shard_raises_naming_shard_and_member_or_key(tmp_path: Path, case: str) -> None:
    path, _ = write_bad(tmp_path, case)
    with pytest.raises(RecordError, match=BAD[case]) as info:
        index_shard(str(path), cache_dir=False)
    assert str(info.value).startswith(str(path))
    with pytest.raises(RecordError, match=BAD[case]):
        list(read_records(str(path)))


@pytest.mark.parametrize("case", list(BAD))
def test_skip_leaves_out_the_same_records_from_every_offset(tmp_path: Path, case: str) -> None:
    path, good = write_bad(tmp_path, case)
    counter = Skipped()
    index = index_shard(str(path), on_error="skip", cache_dir=False, counter=counter)
    assert index.count == len(good) and counter.total == index.skipped == 1
    assert str(path) in counter.messages[0]
    direct = Skipped()  # no index: the reader finds the same bad record itself
    assert ids(read_records(str(path), on_error="skip", counter=direct)) == good
    assert direct.total == 1
    for start in range(0, len(good), 3):
        got = ids(read_records(str(path), on_error="skip", start=start, index=index))
        assert got == good[start:]


def cut_shard(tmp_path: Path, where: str) -> tuple[Path, list[int]]:
    """A 10-record shard from ``write_shards`` (a JPEG-sized image and a class a record), cut
    at ``where``; returns the cut file and the records before the damaged one."""
    sizes = [300 + 7 * i for i in range(10)]
    records = [
        {"__key__": f"s{i:03d}", "jpg": bytes([i]) * n, "cls": i} for i, n in enumerate(sizes)
    ]
    [shard] = write_shards(records, tmp_path / "whole")
    data = Path(shard).read_bytes()
    with tarfile.open(shard) as tar:
        at = {m.name: m for m in tar.getmembers()}
    cut, good = {
        "byte 4000": (4000, 1),  # in the padding of s001.cls
        "byte 3000": (3000, 1),  # in the padding of s001.jpg: s001 has an image, no class
        "after data": (at["s005.jpg"].offset_data + at["s005.jpg"].size, 5),
        "inside a header": (at["s007.cls"].offset + 100, 7),
        "after padding": (at["s009.jpg"].offset, 8),  # where s009's header would start
        "inside the end blocks": (len(data) - 700, 10),
        "after one end block": (len(data) - 512, 10),
    }[where]
    path = tmp_path / "cut.tar"
    path.write_bytes(data[:cut])
    return path, list(range(good))


CUTS = {
    "byte 4000": r"key 's001': the archive ends inside member 's001.cls' \(in its padding",
    "byte 3000": r"key 's001': the archive ends inside member 's001.jpg' \(in its padding",
    "after data": r"key 's005': the archive ends inside member 's005.jpg' \(in its padding, 0 of",
    "inside a header": r"key 's007': the archive ends inside a header after member 's007.jpg'",
    "after padding": r"key 's008': the archive ends after member 's008.cls' without its end-of",
    "inside the end blocks": r"ends inside its end-of-archive blocks after member 's009.cls'",
    "after one end block": r"ends inside its end-of-archive blocks after member 's009.cls'",
}


@pytest.mark.parametrize("where", list(CUTS))
def test_a_tar_that_ends_anywhere_but_after_its_end_blocks_is_damaged(
    tmp_path: Path, where: str
) -> None:
    path, good = cut_shard(tmp_path, where)
    if where in ("byte 4000", "byte 3000", "after data"):  # cut inside a member's blocks
        # webdataset raises as well; elsewhere (a cut header, no end blocks) it is silent
        with pytest.raises(tarfile.ReadError, match="unexpected end of data"):
            list(wds.WebDataset(str(path), shardshuffle=False))
    with pytest.raises(RecordError, match=CUTS[where]):
        index_shard(str(path), cache_dir=False)
    read = []
    with pytest.raises(RecordError, match=CUTS[where]):
        read.extend(read_records(str(path)))
    assert ids(read) == good  # the records before the damage, then the error
    # Skipped: the damaged record is counted (its later members may be lost), and a cut
    # inside the end blocks, which loses no record, is still reported.
    counter = Skipped()
    index = index_shard(str(path), on_error="skip", cache_dir=False, counter=counter)
    assert index.count == len(good) and counter.total == index.skipped == 1
    assert re.search(CUTS[where], counter.messages[0])
    direct = Skipped()
    assert ids(read_records(str(path), on_error="skip", counter=direct)) == good
    assert direct.total == 1 and re.search(CUTS[where], direct.messages[0])
    assert ids(read_records(str(path), on_error="skip", index=index)) == good
