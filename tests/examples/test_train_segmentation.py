"""examples/train_segmentation.py: digits pasted on photos (all from scikit-learn), segmented
by a tiny U-Net and scored by mean IoU on held-out images; run as a user runs it."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import numpy as np

from examples.train_segmentation import CLASSES, SIZE, paste_digits
from tests import subprocesses

ROOT = Path(__file__).resolve().parents[2]


def test_pasted_digits_are_labelled_with_their_class_plus_one() -> None:
    rng = np.random.default_rng(0)
    photo = np.full((200, 300, 3), 40, dtype=np.uint8)
    digits = np.zeros((1, 8, 8))
    digits[0, 2:6, 2:6] = 16  # a solid block
    image, mask = paste_digits(photo, digits, np.array([7]), rng)
    assert image.shape == (SIZE, SIZE, 3) and mask.shape == (SIZE, SIZE)
    assert set(np.unique(mask).tolist()) == {0, 8}
    # The crop is 40 darkened to 32; the strokes are brighter in every channel, and the
    # background is that crop except at the blurred glyph's faint edges (alpha below 0.5).
    assert image[mask == 8].min() > 32
    background = image[mask == 0]
    assert background.min() == 32 and (background == 32).all(axis=1).mean() > 0.5


def test_a_fast_run_trains_and_reports_the_held_out_mean_iou() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the other core runs the other test worker
    command = [sys.executable, "examples/train_segmentation.py", "--fast"]
    done = subprocesses.run(command, cwd=ROOT, text=True, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    out = done.stdout
    assert "SegmentationDataModule" in out and "no records skipped" in out
    line = re.search(rf"held-out images: mean IoU (\d\.\d+) over {CLASSES} classes", out)
    assert line, out[-3000:]
    assert 0.0 <= float(line.group(1)) <= 1.0, line.group(0)
