"""write_shards: tar, Parquet and JSONL shards of bounded size, renamed into place when whole,
and read both ways with the real webdataset and Hugging Face datasets packages."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import webdataset as wds
from PIL import Image

from datamodules.shards import writer as writer_module
from datamodules.shards.records import read_records
from datamodules.shards.writer import tar_header
from datamodules.streaming import write_shards


def png(i: int, size: int = 8) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((size, size, 3), i % 256, np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def records(n: int) -> list[dict]:
    return [
        {"__key__": f"s/{i:04d}", "png": png(i), "cls": i % 5, "txt": f"t {i}", "json": {"i": i}}
        for i in range(n)
    ]


def read_all(paths: list[str]) -> list[dict]:
    out = []
    for path in paths:
        for record in read_records(path):
            record.pop("__url__", None)
            out.append(record)
    return out


def test_tar_round_trip_with_bounded_shards(tmp_path: Path) -> None:
    given = records(40)
    paths = write_shards(given, tmp_path / "out", max_bytes="12kB")
    assert paths == [str(tmp_path / "out" / f"shard-{k:06d}.tar") for k in range(len(paths))]
    assert len(paths) > 3 and all(os.path.getsize(p) <= 12_000 for p in paths)
    assert read_all(paths) == given
    by_count = write_shards(given, tmp_path / "n", max_records=16, prefix="train")
    assert [len(list(read_records(p))) for p in by_count] == [16, 16, 8]
    assert Path(by_count[0]).name == "train-000000.tar"
    assert write_shards([], tmp_path / "empty") == []


def test_the_same_records_give_the_same_bytes(tmp_path: Path) -> None:
    a = write_shards(records(10), tmp_path / "a")
    b = write_shards(records(10), tmp_path / "b")
    assert Path(a[0]).read_bytes() == Path(b[0]).read_bytes()


def test_a_failure_leaves_only_whole_shards(tmp_path: Path) -> None:
    def failing():
        yield from records(30)
        raise RuntimeError("the source broke")

    with pytest.raises(RuntimeError, match="the source broke"):
        write_shards(failing(), tmp_path, max_records=8)
    names = sorted(os.listdir(tmp_path))
    assert names == [f"shard-{k:06d}.tar" for k in range(3)]  # no temporary file is left
    assert read_all([str(tmp_path / n) for n in names]) == records(24)


def test_webdataset_reads_our_tars_with_the_same_keys_and_bytes(tmp_path: Path) -> None:
    given = records(25)
    paths = write_shards(given, tmp_path, max_records=10)
    samples = list(wds.WebDataset(paths, shardshuffle=False, empty_check=False))
    assert [s["__key__"] for s in samples] == [r["__key__"] for r in given]
    for sample, record in zip(samples, given, strict=True):
        assert sample["png"] == record["png"]
        assert sample["cls"] == str(record["cls"]).encode()
        assert sample["txt"] == record["txt"].encode()
        assert json.loads(sample["json"]) == record["json"]


def test_we_read_tars_written_by_webdataset_shardwriter(tmp_path: Path) -> None:
    with wds.ShardWriter(str(tmp_path / "wds-%06d.tar"), maxcount=7, verbose=0) as sink:
        for i in range(20):
            sink.write({"__key__": f"k{i:03d}", "jpg": png(i), "cls": i, "json": {"i": i},
                        "txt": f"caption {i}"})  # fmt: skip
    paths = sorted(str(p) for p in tmp_path.glob("wds-*.tar"))
    assert len(paths) == 3
    got = read_all(paths)
    assert [r["__key__"] for r in got] == [f"k{i:03d}" for i in range(20)]
    assert [(r["cls"], r["json"], r["txt"]) for r in got] == [
        (i, {"i": i}, f"caption {i}") for i in range(20)
    ]
    assert all(r["jpg"] == png(i) for i, r in enumerate(got))


def test_parquet_has_an_image_feature_that_hf_datasets_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(writer_module, "ROW_GROUP_ROWS", 6)
    given = records(20)
    paths = write_shards(given, tmp_path / "pq", fmt="parquet", max_records=15)
    assert [pq.ParquetFile(p).metadata.num_row_groups for p in paths] == [3, 1]  # 6 + 6 + 3, 5
    assert read_all(paths)[3] == {
        **given[3],
        "png": {"bytes": given[3]["png"], "path": "s/0003.png"},
    }
    import datasets

    loaded = datasets.load_dataset(
        "parquet", data_files=paths, split="train", cache_dir=str(tmp_path / "hf")
    )
    assert isinstance(loaded.features["png"], datasets.Image)
    assert loaded.num_rows == 20 and loaded[7]["cls"] == 2 and loaded[7]["__key__"] == "s/0007"
    assert np.array_equal(np.asarray(loaded[7]["png"]), np.full((8, 8, 3), 7, np.uint8))


def test_we_read_parquet_written_by_hf_datasets(tmp_path: Path) -> None:
    import datasets

    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    table = {"image": [{"bytes": png(i), "path": None} for i in range(9)], "label": list(range(9))}
    datasets.Dataset.from_dict(table, features=features).to_parquet(str(tmp_path / "hf.parquet"))
    got = list(read_records(str(tmp_path / "hf.parquet")))
    assert [r["label"] for r in got] == list(range(9))
    assert [r["image"]["bytes"] for r in got] == [png(i) for i in range(9)]


def test_jsonl_shards_and_what_they_cannot_hold(tmp_path: Path) -> None:
    given = [{"id": i, "text": "é" * i} for i in range(30)]
    paths = write_shards(given, tmp_path, fmt="jsonl", max_bytes=200)
    assert len(paths) > 2 and all(os.path.getsize(p) <= 200 for p in paths)
    assert read_all(paths) == given
    with pytest.raises(TypeError, match=r"record 1 \(key 'b'\) cannot be written as JSON.*tar"):
        write_shards([{"__key__": "a"}, {"__key__": "b", "x": b"\x00"}], tmp_path, fmt="jsonl")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"fmt": "zip"}, r"fmt='zip' is not accepted"),
        ({"max_bytes": "lots"}, r"max_bytes='lots' is not accepted"),
        ({"max_records": 0}, r"max_records=0 is not accepted"),
        ({"prefix": "a/b"}, r"prefix='a/b' is not accepted"),
    ],
)
def test_bad_arguments_are_named(tmp_path: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        write_shards(records(1), tmp_path, **kwargs)


@pytest.mark.parametrize(
    "bad, error, match",
    [
        ({"png": b"x"}, ValueError, r"record 1 has no '__key__'"),
        ({"__key__": "a/b.c", "png": b"x"}, ValueError, r"__key__='a/b.c' cannot name"),
        ({"__key__": "k", "PNG": b"x"}, ValueError, r"field 'PNG' is not a tar extension"),
        ({"__key__": "k", "cls": "3"}, TypeError, r"record 1 \(key 'k'\), field 'cls'.*int"),
        ({"__key__": "k", "pth": b"x"}, ValueError, r"field 'pth'.*refused"),
        ({"__key__": "s/0000", "png": b"x"}, ValueError, r"'s/0000' is already in shard-0"),
    ],
)
def test_a_record_that_cannot_be_a_tar_record_is_named(
    tmp_path: Path, bad: dict, error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        write_shards([records(1)[0], bad], tmp_path)
    assert not list(tmp_path.iterdir())  # the shard being written is removed


@pytest.mark.parametrize(
    "name, size",
    [
        ("a/b.jpg", 20_000),
        ("x" * 100, 0),
        ("y" * 101 + ".cls", 1),
        ("é/b.txt", 3),
        ("k.jpg", 8**11),
    ],
)
def test_member_headers_are_the_bytes_tarfile_writes(name: str, size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o444, 0
    assert tar_header(name, size) == info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
