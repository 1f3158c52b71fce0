"""Dataset indexes on local disk: the wids format both ways (a real ``wids.ShardListDataset``
reads ours; an index ``widsindex`` wrote is read by us, exactly), a stale index named, bad
records, Sources over indexes, the ``index`` command (JSONL and tar, globs and braces,
resumable) and ``shards`` writing the split indexes."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pytest

from datamodules import Source, StreamingDataModule
from datamodules.shards.dataset_index import (
    SEEK_BUDGET,
    dataset_index_json,
    parse_dataset_index,
    resolve_url,
)
from datamodules.shards.errors import RecordError, ShardError
from datamodules.shards.index import index_shard
from datamodules.shards.index_cli import index_main
from datamodules.shards.shard_index import ShardIndex
from datamodules.streaming import write_shards
from tests import subprocesses

wids = pytest.importorskip("wids")


def tar_records(n: int, first: int = 0) -> list[dict[str, Any]]:
    return [
        {"__key__": f"s{i:05d}", "txt": f"text {i}", "cls": i % 3, "json": {"id": i}}
        for i in range(first, first + n)
    ]


def jsonl_records(n: int, first: int = 0) -> list[dict[str, Any]]:
    return [{"id": i, "text": "x" * (i % 11)} for i in range(first, first + n)]


def ids(dm: StreamingDataModule, field: str = "id") -> list[int]:
    out = []
    for batch in dm.train_dataloader():
        values = batch[field]
        out += [int(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]
    return out


def make(files: Any, tmp_path: Path, **kwargs: Any) -> StreamingDataModule:
    kwargs = {"batch_size": 8, "shuffle_buffer": 16, "num_workers": 0, **kwargs}
    return StreamingDataModule(files, index_cache=str(tmp_path / "index-cache"), **kwargs)


def no_shard_opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every shard that setup would scan or stat (there must be none)."""
    import datamodules.shards.index as index_module

    touched: list[str] = []
    monkeypatch.setattr(index_module, "_scan", lambda p, *a, **k: touched.append(p))
    monkeypatch.setattr(index_module, "file_version", lambda p, *a, **k: touched.append(p))
    return touched


# ---------------------------------------------------------------------------- wids interop


def test_write_shards_writes_an_index_that_wids_reads(tmp_path: Path) -> None:
    paths = write_shards(tar_records(90), tmp_path / "out", max_records=40)
    index = tmp_path / "out" / "shard.index.json"
    data = json.loads(index.read_text())
    assert data["__kind__"] == "wids-shard-index-v1" and data["wids_version"] == 1
    assert data["name"] == "shard"
    assert [e["url"] for e in data["shardlist"]] == [Path(p).name for p in paths]  # relative
    assert [e["nsamples"] for e in data["shardlist"]] == [40, 40, 10]
    assert [e["filesize"] for e in data["shardlist"]] == [os.path.getsize(p) for p in paths]
    assert data["shardlist"][0]["every"] == 16 and len(data["shardlist"][0]["offsets"]) == 3

    dataset = wids.ShardListDataset(
        str(index), cache_dir=str(tmp_path / "wids"), transformations=[]
    )
    assert len(dataset) == 90
    for i in (0, 39, 40, 89):
        sample = dataset[i]
        assert sample["__key__"] == f"s{i:05d}"
        read = {k: v.read() if hasattr(v, "read") else v for k, v in sample.items()}
        assert read[".txt"] == f"text {i}".encode() and json.loads(read[".json"]) == {"id": i}


def test_the_writers_index_is_what_a_scan_finds(tmp_path: Path) -> None:
    for fmt, records in (("tar", tar_records(50)), ("jsonl", jsonl_records(3000))):
        out = tmp_path / fmt
        paths = write_shards(records, out, fmt=fmt, max_records=2100 if fmt == "jsonl" else 33)
        table = parse_dataset_index((out / "shard.index.json").read_bytes(), str(out / "x.json"))
        for path, listed in zip(paths, table, strict=True):
            scanned = index_shard(path, cache_dir=False)
            assert (listed.count, listed.size) == (scanned.count, scanned.size)
            if len(scanned.offsets) > 1:
                assert (listed.every, listed.offsets, listed.lines) == (
                    scanned.every,
                    scanned.offsets,
                    scanned.lines,
                )


