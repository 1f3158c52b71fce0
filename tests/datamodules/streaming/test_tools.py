"""StreamingDataModule with the tools around it: LightningCLI builds it, gzip shards are read,
``inspect`` draws the lengths of a variable-length field."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from datamodules import StreamingDataModule
from tests.datamodules.streaming.test_datamodule import (
    TRAIN,
    batch_ids,
    loader_ids,
    write_splits,
)
from tests.recording import RecordingModel


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return write_splits(tmp_path_factory.mktemp("tools"))


class PlainModel(RecordingModel):
    """RecordingModel with its batch_ids fixed, so LightningCLI can build it without arguments."""

    def __init__(self) -> None:
        super().__init__(batch_ids)


def test_lightning_cli_builds_it(data):
    from lightning.pytorch.cli import LightningCLI

    from datamodules import BaseDataModule

    args = [
        "--data", "StreamingDataModule",
        "--data.train_files", json.dumps(data["train_files"]),
        "--data.val_files", data["val_files"][0],
        "--data.index_cache", data["index_cache"],
        "--data.batch_size", "8", "--data.shuffle_buffer", "100",
        "--trainer.logger", "false",
    ]  # fmt: skip
    cli = LightningCLI(PlainModel, BaseDataModule, subclass_mode_data=True, run=False, args=args)
    dm = cli.datamodule
    assert isinstance(dm, StreamingDataModule)
    assert dm.batch_size == 8 and dm.shuffle_buffer == 100
    assert dm.files["train"] == data["train_files"]
    assert sorted(loader_ids(dm.train_dataloader())) == TRAIN
    assert loader_ids(dm.val_dataloader()) == list(range(100, 106))


def test_gzip_shards(tmp_path):
    text = "".join(json.dumps({"id": i}) + "\n" for i in range(13))
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    dm = StreamingDataModule(str(tmp_path / "a.jsonl.gz"), batch_size=5, index_cache=False)
    assert sorted(loader_ids(dm.train_dataloader())) == list(range(13))


def test_inspect_draws_the_lengths_of_a_variable_length_field(tmp_path: Path) -> None:
    from PIL import Image

    shard = tmp_path / "tokens.jsonl"
    lengths = [1 + (7 * i) % 13 for i in range(40)]
    shard.write_text("".join(json.dumps({"id": i, "tokens": [1] * n}) + "\n"
                             for i, n in enumerate(lengths)))  # fmt: skip
    dm = StreamingDataModule(str(shard), batch_size=8, num_workers=0, shuffle=False)
    key, per_batch = dm.sequence_lengths("train")
    assert key == "tokens"
    assert per_batch == [lengths[i : i + 8] for i in range(0, 40, 8)]
    batch = next(iter(dm.train_dataloader()))
    out = dm.plot_batch(batch, tmp_path / "lengths.png", split="train")
    with Image.open(out) as picture:
        assert picture.format == "PNG" and picture.size[0] > 300
    fixed = tmp_path / "fixed.jsonl"
    fixed.write_text("".join(json.dumps({"id": i, "x": [0, 1]}) + "\n" for i in range(8)))
    assert StreamingDataModule(str(fixed), batch_size=4, num_workers=0).sequence_lengths() is None
