"""examples/train_detection.py: digits pasted onto scikit-learn's photos, written as COCO JSON
and as a YOLO dataset, a small detector trained from the COCO files and scored on the YOLO
val split; run as a user runs it (``--fast``, a fresh interpreter)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from tests import subprocesses

ROOT = Path(__file__).resolve().parents[2]


def test_a_fast_run_detects_held_out_digits(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    command = [sys.executable, "examples/train_detection.py", "--fast", "--cache", str(tmp_path)]
    done = subprocesses.run(command, cwd=ROOT, text=True, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    out = done.stdout
    assert "800 train images (COCO JSON), 200 held out (YOLO)" in out, out[-3000:]
    root = tmp_path / "digits-on-photos-800"
    val = json.loads((root / "coco" / "val.json").read_text())
    labels = sorted((root / "yolo" / "labels" / "val").glob("*.txt"))
    assert len(val["images"]) == len(labels) == 200
    lines = sum(len(p.read_text().splitlines()) for p in labels)
    assert lines == len(val["annotations"])  # the two formats hold the same objects
    found = re.search(r"held-out mAP@0\.5: (\d\.\d+)", out)
    assert found, out[-3000:]
    assert float(found.group(1)) >= 0.5, found.group(0)