def widsindex_create(shards: list[str], output: Path, cwd: Path, monkeypatch) -> None:
    """Runs webdataset's own ``widsindex create`` (its function, in this process)."""
    from wids import wids_index

    monkeypatch.chdir(cwd)
    args = argparse.Namespace(files=shards, output=str(output), name="", info=None, base=None)
    wids_index.main_create(args)


def test_an_index_widsindex_wrote_is_read_exactly(tmp_path: Path, monkeypatch) -> None:
    shards = tmp_path / "shards"
    for k, n in enumerate((37, 5, 60)):  # uneven: worker ranges start inside shards
        write_shards(tar_records(n, first=100 * k), shards, prefix=f"part{k}")
    index = tmp_path / "shards" / "wids.json"
    widsindex_create(["part{0,1,2}-000000.tar"], index, shards, monkeypatch)
    entry = json.loads(index.read_text())["shardlist"][0]
    assert set(entry) == {"url", "nsamples", "filesize", "md5sum"}  # no keys of ours
    expected = sorted(i for k, n in enumerate((37, 5, 60)) for i in range(100 * k, 100 * k + n))
    touched = no_shard_opened(monkeypatch)
    dm = make(str(index), tmp_path, num_workers=2, batch_size=7)
    dm.setup("fit")
    assert touched == [] and dm.split_size("train") == 102
    assert dm.shards["train"][0].counted_only and not dm.shards["train"][0].offsets
    monkeypatch.undo()
    dm = make(str(index), tmp_path, num_workers=2, batch_size=7, transform=lambda r: r["json"])
    assert sorted(ids(dm)) == expected  # every record exactly once, reading from shard starts
    # Two ranks of one epoch: disjoint, complete, even.
    streams = [dm.make_stream("train", rank, 2) for rank in range(2)]
    seen = [[i for batch in s for i in batch["id"].tolist()] for s in streams]
    assert sorted(seen[0] + seen[1]) == expected and len(seen[0]) == len(seen[1]) == 51


def test_relative_urls_and_base_resolve_as_wids_resolves_them(tmp_path: Path) -> None:
    assert resolve_url("http://h/a/b", "s.tar") == "http://h/a/b/s.tar"
    assert resolve_url("http://h/a/b", "../c/s.tar") == "http://h/a/c/s.tar"
    assert resolve_url("http://h/a", "/x/s.tar") == "http://h/x/s.tar"
    assert resolve_url("http://h/a", "s3://b/s.tar") == "s3://b/s.tar"
    paths = write_shards(jsonl_records(20), tmp_path / "data", fmt="jsonl", max_records=10)
    listing = {
        "__kind__": "wids-shard-index-v1",
        "wids_version": 1,
        "shardlist": [{"url": Path(p).name, "nsamples": 10} for p in paths],
    }
    elsewhere = tmp_path / "indexes"
    elsewhere.mkdir()
    (elsewhere / "a.json").write_text(json.dumps({**listing, "base_path": "../data"}))
    (elsewhere / "b.json").write_text(json.dumps({**listing, "base": str(tmp_path / "data")}))
    for name in ("a.json", "b.json"):
        dm = make(str(elsewhere / name), tmp_path)
        assert sorted(ids(dm)) == list(range(20))
        assert [os.path.abspath(p) for p in dm.shards["train"].paths] == paths


def test_a_seek_budget_keeps_big_indexes_small(monkeypatch) -> None:
    import datamodules.shards.dataset_index as dataset_index

    assert SEEK_BUDGET == 1 << 20
    monkeypatch.setattr(dataset_index, "SEEK_BUDGET", 2048)  # as 1M offsets over 512x the shards
    shard = ShardIndex("s.tar", "tar", None, "raise", 4096, every=16,
                       offsets=tuple(range(0, 256 * 1000, 1000)), size=10**6)  # fmt: skip
    few = dataset_index_json([shard] * 4, "i.json")["shardlist"][0]
    assert few["every"] == 16 and len(few["offsets"]) == 256  # all of them
    entry = dataset_index_json([shard] * 256, "i.json")["shardlist"][0]  # 8 each
    assert entry["every"] == 16 * 32 and entry["offsets"] == list(shard.offsets[::32])
    huge = dataset_index_json([shard] * 2049, "i.json")["shardlist"][0]
    assert set(huge) == {"url", "nsamples", "filesize"}  # as small as wids' own


# ---------------------------------------------------------------------------- checks


