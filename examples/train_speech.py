"""Recognise spoken digits with AudioDataModule: speech synthesised by espeak-ng, log-mel
features computed on the device, evaluated on voices the model never heard.

The data is generated, not downloaded: espeak-ng says "zero" ... "nine" in several accents,
voice variants, speeds and pitches, written as WAV files (22.05 kHz) into a folder of class
sub-folders, one per digit. Training voices and held-out voices are disjoint: the held-out
voice variants (``+m2``, ``+f3``) and two accents (Caribbean and Scottish English) appear only
in evaluation.
AudioDataModule resamples to 16 kHz with soxr, batches by seconds of audio (``max_duration``),
and turns the waveforms into log-mel features after the transfer; a small convolutional
network classifies them.

espeak-ng is a system package: ``apt-get install espeak-ng`` (Debian, Ubuntu), ``brew install
espeak-ng`` (macOS).

Run: ``python examples/train_speech.py`` (about a minute on 2 CPU cores), or ``--fast``
(fewer voices and epochs, about 30 s).
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn

from datamodules import AudioDataModule

warnings.filterwarnings(
    "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
)

DIGITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
TRAIN_ACCENTS = ["en-us", "en-gb", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd"]
TRAIN_VARIANTS = ["m1", "m3", "f2", "f4"]
HELD_OUT_ACCENTS = ["en-029", "en-gb-scotland"]
HELD_OUT_VARIANTS = ["m2", "f3"]
#: Held-out voices: every accent with the voice variants never trained on (two accents are
#: never trained on at all).
ACCENTS = TRAIN_ACCENTS + HELD_OUT_ACCENTS


def voices(accents: list[str], variants: list[str], speeds: list[int], pitches: list[int]):
    """Every (voice, speed, pitch) combination, the voice as espeak-ng names it."""
    return [
        (f"{a}+{v}", s, p) for a, v, s, p in itertools.product(accents, variants, speeds, pitches)
    ]


def speak(root: Path, combos: list[tuple[str, int, int]]) -> int:
    """Writes ``root/<digit>/<voice>-<speed>-<pitch>.wav`` for every digit and combination."""
    jobs = []
    for digit, (voice, speed, pitch) in itertools.product(DIGITS, combos):
        path = root / digit / f"{voice}-{speed}-{pitch}.wav"
        if not path.exists():
            jobs.append(["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch)])
            jobs[-1] += ["-w", str(path), digit]
    for digit in DIGITS:
        (root / digit).mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(4) as pool:
        for done in pool.map(lambda c: subprocess.run(c, capture_output=True), jobs):
            if done.returncode:
                raise RuntimeError(f"espeak-ng failed: {done.stderr.decode()[-500:]}")
    return len(DIGITS) * len(combos)


class DigitNet(pl.LightningModule):
    """Log-mel frames -> two strided 1-D convolutions -> mean over the clip's frames -> digit."""

    def __init__(self, n_mels: int = 40, width: int = 96, classes: int = 10) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv1d(n_mels, width, 5, stride=2, padding=2),
            nn.BatchNorm1d(width),
            nn.GELU(),
            nn.Conv1d(width, width, 5, stride=2, padding=2),
            nn.BatchNorm1d(width),
            nn.GELU(),
            nn.Conv1d(width, width, 3, padding=1),
            nn.GELU(),
        )
        self.head = nn.Linear(width, classes)
        self.correct = self.total = 0

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        frames = torch.arange(features.shape[-1], device=features.device)
        valid = (frames[None, :] < lengths[:, None]).to(features.dtype)[:, None, :]
        count = valid.sum(-1, keepdim=True)
        mean = (features * valid).sum(-1, keepdim=True) / count  # per-clip normalisation
        std = (((features - mean) * valid) ** 2).sum(-1, keepdim=True).div(count).sqrt()
        hidden = self.body((features - mean) / (std + 1e-5) * valid)
        steps = torch.div(lengths + 3, 4, rounding_mode="floor").clamp(max=hidden.shape[-1])
        keep = torch.arange(hidden.shape[-1], device=hidden.device)[None] < steps[:, None]
        pooled = (hidden * keep[:, None]).sum(-1) / steps[:, None]
        return self.head(pooled)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        logits = self(batch["input_features"], batch["feature_lengths"])
        return nn.functional.cross_entropy(logits, batch["label"], label_smoothing=0.1)

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        logits = self(batch["input_features"], batch["feature_lengths"])
        self.correct += int((logits.argmax(-1) == batch["label"]).sum())
        self.total += len(batch["label"])

    def on_validation_epoch_start(self) -> None:
        self.correct = self.total = 0

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=3e-3, weight_decay=1e-2)
        steps = self.trainer.estimated_stepping_batches
        return [optimizer], [
            torch.optim.lr_scheduler.OneCycleLR(optimizer, 3e-3, total_steps=steps)
        ]


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="fewer voices and epochs (~30 s)")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--cache", default=None, help="where the spoken digits are written")
    parser.add_argument("--workers", default="auto", help="loader workers: an int or 'auto'")
    args = parser.parse_args(argv)
    if shutil.which("espeak-ng") is None:
        sys.exit(
            "espeak-ng is not installed: apt-get install espeak-ng (Debian, Ubuntu) or "
            "brew install espeak-ng (macOS)."
        )
    speeds, pitches = ([140, 200], [40]) if args.fast else ([120, 160, 200], [30, 60])
    epochs = args.epochs or (15 if args.fast else 25)
    cache = Path(args.cache or tempfile.mkdtemp(prefix="spoken-digits-"))
    start = time.perf_counter()
    train_root, eval_root = cache / ("fast" if args.fast else "full"), cache / "held-out"
    heard = speak(train_root / "train", voices(TRAIN_ACCENTS, TRAIN_VARIANTS, speeds, pitches))
    unheard = speak(eval_root, voices(ACCENTS, HELD_OUT_VARIANTS, [150, 190], [50]))
    print(f"espeak-ng: {heard} training clips, {unheard} held-out clips "
          f"({time.perf_counter() - start:.1f} s)")  # fmt: skip
    workers: int | str = int(args.workers) if args.workers.isdigit() else args.workers
    dm = AudioDataModule(
        train_root / "train",
        val=eval_root,
        sample_rate=16000,
        features="log_mel",
        n_mels=40,
        max_duration=24.0,
        num_workers=workers,
    )
    pl.seed_everything(0, verbose=False)
    model = DigitNet()
    trainer = pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=epochs,
    )
    trainer.fit(model, datamodule=dm)
    print(dm.summary())
    accuracy = model.correct / max(1, model.total)
    print(
        f"held-out voices: accuracy {accuracy:.3f} on {model.total} clips "
        f"(chance 0.1), {time.perf_counter() - start:.1f} s in all"
    )
    return accuracy


if __name__ == "__main__":
    main()
