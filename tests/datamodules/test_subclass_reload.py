"""A subclass that fixes base arguments itself reloads from a real Trainer checkpoint.

Its checkpoint holds what its own signature takes (its named arguments, and what reached the
base through its ``**kwargs``), not the arguments it passes to the base itself: the docs'
subclass examples (executed from the markdown) and one subclass of every kind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

from datamodules import BaseDataModule, StreamingDataModule, TextDataModule
from tests.datamodules.contract import quiet_trainer
from tests.recording import RecordingModel
from tests.test_docs import runner, write_tones

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


class FixedText(TextDataModule):
    """Texts and packing fixed here; the rest from the caller."""

    def __init__(self, n: int = 30, **kwargs: Any) -> None:
        texts = ["abcdefghij"[: 1 + i % 9] for i in range(n)]
        super().__init__(texts, tokenizer="char", packing=True, seq_length=8, **kwargs)
        self.n = n


class FixedStream(StreamingDataModule):
    """The shards found under ``root``; the shuffle buffer and storage options (a credential
    among them) fixed here."""

    def __init__(self, root: str, **kwargs: Any) -> None:
        options = {"key": "AKIA-fixed-here", "anon": False}
        super().__init__(
            os.path.join(root, "*.jsonl"), shuffle_buffer=0, storage_options=options, **kwargs
        )


def wine(tmp_path: Path) -> tuple[BaseDataModule, dict[str, Any]]:
    dm = runner("wine")()["WineDataModule"](batch_size=16, val_split=0.2)
    return dm, {"batch_size": 16, "val_split": 0.2}


def csv_images(tmp_path: Path) -> tuple[BaseDataModule, dict[str, Any]]:
    rows = []
    for i, label in enumerate(["cat", "dog"] * 6):
        path = tmp_path / f"{i}.png"
        Image.new("RGB", (10, 10), (i, 0, 0)).save(path)
        rows.append(f"{path},{label}")
    (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n")
    csv_file = str(tmp_path / "labels.csv")
    cls = runner("csv-images")()["CsvImageDataModule"]
    dm = cls(csv_file, image_size=8, batch_size=4, num_workers=0)
    return dm, {"csv_file": csv_file, "image_size": 8, "batch_size": 4, "num_workers": 0}


def tones(tmp_path: Path) -> tuple[BaseDataModule, dict[str, Any]]:
    write_tones(tmp_path / "tones")
    root = str(tmp_path / "tones")
    dm = runner("tone-folder")()["ToneFolder"](root, batch_size=4, val_split=0.25, num_workers=0)
    return dm, {"root": root, "batch_size": 4, "val_split": 0.25, "num_workers": 0}


def text(tmp_path: Path) -> tuple[BaseDataModule, dict[str, Any]]:
    dm = FixedText(n=40, batch_size=2, num_workers=0)
    return dm, {"n": 40, "batch_size": 2, "num_workers": 0}


def stream(tmp_path: Path) -> tuple[BaseDataModule, dict[str, Any]]:
    for k in range(2):
        lines = [json.dumps({"id": 5 * k + i}) for i in range(5)]
        (tmp_path / f"{k}.jsonl").write_text("\n".join(lines) + "\n")
    dm = FixedStream(str(tmp_path), batch_size=2, num_workers=0, index_cache=False)
    return dm, {"root": str(tmp_path), "batch_size": 2, "num_workers": 0, "index_cache": False}


def preference(tmp_path: Path) -> tuple[BaseDataModule, dict[str, Any]]:
    from tests.datamodules.chat.chat_data import raw_tokenizer

    raw_tokenizer().save(str(tmp_path / "tokenizer.json"))
    file = str(tmp_path / "tokenizer.json")
    dm = runner("preference-subclass")()["SumPairs"](tokenizer_file=file, n=20, batch_size=4)
    return dm, {"tokenizer_file": file, "n": 20, "batch_size": 4}


def sine_waves(tmp_path: Path) -> tuple[BaseDataModule, dict[str, Any]]:
    kwargs = {"series": 4, "context_length": 48, "prediction_length": 12, "num_workers": 0}
    return runner("sine-waves")()["SineDataModule"](**kwargs), kwargs


def squares(tmp_path: Path) -> tuple[BaseDataModule, dict[str, Any]]:
    kwargs = {"root": str(tmp_path), "count": 12, "batch_size": 4, "num_workers": 0}
    return runner("red-squares")()["SquaresDataModule"](**kwargs), kwargs


CASES: dict[str, Callable[[Path], tuple[BaseDataModule, dict[str, Any]]]] = {
    "tensor-docs-wine": wine,
    "image-folder-docs-csv-images": csv_images,
    "audio-docs-tone-folder": tones,
    "text": text,
    "streaming": stream,
    "preference-docs-subclass": preference,
    "time-series-docs-sine-waves": sine_waves,
    "detection-docs-squares": squares,
}


def first_ids(batch: Any) -> list[int]:
    if isinstance(batch, dict) and "series_index" in batch:  # a window: its series and start
        return (1000 * batch["series_index"] + batch["window_start"]).tolist()
    if isinstance(batch, dict):
        key = "id" if "id" in batch else "lengths" if "lengths" in batch else "input_ids"
        return batch[key].flatten().tolist()
    if isinstance(batch[1], list):  # detection: (images, targets)
        return [int(t["image_id"]) for t in batch[1]]
    return batch[1].flatten().tolist()


@pytest.mark.parametrize("name", list(CASES))
def test_a_subclass_fixing_base_arguments_reloads(name: str, tmp_path: Path) -> None:
    dm, saved = CASES[name](tmp_path)
    trainer = quiet_trainer(max_steps=1, limit_val_batches=0, default_root_dir=tmp_path)
    trainer.fit(RecordingModel(first_ids), datamodule=dm)
    path = tmp_path / "last.ckpt"
    trainer.save_checkpoint(path)
    assert torch.load(path, weights_only=True)["datamodule_hyper_parameters"] == saved
    assert dm.unsaved_arguments == {}
    rebuilt = type(dm).load_from_checkpoint(path)
    assert type(rebuilt) is type(dm) and dict(rebuilt.hparams) == saved
    rebuilt.setup("fit")
    assert rebuilt.fingerprint == dm.fingerprint
    assert [first_ids(b) for b in rebuilt.val_dataloader()] == [
        first_ids(b) for b in dm.val_dataloader()
    ]