def test_a_stale_index_is_named_when_the_shard_is_opened(tmp_path: Path) -> None:
    paths = write_shards(jsonl_records(40), tmp_path / "out", fmt="jsonl", max_records=20)
    index = tmp_path / "out" / "shard.index.json"
    before = os.path.getsize(paths[1])
    write_shards(jsonl_records(25, first=20), tmp_path / "again", fmt="jsonl")
    os.replace(tmp_path / "again" / "shard-000000.jsonl", paths[1])  # rewritten later
    dm = make(str(index), tmp_path, shuffle=False)
    dm.setup("fit")  # reads the index only: nothing wrong yet
    with pytest.raises(ShardError) as caught:
        ids(dm)
    message = str(caught.value)
    after = os.path.getsize(paths[1])
    assert paths[1] in message and str(index) in message
    assert f"{after} bytes" in message and f"says {before} bytes" in message


def test_bad_records_noted_by_the_index_need_on_error_skip(tmp_path: Path) -> None:
    root = tmp_path / "shards"
    root.mkdir()
    good = "".join(json.dumps({"id": i}) + "\n" for i in range(6))
    (root / "a.jsonl").write_text(good)
    (root / "b.jsonl").write_text('{"id": 10}\n{not json\n{"id": 11}\n')
    assert index_main([str(root / "*.jsonl"), "--output", str(root / "all.index.json")]) == 0
    entry = json.loads((root / "all.index.json").read_text())["shardlist"][1]
    assert entry["skipped"] == 1 and entry["nsamples"] == 2
    with pytest.raises(ValueError, match=r"b\.jsonl holds 1 bad record.*on_error='skip'"):
        make(str(root / "all.index.json"), tmp_path).setup("fit")
    dm = make(str(root / "all.index.json"), tmp_path, on_error="skip")
    assert sorted(ids(dm)) == [0, 1, 2, 3, 4, 5, 10, 11]
    assert dm.skipped.counts == {str(root / "b.jsonl"): 1}


def test_sources_and_plain_files_mix_with_indexes(tmp_path: Path) -> None:
    write_shards(jsonl_records(30), tmp_path / "a", fmt="jsonl", max_records=10)
    extra = write_shards(jsonl_records(12, first=100), tmp_path / "b", fmt="jsonl")
    dm = make(
        [
            Source(str(tmp_path / "a" / "shard.index.json"), weight=1, name="a"),
            Source(extra, weight=1, name="b"),
        ],
        tmp_path,
        epoch_size=20,
    )
    dm.setup("fit")
    assert dm.quotas(0) == {"a": 10, "b": 10}
    got = ids(dm)
    assert len(got) == 20 and len({i for i in got if i < 100}) == 10
    listed = make([str(tmp_path / "a" / "shard.index.json"), *extra], tmp_path)
    assert sorted(ids(listed)) == list(range(30)) + list(range(100, 112))
    with pytest.raises(ValueError, match="listed twice"):
        make([str(tmp_path / "a" / "shard.index.json"), str(tmp_path / "a" / "shard-000000.jsonl")],
             tmp_path).setup("fit")  # fmt: skip


def test_a_json_file_that_is_no_index_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match="is not a dataset index"):
        make(str(tmp_path / "x.json"), tmp_path).setup("fit")
    with pytest.raises(ValueError, match="cannot read it"):
        make(str(tmp_path / "missing.index.json"), tmp_path).setup("fit")


# ---------------------------------------------------------------------------- the command


def test_index_command_on_jsonl_and_tar_with_braces_and_globs(tmp_path: Path) -> None:
    jl = write_shards(jsonl_records(2500), tmp_path / "jl", fmt="jsonl", max_records=1100)
    tr = write_shards(tar_records(40), tmp_path / "tr", max_records=15)
    out = tmp_path / "index" / "all.index.json"
    spec = [str(tmp_path / "jl" / "shard-{000000..000002}.jsonl"), str(tmp_path / "tr" / "*.tar")]
    assert index_main([*spec, "--output", str(out), "--workers", "2"]) == 0
    data = json.loads(out.read_text())
    assert [e["url"] for e in data["shardlist"]] == [
        os.path.relpath(p, out.parent) for p in jl + tr
    ]
    written = json.loads((tmp_path / "jl" / "shard.index.json").read_text())["shardlist"]
    assert [e["nsamples"] for e in data["shardlist"]] == [1100, 1100, 300, 15, 15, 10]
    assert data["shardlist"][0]["offsets"] == written[0]["offsets"]  # what the writer noted
    dm = make(str(out), tmp_path, transform=lambda r: {"id": r["id"] if "id" in r else
                                                      r["json"]["id"] + 10_000})  # fmt: skip
    assert sorted(ids(dm)) == list(range(2500)) + list(range(10_000, 10_040))


