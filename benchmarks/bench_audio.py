"""AudioDataModule against a Hugging Face-style Whisper pipeline and against lhotse.

Generates ``--clips`` clips of lognormal length (1-30 s, median about 5 s): half FLAC at
16 kHz mono, half MP3 at 44.1 kHz stereo (tones and noise), with a NeMo manifest. Then, with
``--workers`` loader workers each, one epoch of:

* **whisper**: ``AudioDataModule(features="whisper", batch_size=16)``, the features computed
  where the Trainer computes them (``on_after_batch_transfer``; here the CPU, in this process),
  against what fine-tuning guides do: a ``datasets`` table of the clips with an
  ``Audio(sampling_rate=16000, num_channels=1)`` column (decoded by TorchCodec, which needs
  FFmpeg's libraries) and a DataLoader whose collate decodes the batch's clips and runs
  ``transformers.WhisperFeatureExtractor`` in the workers. A second baseline decodes with
  soundfile + soxr instead (ours' decoding: the same decoding work on both sides) in the same
  collate; it is what stands in where TorchCodec cannot load (no FFmpeg), said in the output;
* **waveforms**: ``AudioDataModule(max_duration=...)`` against lhotse (a ``CutSet`` of the same
  recordings, ``DynamicBucketingSampler`` at the same ``max_duration``, audio loaded and
  resampled to 16 kHz mono in the workers, padded as ours are), with each side's padding
  efficiency (real samples / batch samples).

Figures: audio seconds per second, medians over ``--repeats``, and the ratios.
Run: ``python benchmarks/bench_audio.py`` (``--clips 200`` for a quick look; ``--data DIR``
keeps the clips for later runs, ``--only whisper`` or ``--only waveforms`` runs one part).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile
import soxr
import torch

from datamodules import AudioDataModule

logging.getLogger("datamodules").setLevel(logging.WARNING)


def make_clips(root: Path, n: int, seed: int = 0) -> tuple[Path, float]:
    """Writes the clips and ``manifest.jsonl``; returns the manifest and the total seconds."""
    rng = np.random.default_rng(seed)
    seconds = np.clip(rng.lognormal(np.log(5.0), 0.8, n), 1.0, 30.0)
    lines = []
    for i, length in enumerate(seconds):
        mp3 = i % 2 == 1
        rate, channels = (44100, 2) if mp3 else (16000, 1)
        t = np.arange(int(length * rate)) / rate
        wave = 0.2 * np.sin(2 * np.pi * (200 + i % 500) * t) + 0.02 * rng.standard_normal(len(t))
        data = np.stack([wave, wave * 0.5], 1) if channels == 2 else wave
        path = root / f"clip{i:05d}.{'mp3' if mp3 else 'flac'}"
        soundfile.write(path, data.astype(np.float32), rate)
        info = soundfile.info(path)
        lines.append(json.dumps({"audio_filepath": path.name, "duration": info.duration}))
    manifest = root / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest, float(sum(soundfile.info(root / json.loads(x)["audio_filepath"]).duration
                               for x in lines))  # fmt: skip


def timed(run: Any, repeats: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def ours_whisper(manifest: Path, workers: int) -> int:
    dm = AudioDataModule(
        manifest, features="whisper", batch_size=16, val_split=0, num_workers=workers
    )
    clips = 0
    for batch in dm.train_dataloader():
        clips += int(dm.on_after_batch_transfer(batch, 0)["input_features"].shape[0])
    return clips


class Decoded(torch.utils.data.Dataset):
    """Manifest rows decoded with soundfile + soxr to 16 kHz mono (the baselines' decoding)."""

    def __init__(self, manifest: Path) -> None:
        self.root = manifest.parent
        self.rows = [json.loads(line) for line in manifest.read_text().splitlines()]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> np.ndarray:
        frames, rate = soundfile.read(self.root / self.rows[i]["audio_filepath"], dtype="float32")
        if frames.ndim == 1:
            mono = frames
        else:  # channels added column by column: NumPy's mean over the short axis is 7x slower
            mono = frames[:, 0].copy()
            for channel in range(1, frames.shape[1]):
                mono += frames[:, channel]
            mono /= frames.shape[1]
        return soxr.resample(mono, rate, 16000) if rate != 16000 else mono


class WhisperCollate:
    def __init__(self) -> None:
        from transformers import WhisperFeatureExtractor

        self.extractor = WhisperFeatureExtractor()

    def __call__(self, waves: list[np.ndarray]) -> torch.Tensor:
        features = self.extractor(waves, sampling_rate=16000, return_tensors="pt")
        return features["input_features"]


def hf_audio_column(manifest: Path) -> Any:
    """The clips as a ``datasets`` table with an ``Audio(sampling_rate=16000)`` column (None
    where TorchCodec cannot decode: FFmpeg's libraries missing)."""
    try:
        from datasets import Audio, Dataset
        from torchcodec.decoders import AudioDecoder as CodecDecoder

        rows = [json.loads(line) for line in manifest.read_text().splitlines()]
        CodecDecoder(str(manifest.parent / rows[0]["audio_filepath"]))  # loads FFmpeg
    except (ImportError, OSError, RuntimeError):
        return None
    paths = [str(manifest.parent / r["audio_filepath"]) for r in rows]
    table = Dataset.from_dict({"audio": paths})
    return table.cast_column("audio", Audio(sampling_rate=16000, num_channels=1))


class HFWhisperCollate(WhisperCollate):
    """Decodes the batch's ``Audio`` cells (TorchCodec decoders), then the features."""

    def __call__(self, rows: list[dict[str, Any]]) -> torch.Tensor:  # type: ignore[override]
        waves = [row["audio"].get_all_samples().data[0].numpy() for row in rows]
        return super().__call__(waves)


def hf_whisper(table: Any, workers: int) -> int:
    loader = torch.utils.data.DataLoader(
        table, batch_size=16, shuffle=True, num_workers=workers, collate_fn=HFWhisperCollate()
    )
    return sum(int(features.shape[0]) for features in loader)


def soundfile_whisper(manifest: Path, workers: int) -> int:
    loader = torch.utils.data.DataLoader(
        Decoded(manifest), batch_size=16, shuffle=True, num_workers=workers,
        collate_fn=WhisperCollate(),
    )  # fmt: skip
    return sum(int(features.shape[0]) for features in loader)


def ours_waveforms(manifest: Path, workers: int, max_duration: float) -> tuple[int, float]:
    dm = AudioDataModule(manifest, max_duration=max_duration, val_split=0, num_workers=workers)
    real = padded = 0
    for batch in dm.train_dataloader():
        real += int(batch["lengths"].sum())
        padded += batch["input_values"].numel()
    return real, real / padded


class LhotseBatches(torch.utils.data.Dataset):
    """A sampled CutSet -> padded 16 kHz mono waveforms, as ours are."""

    def __getitem__(self, cuts: Any) -> torch.Tensor:
        waves = [c.resample(16000).load_audio().mean(0) for c in cuts]
        out = torch.zeros(len(waves), max(len(w) for w in waves))
        for i, w in enumerate(waves):
            out[i, : len(w)] = torch.from_numpy(w)
        return out


def lhotse_waveforms(manifest: Path, workers: int, max_duration: float) -> tuple[int, float]:
    from lhotse import CutSet, Recording, RecordingSet
    from lhotse.dataset.sampling import DynamicBucketingSampler

    rows = [json.loads(line) for line in manifest.read_text().splitlines()]
    recordings = RecordingSet.from_recordings(
        Recording.from_file(manifest.parent / r["audio_filepath"]) for r in rows
    )
    cuts = CutSet.from_manifests(recordings=recordings)
    sampler = DynamicBucketingSampler(cuts, max_duration=max_duration, shuffle=True, seed=0)
    loader = torch.utils.data.DataLoader(
        LhotseBatches(), sampler=sampler, batch_size=None, num_workers=workers
    )
    real = padded = 0
    for batch in loader:
        real += int((batch != 0).sum())
        padded += batch.numel()
    return real, real / padded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-duration", type=float, default=120.0)
    parser.add_argument(
        "--data", type=Path, default=None,
        help="keep the generated clips in this folder and reuse them on later runs "
        "(generating 2,000 clips takes minutes)",
    )  # fmt: skip
    parser.add_argument("--only", choices=("whisper", "waveforms"), default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        manifest, total = clips_in(args.data or Path(tmp), args.clips)
        print(f"{args.clips} clips, {total / 3600:.2f} h of audio, {args.workers} workers")
        if args.only != "waveforms":
            whisper_figures(manifest, total, args)
        if args.only != "whisper":
            waveform_figures(manifest, total, args)


def clips_in(root: Path, n: int) -> tuple[Path, float]:
    """The clips of :func:`make_clips` in ``root``: made there, or the ones already made."""
    manifest, made = root / "manifest.jsonl", root / f"made-{n}.json"
    if made.exists() and manifest.exists():
        return manifest, json.loads(made.read_text())["seconds"]
    root.mkdir(parents=True, exist_ok=True)
    manifest, total = make_clips(root, n)
    made.write_text(json.dumps({"seconds": total}))
    return manifest, total


def whisper_figures(manifest: Path, total: float, args: argparse.Namespace) -> None:
    ours, _ = timed(lambda: ours_whisper(manifest, args.workers), args.repeats)
    print(f"whisper features: ours {total / ours:,.0f} audio s/s (features in this process)")
    table = hf_audio_column(manifest)
    if table is None:
        print("  datasets' Audio column: not run (TorchCodec cannot load: no FFmpeg)")
    else:
        hf, _ = timed(lambda: hf_whisper(table, args.workers), args.repeats)
        print(f"  datasets' Audio(sampling_rate=16000) column + collate: {total / hf:,.0f} "
              f"audio s/s; ours {hf / ours:.2f}x")  # fmt: skip
    sf, _ = timed(lambda: soundfile_whisper(manifest, args.workers), args.repeats)
    print(f"  soundfile + soxr decoding in the same collate: {total / sf:,.0f} audio s/s; "
          f"ours {sf / ours:.2f}x")  # fmt: skip


def waveform_figures(manifest: Path, total: float, args: argparse.Namespace) -> None:
    d = args.max_duration
    ours, (_, ours_fill) = timed(lambda: ours_waveforms(manifest, args.workers, d), args.repeats)
    lh, (_, lh_fill) = timed(lambda: lhotse_waveforms(manifest, args.workers, d), args.repeats)
    print(f"waveforms, max_duration={d}: ours {total / ours:,.0f} audio s/s, lhotse "
          f"{total / lh:,.0f}: {lh / ours:.2f}x; padding efficiency ours {ours_fill:.3f}, "
          f"lhotse {lh_fill:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
