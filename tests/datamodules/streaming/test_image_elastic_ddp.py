"""Tar image shards through real DDP (gloo) and the real Trainer: 2 processes x 2 workers train
on disjoint, complete and even shares of decoded image batches; a checkpoint taken mid-epoch
there resumes on 1 process without workers, and over both runs every record of the
interrupted epoch is trained on exactly once; the next epoch is a fresh run's."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from datamodules.streaming import write_shards
from tests.datamodules.streaming.ddp_resume_runner import fit, label_ids
from tests.datamodules.streaming.test_elastic_ddp import (
    PER_EPOCH,
    SIZES,
    fresh_epoch,
    interrupted_run,
)


def png(i: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((10, 12, 3), i % 256, np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def write(root: Path, prefix: str, sizes: list[int], first: int) -> list[str]:
    paths, start = [], first
    for k, size in enumerate(sizes):
        records = [
            {"__key__": f"r{i:04d}", "png": png(i), "cls": i} for i in range(start, start + size)
        ]
        paths += write_shards(records, root, prefix=f"{prefix}{k}")
        start += size
    return paths


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("images")
    kwargs = {
        "train_files": write(root, "train", SIZES, 0),
        "val_files": write(root, "val", [6, 5], 100),
        "image_key": "png",
        "image_size": 8,
        "index_cache": str(root / "index"),
        "batch_size": 4,
        "shuffle_buffer": 6,
    }
    ranks, path = interrupted_run(root, kwargs, ids="labels")
    return {"kwargs": kwargs, "path": path, "ranks": ranks}


def test_two_processes_get_disjoint_complete_even_image_batches(checkpoint) -> None:
    ranks = checkpoint["ranks"]
    assert [len(r["train"]["0"]) for r in ranks] == [PER_EPOCH] * 2
    seen = Counter(i for r in ranks for b in r["train"]["0"] for i in b)
    assert sorted(seen) == list(range(51)) and set(seen.values()) == {1}
    val = Counter(i for r in ranks for b in r["val"]["0"] for i in b)
    assert sorted(val) == list(range(100, 111)) and set(val.values()) == {1}


def test_resume_on_one_process_without_workers_is_exactly_once(checkpoint) -> None:
    record = fit(
        {**checkpoint["kwargs"], "num_workers": 0},
        epochs=3,
        ckpt_path=str(checkpoint["path"]),
        id_source="labels",
    )
    head = [b for r in checkpoint["ranks"] for b in r["train"]["1"]]
    assert len(head) == 6
    assert len(record["train"]["1"]) == 7  # 51 - 24 records left, in batches of 4
    delivered = Counter(i for b in head + record["train"]["1"] for i in b)
    assert sorted(delivered) == list(range(51)) and set(delivered.values()) == {1}
    fresh = fresh_epoch({**checkpoint["kwargs"], "num_workers": 0}, 1, 2, label_ids)
    assert [record["train"]["2"]] == fresh