def test_index_command_is_resumable(tmp_path: Path, monkeypatch, capsys) -> None:
    import datamodules.shards.index_cli as cli

    paths = write_shards(jsonl_records(50), tmp_path, fmt="jsonl", max_records=10)
    out = tmp_path / "all.index.json"
    missing = str(tmp_path / "shard-000009.jsonl")
    assert index_main([*paths, missing, "--output", str(out), "--workers", "1"]) == 1
    assert missing in capsys.readouterr().err and not out.exists()
    indexed: list[str] = []
    real = cli._index_one
    monkeypatch.setattr(cli, "_index_one", lambda job: indexed.append(job[0]) or real(job))
    assert index_main([*paths, "--output", str(out), "--workers", "1"]) == 0
    assert indexed == []  # every shard was noted by the interrupted run
    assert not (tmp_path / "all.index.json.part").exists()
    more = write_shards(jsonl_records(5, first=50), tmp_path / "more", fmt="jsonl")
    assert index_main([*paths, *more, "--output", str(out), "--workers", "1"]) == 0
    assert indexed == more  # a rerun over the index adds the new shard only
    assert sorted(ids(make(str(out), tmp_path))) == list(range(55))


def test_index_help_imports_neither_torch_nor_lightning() -> None:
    import sys

    code = (
        "import sys\nfrom datamodules.__main__ import main\n"
        "try:\n    main(['index', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))"
    )
    root = Path(__file__).resolve().parents[3]
    result = subprocesses.run([sys.executable, "-c", code], text=True,
                            cwd=root)  # fmt: skip
    assert result.stdout.strip().endswith("[]"), result.stdout + result.stderr
    assert "--output" in result.stdout


def test_records_of_a_stale_index_are_never_read_silently(tmp_path: Path) -> None:
    # A shard with more records than its index says: the size check catches it first.
    paths = write_shards(tar_records(20), tmp_path, max_records=10)
    index = tmp_path / "shard.index.json"
    write_shards(tar_records(12, first=50), tmp_path / "b")
    os.replace(tmp_path / "b" / "shard-000000.tar", paths[0])
    with pytest.raises(RecordError, match="dataset index"):
        ids(make(str(index), tmp_path, num_workers=1), "cls")


def test_expand_indexes_gives_the_listed_shards_for_readers_of_paths(tmp_path: Path) -> None:
    from datamodules.shards.shared_indexing import expand_indexes

    paths = write_shards(jsonl_records(30), tmp_path / "a", fmt="jsonl", max_records=10)
    other = str(tmp_path / "b" / "*.jsonl")
    got = expand_indexes([str(tmp_path / "a" / "*.index.json"), other])
    assert got == [*paths, other]  # the index's shards in order; the rest untouched


def test_the_shards_command_writes_the_split_indexes(tmp_path: Path) -> None:
    import numpy as np
    from PIL import Image

    from datamodules.__main__ import main

    src = tmp_path / "src"
    for c, name in enumerate(("ant", "bee")):
        (src / name).mkdir(parents=True)
        for j in range(5):
            pixels = np.full((8, 8, 3), 40 * c + j, dtype=np.uint8)
            Image.fromarray(pixels).save(src / name / f"{j}.png")
    out = tmp_path / "out"
    assert main(["shards", str(src), str(out), "--val-split", "0.2", "--workers", "1"]) == 0
    for split, n in (("train", 8), ("val", 2)):
        data = json.loads((out / f"{split}.index.json").read_text())
        assert data["name"] == split and sum(e["nsamples"] for e in data["shardlist"]) == n
        assert all(not e["url"].startswith("/") for e in data["shardlist"])
    dm = make(str(out / "train.index.json"), tmp_path, transform=lambda r: {"id": r["cls"]})
    assert sorted(ids(dm)) == [0] * 4 + [1] * 4


def test_text_reads_the_files_an_index_lists(tmp_path: Path) -> None:
    from datamodules import TextDataModule

    texts = [{"text": f"document {i} " + "w" * (i % 5)} for i in range(12)]
    write_shards(texts, tmp_path / "corpus", fmt="jsonl", max_records=5)
    dm = TextDataModule(train_file=str(tmp_path / "corpus" / "shard.index.json"), val_split=0,
                        shuffle=False, bucket=False, batch_size=12)  # fmt: skip
    dm.setup("fit")
    assert dm.split_size("train") == 12
