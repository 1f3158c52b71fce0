"""examples/train_detection.py: digits pasted onto scikit-learn's photos, written as COCO JSON
and as a YOLO dataset, a small detector trained from the COCO files and scored on the YOLO
val split; run as a user runs it (``--fast``, a fresh interpreter)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import subprocesses

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    cache = tmp_path_factory.mktemp("detection")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the other core runs the other test worker
    command = [sys.executable, "examples/train_detection.py", "--fast", "--cache", str(cache)]
    done: Any = subprocesses.run(command, cwd=ROOT, text=True, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    return cache, done.stdout


def test_a_fast_run_writes_both_formats_and_scores_the_held_out_images(
    fast_run: tuple[Path, str],
) -> None:
    tmp_path, out = fast_run
    assert "96 train images (COCO JSON), 32 held out (YOLO)" in out, out[-3000:]
    root = tmp_path / "digits-on-photos-96-32"
    val = json.loads((root / "coco" / "val.json").read_text())
    labels = sorted((root / "yolo" / "labels" / "val").glob("*.txt"))
    assert len(val["images"]) == len(labels) == 32
    lines = sum(len(p.read_text().splitlines()) for p in labels)
    assert lines == len(val["annotations"])  # the two formats hold the same objects
    assert re.search(r"held-out mAP@0\.5: (\d\.\d+)", out), out[-3000:]
