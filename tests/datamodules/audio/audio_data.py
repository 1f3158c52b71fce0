"""Tiny audio written in fixtures: numbered clips whose length says their id, class folders.

Clip ``i`` of :func:`write_numbered` is ``BASE + STEP * i`` samples at 16 kHz (a sine whose
frequency grows with ``i``), so a batch's ``lengths`` name its clips (:func:`batch_ids`). Half
are WAV, half FLAC; a NeMo manifest lists them with their durations and a transcript.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile

from datamodules import AudioDataModule

RATE, BASE, STEP = 16000, 1600, 16  # clip i: 0.1 s + 1 ms x i
N = 30


def tone(samples: int, frequency: float, rate: int = RATE, channels: int = 1) -> np.ndarray:
    """A sine of ``frequency`` Hz, ``(samples,)`` or ``(samples, channels)`` float32."""
    t = np.arange(samples) / rate
    wave = 0.3 * np.sin(2 * np.pi * frequency * t)
    if channels == 1:
        return wave.astype(np.float32)
    return np.stack([wave * (c + 1) / channels for c in range(channels)], 1).astype(np.float32)


def write_numbered(
    root: Path, n: int = N, ids: Sequence[int] | None = None, name: str = "manifest.jsonl"
) -> Path:
    """Writes ``n`` numbered clips (or the clips ``ids``) and their manifest ``root/name``;
    returns the manifest."""
    (root / "audio").mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n) if ids is None else ids:
        samples = BASE + STEP * i
        clip = f"audio/clip{i:03d}.{'wav' if i % 2 else 'flac'}"
        soundfile.write(root / clip, tone(samples, 200 + 10 * i), RATE)
        record = {"audio_filepath": clip, "duration": samples / RATE, "text": f"clip {i}"}
        lines.append(json.dumps(record) + "\n")
    manifest = root / name
    manifest.write_text("".join(lines))
    return manifest


def batch_ids(batch: dict[str, Any]) -> list[int]:
    """The ids of a batch's clips, from their lengths."""
    return [(int(n) - BASE) // STEP for n in batch["lengths"]]


def write_classes(
    root: Path, per_class: int = 4, classes: tuple[str, ...] = ("dog", "cat")
) -> Path:
    """A folder of class sub-folders of short tones (different rates and channel counts)."""
    for c, name in enumerate(classes):
        os.makedirs(root / name, exist_ok=True)
        for i in range(per_class):
            rate = (8000, 16000, 22050, 44100)[i % 4]
            wave = tone(rate // 10 + 7 * i, 300 + 100 * c, rate, channels=1 + i % 2)
            soundfile.write(root / name / f"{name}{i}.{'wav' if i % 2 else 'flac'}", wave, rate)
    return root


def ddp_datamodule(root: str) -> tuple[AudioDataModule, Any]:
    """The contract's DDP factory: duration batches (0.5 s of audio each, padding counted)."""
    dm = AudioDataModule(
        os.path.join(root, "manifest.jsonl"), max_duration=0.5, val_split=0.2, num_workers=0
    )
    return dm, batch_ids


def torchcodec_or_skip() -> None:
    """Skips the test, saying why, where ``decoder="torchcodec"`` cannot run: torchcodec not
    installed, or FFmpeg's libraries absent (``apt-get install ffmpeg``). With FFmpeg present,
    a probe decode that fails (torchcodec built for another torch, ...) fails the test."""
    import ctypes.util
    import io

    try:
        from torchcodec.decoders import AudioDecoder as CodecDecoder
    except ImportError as error:
        pytest.skip(f"decoder='torchcodec' needs torchcodec (pip install torchcodec): {error}")
    if ctypes.util.find_library("avutil") is None:
        pytest.skip(
            "decoder='torchcodec' needs FFmpeg's libraries (libavutil, libavcodec ...; Debian: "
            "apt-get install ffmpeg), not found here"
        )
    probe = io.BytesIO()
    soundfile.write(probe, tone(160, 440), RATE, format="WAV")
    CodecDecoder(probe.getvalue()).get_all_samples()


#: The clips of the mixture's two sources: short ones (0.1 s) and long ones (0.2 s).
SHORT, LONG = range(18), range(100, 109)


def write_mixture(root: Path) -> tuple[Path, Path]:
    """Two manifests, ``short.jsonl`` (clips :data:`SHORT`) and ``long.jsonl`` (:data:`LONG`)."""
    return (
        write_numbered(root, ids=SHORT, name="short.jsonl"),
        write_numbered(root, ids=LONG, name="long.jsonl"),
    )


def mixed_ddp_datamodule(root: str, **kwargs: Any) -> tuple[AudioDataModule, Any]:
    """A DDP factory: a two-source mixture in duration batches (0.5 s of audio each, padding
    counted), its weights scheduled so that its epochs have other batch counts; ``kwargs``
    replace its arguments."""
    from datamodules import Source

    sources = [
        Source(os.path.join(root, "short.jsonl"), weight=[[0, 3], [1, 1]], name="short"),
        Source(os.path.join(root, "long.jsonl"), weight=1, name="long"),
    ]
    arguments = {
        "val": os.path.join(root, "short.jsonl"),
        "val_split": 0,
        "max_duration": 0.5,
        "epoch_size": 12,
        "num_workers": 0,
        **kwargs,
    }
    return AudioDataModule(sources, **arguments), batch_ids
