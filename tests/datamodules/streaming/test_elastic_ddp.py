"""Real DDP (gloo) through the real Trainer: 2 processes x 2 workers train and validate on
disjoint, complete and even shares; a checkpoint taken mid-epoch there resumes on 1 rank x 0
workers and on 3 ranks x 1 worker. Across both runs every record of the interrupted epoch is
trained on exactly once, every resumed rank gets the same number of batches, and the next
epoch is exactly a fresh run's on the new layout."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from datamodules import StreamingDataModule
from tests import forked
from tests.datamodules.streaming import ddp_resume_runner
from tests.datamodules.streaming.ddp_resume_runner import batch_ids, fit
from tests.datamodules.streaming.test_datamodule import VAL, VAL_SIZES, write_jsonl

SIZES = [13, 1, 22, 0, 9, 6]  # 51 records, uneven, one empty shard
PER_EPOCH = 7  # 2 ranks: ceil(ceil(51 / 2) / 4)
STOP = PER_EPOCH + 3  # the checkpoint: epoch 1, after 3 batches per rank


def run(kwargs: dict[str, Any], out: Path, devices: int, **options: Any) -> list[dict[str, Any]]:
    """``ddp_resume_runner.py`` on ``devices`` processes (forked, ``ddp_fork``); each rank's
    record."""
    argv = ["--kwargs", json.dumps(kwargs), "--out", str(out), "--devices", str(devices)]
    argv += ["--launch", "fork"]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    code, log = forked.run_main(ddp_resume_runner.main, argv, out.with_name(out.name + ".log"))
    assert code == 0, log[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(devices)]


def fresh_epoch(
    kwargs: dict[str, Any], world: int, epoch: int, ids: Callable[[Any], list[int]] = batch_ids
) -> list[list[list[int]]]:
    """Each rank's batches of ``epoch`` in a fresh run on ``world`` ranks (no Trainer)."""
    per_rank = []
    for rank in range(world):
        dm = StreamingDataModule(**kwargs, persistent_workers=False)  # none left to collect
        dm._rank_world = lambda rank=rank: (rank, world)  # type: ignore[method-assign]
        loader = dm.train_dataloader()
        loader.set_epoch(epoch)
        per_rank.append([ids(b) for b in loader])
    return per_rank


def interrupted_run(
    root: Path, kwargs: dict[str, Any], **options: Any
) -> tuple[list[dict[str, Any]], Path]:
    """2 ranks x 2 workers, stopped and checkpointed in epoch 1 after 3 batches per rank: each
    rank's record and the checkpoint (whose saved position is checked here)."""
    ranks = run({**kwargs, "num_workers": 2}, root / "first", 2, max_steps=STOP,
                ckpt_dir=root / "ckpt", **options)  # fmt: skip
    path = root / "ckpt" / f"step={STOP}.ckpt"
    state = torch.load(path, weights_only=True)["StreamingDataModule"]["train_stream"]
    saved = (state["epoch"], state["batches"], state["world_size"], state["num_workers"])
    assert saved == (1, 3, 2, 2)
    return ranks, path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A 2 ranks x 2 workers run stopped (and checkpointed) in epoch 1, after 3 batches."""
    root = tmp_path_factory.mktemp("elastic")
    kwargs = {
        "train_files": write_jsonl(root, "train", SIZES, 0),
        "val_files": write_jsonl(root, "val", VAL_SIZES, 100),
        "index_cache": str(root / "index"),
        "batch_size": 4,
        "shuffle_buffer": 6,
    }
    ranks, path = interrupted_run(root, kwargs)
    assert [len(r["train"]["0"]) for r in ranks] == [PER_EPOCH] * 2
    head = [b for r in ranks for b in r["train"]["1"]]
    assert len(head) == 6
    return {"kwargs": kwargs, "path": path, "head": head, "root": root, "ranks": ranks}


def disjoint_complete_even(per_rank: list[list[list[int]]], expected: list[int], batches: int):
    assert [len(b) for b in per_rank] == [batches] * len(per_rank)  # the same on every rank
    ids = Counter(i for rank in per_rank for b in rank for i in b)
    assert sorted(ids) == expected and set(ids.values()) == {1}  # disjoint and complete


def test_ddp_two_processes_disjoint_complete_even(checkpoint):
    ranks = checkpoint["ranks"]
    assert [r["world"] for r in ranks] == [2, 2]
    disjoint_complete_even([r["train"]["0"] for r in ranks], list(range(sum(SIZES))), PER_EPOCH)
    disjoint_complete_even([r["val"]["0"] for r in ranks], VAL, 2)  # ceil(ceil(11 / 2) / 4)
    assert ranks[0]["train"]["1"] != ranks[0]["train"]["0"][:3]  # reshuffled


def check(checkpoint: dict[str, Any], ranks: list[dict[str, Any]], world: int, workers: int):
    interrupted = [r["train"]["1"] for r in ranks]
    assert len({len(batches) for batches in interrupted}) == 1  # the same count on every rank
    delivered = Counter(i for b in checkpoint["head"] for i in b)
    delivered.update(i for batches in interrupted for b in batches for i in b)
    assert sorted(delivered) == list(range(sum(SIZES))) and set(delivered.values()) == {1}
    after = [r["train"]["2"] for r in ranks]
    fresh = fresh_epoch({**checkpoint["kwargs"], "num_workers": workers}, world, 2)
    assert after == fresh


def test_resume_on_one_rank_without_workers(checkpoint):
    record = fit(
        {**checkpoint["kwargs"], "num_workers": 0}, epochs=3, ckpt_path=str(checkpoint["path"])
    )
    assert len(record["train"]["1"]) == 7  # 51 - 24 records left, in batches of 4
    check(checkpoint, [record], 1, 0)


def test_resume_on_three_ranks_with_one_worker(checkpoint):
    out = checkpoint["root"] / "three"
    ranks = run(
        {**checkpoint["kwargs"], "num_workers": 1},
        out,
        3,
        epochs=3,
        ckpt_path=checkpoint["path"],
    )
    assert [r["world"] for r in ranks] == [3, 3, 3]
    assert [len(r["train"]["1"]) for r in ranks] == [3, 3, 3]  # ceil(ceil(27 / 3) / 4)
    check(checkpoint, ranks, 3, 1)
    for epoch in ("1", "2"):
        disjoint_complete_even([r["val"][epoch] for r in ranks], VAL, 1)
