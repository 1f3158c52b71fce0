"""examples/train_speech.py: spoken digits synthesised by espeak-ng, classified from log-mel
features computed on the device, on held-out voices; run as a user runs it."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from examples.train_speech import ACCENTS, HELD_OUT_VARIANTS, TRAIN_ACCENTS, TRAIN_VARIANTS, voices
from tests import subprocesses

ROOT = Path(__file__).resolve().parents[2]


def test_held_out_voices_are_never_trained_on() -> None:
    train = {v for v, _, _ in voices(TRAIN_ACCENTS, TRAIN_VARIANTS, [150], [50])}
    held = {v for v, _, _ in voices(ACCENTS, HELD_OUT_VARIANTS, [150], [50])}
    assert not train & held and len(train) == 20 and len(held) == 14


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng (apt-get)")
def test_a_fast_run_recognises_digits_in_unheard_voices(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the other core runs the other test worker
    command = [sys.executable, "examples/train_speech.py", "--fast", "--cache", str(tmp_path)]
    done = subprocesses.run(command, cwd=ROOT, text=True, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    out = done.stdout
    assert "AudioDataModule" in out and "at most 24.0 s of audio" in out  # its summary
    line = re.search(r"held-out voices: accuracy (\d\.\d+) on (\d+) clips", out)
    assert line, out[-3000:]
    assert int(line.group(2)) == 280
    assert float(line.group(1)) >= 0.8, line.group(0)  # 0.964 here; chance 0.1
