"""A weight schedule under real DDP (2 gloo processes x 1 worker): every epoch's quotas exactly
once across the ranks, even batches; a checkpoint taken there mid-epoch resumes on 1 rank x 0
workers with a changed mix (other weights and a source added): the interrupted epoch ends as
it was planned, then the new mix, each source continuing its run, the new one from its start."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from datamodules import StreamingDataModule
from tests.datamodules.streaming.ddp_resume_runner import fit
from tests.datamodules.streaming.test_elastic_ddp import run
from tests.datamodules.streaming.test_mix_schedules import (
    assert_balanced,
    epoch_ids,
    source_of,
    write_sources,
)

PER_EPOCH = 5  # 40 records, 2 ranks, batches of 4
STOP = PER_EPOCH + 2  # the checkpoint: epoch 1, after 2 batches per rank


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("mixddp")
    folders = write_sources(root)
    common = {"epoch_size": 40, "batch_size": 4, "shuffle_buffer": 8,
              "index_cache": str(root / "index")}  # fmt: skip
    old = {
        **common,
        "train_files": [
            {"files": str(folders["web"]), "weight": [[0, 3], [2, 1]], "name": "web"},
            {"files": str(folders["code"]), "weight": 1, "name": "code"},
        ],
    }
    ranks = run({**old, "num_workers": 1}, root / "first", 2, epochs=3, max_steps=STOP,
                ckpt_dir=root / "ckpt")  # fmt: skip
    path = root / "ckpt" / f"step={STOP}.ckpt"
    saved = torch.load(path, weights_only=True)["StreamingDataModule"]["train_stream"]
    assert (saved["epoch"], saved["batches"], saved["world_size"]) == (1, 2, 2)
    assert saved["mix"]["sources"][0]["weight"] == [[0, 3], [2, 1]]  # plain data
    return {"root": root, "folders": folders, "old": old, "common": common, "ranks": ranks,
            "path": path}  # fmt: skip


def test_a_schedule_under_ddp_is_exactly_once_and_even(interrupted) -> None:
    ranks = interrupted["ranks"]
    assert [r["world"] for r in ranks] == [2, 2]
    assert [len(r["train"]["0"]) for r in ranks] == [PER_EPOCH] * 2
    ids = [i for r in ranks for b in r["train"]["0"] for i in b]
    assert len(set(ids)) == 40 and Counter(map(source_of, ids)) == {"web": 30, "code": 10}
    assert [len(r["train"]["1"]) for r in ranks] == [2, 2]


def test_a_changed_mix_with_a_new_source_resumes_on_another_layout(interrupted) -> None:
    folders = interrupted["folders"]
    new = {
        **interrupted["common"],
        "num_workers": 0,
        "train_files": [
            {"files": str(folders["web"]), "weight": 1, "name": "web"},
            {"files": str(folders["code"]), "weight": 1, "name": "code"},
            {"files": str(folders["math"]), "weight": 2, "name": "math"},  # added
        ],
    }
    record = fit(new, devices=1, epochs=3, ckpt_path=str(interrupted["path"]))
    head = [i for r in interrupted["ranks"] for b in r["train"]["1"] for i in b]
    rest = [i for b in record["train"]["1"] for i in b]
    old = StreamingDataModule(**interrupted["old"], num_workers=0)
    planned = epoch_ids(old, world=1, workers=0, epoch=1)  # web 27 + code 13
    assert sorted(head + rest) == sorted(planned)  # the interrupted epoch, each record once
    after = [i for b in record["train"]["2"] for i in b]
    assert Counter(map(source_of, after)) == {"web": 10, "code": 10, "math": 20}
    assert sorted(i for i in after if i >= 200) == list(range(200, 220))  # math from its start
    first = [i for r in interrupted["ranks"] for b in r["train"]["0"] for i in b]
    draws = first + planned + after
    assert_balanced([i for i in draws if i < 100], range(60))  # web: 30 + 27 + 10 draws
    assert_balanced([i for i in draws if 100 <= i < 200], range(100, 140))  # code: 10 + 13 + 10


def test_the_same_source_name_over_other_files_is_refused(interrupted, tmp_path: Path) -> None:
    other = {
        **interrupted["common"],
        "num_workers": 0,
        "train_files": [
            {
                "files": str(interrupted["folders"]["web"] / "part-0.jsonl"),
                "weight": 1,
                "name": "web",
            },  # fmt: skip
            {"files": str(interrupted["folders"]["code"]), "weight": 1, "name": "code"},
        ],
    }
    with pytest.raises(ValueError, match=r"source 'web' holds other data .*no longer has"):
        fit(other, devices=1, epochs=3, ckpt_path=str(interrupted["path"]))
