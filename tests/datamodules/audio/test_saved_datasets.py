"""Folders that datasets' save_to_disk wrote, local and over HTTP, as audio splits."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile

from datamodules import AudioDataModule
from tests.counting_http import counting_server
from tests.datamodules.audio.audio_data import RATE, tone

datasets = pytest.importorskip("datasets")


def saved(folder: Path, n: int, shards: int = 2) -> list[bytes]:
    """Saves ``n`` FLAC clips (lengths 1600 + 160 i) with texts ``"i"``; returns the bytes."""
    blobs = []
    for i in range(n):
        encoded = io.BytesIO()
        soundfile.write(encoded, tone(1600 + 160 * i, 200 + 20 * i, RATE), RATE, format="FLAC")
        blobs.append(encoded.getvalue())
    rows = [
        {"audio": {"bytes": b, "path": f"c{i}.flac"}, "text": str(i)} for i, b in enumerate(blobs)
    ]
    table = datasets.Dataset.from_list(rows).cast_column("audio", datasets.Audio(decode=False))
    table.save_to_disk(str(folder), num_shards=shards)
    return blobs


def texts_and_waves(dm: AudioDataModule) -> tuple[list[str], list[np.ndarray]]:
    dm.setup("fit")
    texts, waves = [], []
    for batch in dm.train_dataloader():
        batch = dm.on_after_batch_transfer(batch, 0)  # int16 PCM becomes float32 here
        texts += batch["text"]
        waves += [
            batch["input_values"][r, : batch["lengths"][r]].numpy()
            for r in range(len(batch["text"]))
        ]
    return texts, waves


def test_a_saved_dataset_folder_gives_its_clips_in_order(tmp_path: Path) -> None:
    blobs = saved(tmp_path / "train", 7)
    state = json.loads((tmp_path / "train" / "state.json").read_text())
    assert len(state["_data_files"]) == 2  # two Arrow files, read in the dataset's order
    dm = AudioDataModule(tmp_path / "train", val_split=0, batch_size=3, shuffle=False, bucket=False)
    texts, waves = texts_and_waves(dm)
    assert texts == [str(i) for i in range(7)]
    for blob, wave in zip(blobs, waves, strict=True):
        np.testing.assert_array_equal(wave, soundfile.read(io.BytesIO(blob), dtype="float32")[0])


def test_a_saved_dataset_over_http_reads_as_the_local_one(tmp_path: Path) -> None:
    saved(tmp_path / "site" / "train", 5)
    with counting_server(tmp_path / "site") as server:
        dm = AudioDataModule(
            f"{server.url}/train", val_split=0, batch_size=2, shuffle=False, bucket=False
        )
        texts, _ = texts_and_waves(dm)
        assert texts == [str(i) for i in range(5)]
        assert server.requests[("GET", "/train/state.json")]


def test_a_dataset_dict_folder_is_refused_naming_its_splits(tmp_path: Path) -> None:
    saved(tmp_path / "one", 2, shards=1)
    table = datasets.load_from_disk(str(tmp_path / "one"))
    datasets.DatasetDict({"train": table, "validation": table}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(ValueError, match=r"saved DatasetDict.*dd/train.*dd/validation"):
        AudioDataModule(tmp_path / "dd").setup("fit")


def test_a_state_json_without_arrow_files_is_named(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "state.json").write_text(json.dumps({"_data_files": []}))
    with pytest.raises(
        ValueError, match=r"broken/state\.json: the saved dataset names no data files"
    ):
        AudioDataModule(tmp_path / "broken").setup("fit")
