"""Tests for datamodules.remote.listing: webdataset's brace patterns and refused pipe: URLs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from datamodules import Source, StreamingDataModule
from datamodules.remote.listing import check_not_pipe, expand_braces, expand_files
from datamodules.shards.errors import ShardError


def write_jsonl(path: Path, ids: range) -> None:
    path.write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))


@pytest.fixture
def shards(tmp_path: Path) -> Path:
    for n in range(4):
        write_jsonl(tmp_path / f"train-{n:06d}.jsonl", range(10 * n, 10 * n + 3))
    write_jsonl(tmp_path / "extra-000000.jsonl", range(100, 102))
    return tmp_path


def test_a_range_keeps_its_zero_padding_and_order() -> None:
    assert expand_braces("shard-{000008..000011}.tar") == [
        "shard-000008.tar",
        "shard-000009.tar",
        "shard-000010.tar",
        "shard-000011.tar",
    ]
    assert expand_braces("s3://b/{train,val}/x.tar") == ["s3://b/train/x.tar", "s3://b/val/x.tar"]
    assert expand_braces("plain-*.tar") == ["plain-*.tar"]
    assert expand_braces("odd{name}.tar") == ["odd{name}.tar"]  # no list, no range: literal


def test_expand_files_takes_ranges_and_lists_in_their_order(shards: Path) -> None:
    found = expand_files(str(shards / "train-{000002..000000}.jsonl"))
    assert [Path(p).name for p in found] == [f"train-{n:06d}.jsonl" for n in (2, 1, 0)]
    found = expand_files(str(shards / "{extra,train}-*.jsonl"))
    assert [Path(p).name for p in found] == ["extra-000000.jsonl"] + [
        f"train-{n:06d}.jsonl" for n in range(4)
    ]


def test_a_missing_shard_of_a_range_is_named(shards: Path) -> None:
    with pytest.raises(ShardError, match=r"train-000004\.jsonl: cannot read shard .*FileNotFound"):
        dm = StreamingDataModule(str(shards / "train-{000003..000004}.jsonl"), num_workers=0)
        dm.setup("fit")


def test_a_stream_reads_every_record_of_a_brace_pattern(shards: Path) -> None:
    dm = StreamingDataModule(
        str(shards / "train-{000000..000003}.jsonl"), batch_size=4, shuffle=False, num_workers=0
    )
    dm.setup("fit")
    ids = [i for batch in dm.train_dataloader() for i in batch["id"].tolist()]
    assert ids == [10 * n + k for n in range(4) for k in range(3)]


@pytest.mark.parametrize(
    ("spec", "instead"),
    [
        ("pipe:aws s3 cp s3://bucket/train-0.tar -", "'s3://bucket/train-0.tar'"),
        ("pipe:curl -s -L https://host/data/x.tar", "'https://host/data/x.tar'"),
        ("pipe:cat /data/x.tar", "give the file's URL"),
    ],
)
def test_a_pipe_url_is_refused_at_construction_naming_the_url_to_use(
    spec: str, instead: str
) -> None:
    with pytest.raises(ValueError, match="shell commands are never run") as caught:
        StreamingDataModule(spec)
    assert str(caught.value).startswith(f"train_files={spec!r} is not accepted")
    assert instead in str(caught.value)
    with pytest.raises(ValueError, match="Source files="):
        Source([spec], weight=1.0)
    check_not_pipe("s3://bucket/train-0.tar")  # a URL itself is fine
