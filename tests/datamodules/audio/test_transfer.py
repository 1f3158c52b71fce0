"""The batch crosses to the device as int16 where the source is 16-bit PCM at the target rate
and nothing is lost, and becomes exactly the float32 waveform on the device side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import soundfile
import torch

from datamodules import AudioDataModule
from tests.datamodules.audio.audio_data import RATE, tone

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def manifest(root: Path, clips: dict[str, tuple[int, str, int]]) -> Path:
    """Writes ``name: (rate, subtype, channels)`` clips (0.1 s + 1 ms x k) and their manifest."""
    lines = []
    for k, (name, (rate, subtype, channels)) in enumerate(clips.items()):
        samples = rate // 10 + rate // 1000 * k
        soundfile.write(root / name, tone(samples, 300 + 50 * k, rate, channels), rate, subtype)
        lines.append(json.dumps({"audio_filepath": name, "text": name}))
    (root / "m.jsonl").write_text("\n".join(lines) + "\n")
    return root / "m.jsonl"


def one_batch(path: Path, **kwargs: Any) -> dict[str, Any]:
    dm = AudioDataModule(
        path, val_split=0, batch_size=16, shuffle=False, bucket=False, num_workers=0, **kwargs
    )
    dm.setup("fit")
    (batch,) = list(dm.train_dataloader())
    return batch


def identity(wave: torch.Tensor) -> torch.Tensor:
    return wave  # a transform: the float32 path


PCM16 = {"a.wav": (RATE, "PCM_16", 1), "b.flac": (RATE, "PCM_16", 1), "c.wav": (RATE, "PCM_16", 1)}


def test_16_bit_pcm_at_the_target_rate_crosses_as_int16_and_equals_the_float_path(
    tmp_path: Path,
) -> None:
    path = manifest(tmp_path, PCM16)
    batch = one_batch(path)
    assert batch["input_values"].dtype == torch.int16  # what the loader hands the Trainer
    dm = AudioDataModule(path)
    moved = dm.on_after_batch_transfer(dict(batch), 0)["input_values"]
    assert moved.dtype == torch.float32
    reference = one_batch(path, train_transforms=identity)["input_values"]
    assert reference.dtype == torch.float32
    assert torch.equal(moved, reference)  # exactly the float32 path
    for row, name in enumerate(batch["text"]):
        n = int(batch["lengths"][row])
        wave = soundfile.read(tmp_path / name, dtype="float32")[0]
        assert torch.equal(moved[row, :n], torch.from_numpy(wave))
        assert not moved[row, n:].any()


@pytest.mark.parametrize(
    "other",
    [(44100, "PCM_16", 1), (RATE, "PCM_16", 2), (RATE, "PCM_24", 1), (RATE, "FLOAT", 1)],
    ids=["resampled", "averaged-to-mono", "24-bit", "float"],
)
def test_a_batch_with_a_clip_that_int16_cannot_hold_exactly_crosses_as_float32(
    tmp_path: Path, other: tuple[int, str, int]
) -> None:
    path = manifest(tmp_path, {**PCM16, "other.wav": other})
    batch = one_batch(path)
    assert batch["input_values"].dtype == torch.float32
    reference = one_batch(path, train_transforms=identity)["input_values"]
    assert torch.equal(batch["input_values"], reference)


def test_stereo_16_bit_kept_with_mono_false_crosses_as_int16(tmp_path: Path) -> None:
    path = manifest(tmp_path, {"s.wav": (RATE, "PCM_16", 2), "t.flac": (RATE, "PCM_16", 2)})
    batch = one_batch(path, mono=False)
    assert batch["input_values"].dtype == torch.int16 and batch["input_values"].shape[1] == 2
    moved = AudioDataModule(path).on_after_batch_transfer(dict(batch), 0)["input_values"]
    reference = one_batch(path, mono=False, train_transforms=identity)["input_values"]
    assert torch.equal(moved, reference)


def test_log_mel_features_of_the_int16_batch_equal_those_of_the_float_batch(
    tmp_path: Path,
) -> None:
    path = manifest(tmp_path, PCM16)
    dm = AudioDataModule(path, features="log_mel", n_mels=16)
    ints = one_batch(path, features="log_mel", n_mels=16)
    floats = one_batch(path, features="log_mel", n_mels=16, train_transforms=identity)
    assert ints["input_values"].dtype == torch.int16
    assert floats["input_values"].dtype == torch.float32
    a = dm.on_after_batch_transfer(ints, 0)["input_features"]
    b = dm.on_after_batch_transfer(floats, 0)["input_features"]
    assert torch.equal(a, b)


class Recorder(L.LightningModule):
    """Records the dtype each batch crosses with and the dtype the step gets."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.crossed: list[torch.dtype] = []
        self.stepped: list[torch.dtype] = []

    def transfer_batch_to_device(self, batch: Any, device: torch.device, idx: int) -> Any:
        self.crossed.append(batch["input_values"].dtype)
        return super().transfer_batch_to_device(batch, device, idx)

    def training_step(self, batch: dict[str, Any], index: int) -> torch.Tensor:
        self.stepped.append(batch["input_values"].dtype)
        return self.layer(batch["input_values"].mean(1, keepdim=True)).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_under_a_trainer_the_batch_crosses_as_int16_and_the_step_gets_float32(
    tmp_path: Path,
) -> None:
    path = manifest(tmp_path, PCM16)
    dm = AudioDataModule(path, val_split=0, batch_size=2, num_workers=0)
    model = Recorder()
    trainer = L.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(model, datamodule=dm)
    assert model.crossed == [torch.int16, torch.int16]
    assert model.stepped == [torch.float32, torch.float32]
