"""Streams over dataset indexes through the real Trainer: 2-process DDP (gloo) disjoint, complete
and even for train and val, and a mid-epoch checkpoint that resumes exactly (with workers)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from datamodules import StreamingDataModule
from datamodules.streaming import write_shards
from tests import subprocesses
from tests.datamodules.contract import assert_resume_mid_epoch_is_exact

ROOT = Path(__file__).resolve().parents[3]
TRAIN, VAL = 53, 17  # odd totals over uneven shards


def batch_ids(batch: Any) -> list[int]:
    return batch["id"].tolist()


def write_data(root: Path) -> dict[str, str]:
    """Train and val shards (uneven sizes) and their indexes, written by write_shards."""
    write_shards(
        ({"id": i, "text": "t" * (i % 9)} for i in range(TRAIN)),
        root / "train",
        fmt="jsonl",
        max_bytes=300,  # shards of about a dozen records
    )
    write_shards(({"id": 1000 + i} for i in range(VAL)), root / "val", fmt="jsonl", max_records=6)
    return {
        "train_files": str(root / "train" / "shard.index.json"),
        "val_files": str(root / "val" / "shard.index.json"),
    }


def ddp_factory(root: str) -> tuple[StreamingDataModule, Any]:
    """Factory for tests/ddp_runner.py: the same indexed streams in every process."""
    files = {
        "train_files": str(Path(root) / "train" / "shard.index.json"),
        "val_files": str(Path(root) / "val" / "shard.index.json"),
    }
    dm = StreamingDataModule(
        **files, batch_size=4, num_workers=0, shuffle_buffer=8, index_cache=f"{root}/cache"
    )
    return dm, batch_ids


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("indexed")
    write_data(root)
    return root


def test_ddp_over_an_index_is_disjoint_complete_and_even(data: Path, tmp_path: Path) -> None:
    # The one DDP test launched as users launch ``strategy="ddp"``: Lightning re-runs the
    # script, in a fresh interpreter, for rank 1 (the others fork their ranks: tests/forked.py).
    command = [
        sys.executable, str(ROOT / "tests" / "ddp_runner.py"),
        "--factory", f"{__name__}:ddp_factory", "--kwargs", json.dumps({"root": str(data)}),
        "--out", str(tmp_path), "--epochs", "1", "--devices", "2",
    ]  # fmt: skip
    result = subprocesses.run(command, cwd=ROOT, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    train = [[i for b in r["train"][0] for i in b] for r in ranks]
    assert set(train[0]).isdisjoint(train[1]) and sorted(train[0] + train[1]) == list(range(53))
    assert len(ranks[0]["train"][0]) == len(ranks[1]["train"][0])  # even: no rank waits
    val = [[i for b in r["val"][0] for i in b] for r in ranks]
    assert sorted(val[0] + val[1]) == list(range(1000, 1000 + VAL))
    assert len(ranks[0]["val"][0]) == len(ranks[1]["val"][0])


def test_resume_over_an_index_is_exact(data: Path, tmp_path: Path) -> None:
    files = {
        "train_files": str(data / "train" / "shard.index.json"),
        "val_files": str(data / "val" / "shard.index.json"),
    }

    def make() -> StreamingDataModule:
        return StreamingDataModule(
            **files, batch_size=4, num_workers=2, shuffle_buffer=8,
            index_cache=str(tmp_path / "cache"),
        )  # fmt: skip

    reference = assert_resume_mid_epoch_is_exact(
        make, batch_ids, tmp_path, steps=lambda per_epoch: (3, per_epoch + 5)
    )
    assert sorted(i for b in reference[0] for i in b) == list(range(TRAIN))
