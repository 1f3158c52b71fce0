"""Records read once for their small members, the others located: a tar member's byte range
holds exactly its bytes (long pax names included), a Parquet cell is reached by row (rows
counted from the footer when no column is read), and what cannot be read by range is refused
naming the shard."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datamodules.shards.errors import ShardError
from datamodules.shards.member_records import MemberReader, MemberRef, scan_members


def write_tar(path: Path, members: list[tuple[str, bytes]], fmt: int = tarfile.PAX_FORMAT) -> Path:
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, body in members:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return path


def test_tar_members_are_read_or_located_by_their_exact_byte_range(tmp_path: Path) -> None:
    long_key = "d/" + "k" * 150  # a pax long name
    shard = write_tar(tmp_path / "a.tar", [
        ("one.jpg", b"J" * 700), ("one.json", b'{"a": 1}'), ("one.txt", b"skipped"),
        (f"{long_key}.png", b"P" * 513), (f"{long_key}.json", b"{}"),
        ("two.json", b"[]"),
    ])  # fmt: skip
    records = list(scan_members(str(shard), read=["json"], located=["jpg", "png"]))
    assert [(r.key, sorted(r.read), sorted(r.located)) for r in records] == [
        ("one", ["json"], ["jpg"]), (long_key, ["json"], ["png"]), ("two", ["json"], []),
    ]  # fmt: skip
    assert records[0].read["json"] == b'{"a": 1}' and records[0].where == f"{shard}: key 'one'"
    reader = MemberReader()
    ref = records[1].located["png"]
    assert MemberRef.decode(ref.encode()) == ref
    assert reader.read(records[0].located["jpg"]) == b"J" * 700
    assert reader.read(ref) == b"P" * 513
    data = shard.read_bytes()
    assert data[ref.offset : ref.offset + ref.size] == b"P" * 513


def test_a_repeated_member_marks_its_record(tmp_path: Path) -> None:
    shard = write_tar(tmp_path / "r.tar", [("a.jpg", b"1"), ("a.jpg", b"2"), ("a.json", b"{}")])
    (record,) = scan_members(str(shard), read=["json"], located=["jpg"])
    assert record.problem == "member 'a.jpg' repeats .jpg"


def test_parquet_cells_are_located_by_row(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    images = [{"bytes": bytes([i]) * 5, "path": f"{i}.png"} for i in range(7)]
    table = pa.table({"image": images, "json": [f'{{"i": {i}}}' for i in range(7)]})
    pq.write_table(table, path, row_group_size=3)
    records = list(scan_members(str(path), read=["json"], located=["image", "jpg"]))
    assert [r.read["json"] for r in records] == [f'{{"i": {i}}}' for i in range(7)]
    assert [sorted(r.located) for r in records] == [["image"]] * 7
    assert records[4].where == f"{path}: row 4"
    reader = MemberReader(row_groups=1)
    for i in (4, 0, 6, 5):
        assert reader.read(records[i].located["image"]) == bytes([i]) * 5
    with pytest.raises(OSError, match="row 9.*has 7 rows"):
        reader.read(MemberRef(str(path), "row 9", "image", 9, -1))


def test_parquet_with_nothing_to_read_is_counted_from_its_footer(tmp_path: Path) -> None:
    path = tmp_path / "m.parquet"
    table = pa.table({"image": [bytes([i]) for i in range(5)], "mask": [b"m"] * 5})
    pq.write_table(table, path, row_group_size=2)
    records = list(scan_members(str(path), read=[], located=["image", "mask"]))
    assert [(r.key, r.read, sorted(r.located)) for r in records] == [
        (f"row {i}", {}, ["image", "mask"]) for i in range(5)
    ]
    assert MemberReader().read(records[3].located["image"]) == bytes([3])


def test_compressed_tars_and_other_formats_are_refused(tmp_path: Path) -> None:
    for name in ("x.tar.gz", "x.jsonl"):
        (tmp_path / name).write_bytes(b"")
        with pytest.raises(ShardError, match=rf"x\.{name.split('.', 1)[1]}.*uncompressed \.tar"):
            list(scan_members(str(tmp_path / name), read=["json"], located=["jpg"]))
