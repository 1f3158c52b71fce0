"""``python -m datamodules inspect`` as a user types it: a fresh interpreter (a subprocess).

The package root loads its DataModules lazily, so a fresh interpreter has not imported the class
that ``--data NAME`` names; the in-process tests (test_inspect.py) always have.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import subprocesses

ROOT = Path(__file__).resolve().parents[3]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
SHORT_NAME = re.compile(r"--data[ =]([A-Z]\w*)")


def documented_commands() -> list[str]:
    """Every ``python -m datamodules inspect --data NAME ...`` line of the docs and README that
    names its DataModule by its short name (the form that needs the class found by name)."""
    lines = []
    for page in PAGES:
        for line in page.read_text().splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("python -m datamodules inspect") and SHORT_NAME.search(line):
                lines.append(line)
    return lines


#: The tensor commands, run here on an npz; the token ones run in test_inspect_tokens.py.
COMMANDS = [c for c in documented_commands() if "--data TensorDataModule" in c]


def run_fresh(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocesses.run([sys.executable, *args], cwd=cwd, env=env, text=True)


def test_the_docs_show_the_short_name_form() -> None:
    names = sorted({SHORT_NAME.search(c).group(1) for c in documented_commands()})
    assert names == ["ChatDataModule", "ImageTextDataModule", "TensorDataModule"]
    assert len(COMMANDS) == 1


@pytest.mark.parametrize("command", COMMANDS)
def test_documented_command_runs_in_a_fresh_interpreter(command: str, tmp_path: Path) -> None:
    ids = np.arange(100)
    np.savez(tmp_path / "data.npz", x=np.stack([ids, -ids], axis=1).astype(np.float32), y=ids % 4)
    args = shlex.split(command)
    assert args[:3] == ["python", "-m", "datamodules"]
    done = run_fresh([*args[1:], "--out", str(tmp_path / "batch.png")], tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "TensorDataModule"
    assert "  train: 90 samples; classes 0: 21, 1: 22, 2: 24, 3: 23" in lines
    assert "  x: (64, 2) float32, values in [-98, 98]" in lines


def test_config_naming_the_class_by_its_short_name(tmp_path: Path) -> None:
    ids = np.arange(50)
    np.savez(tmp_path / "data.npz", x=ids[:, None].astype(np.float32), y=ids % 2)
    config = tmp_path / "config.yaml"
    config.write_text(
        "data:\n  class_path: TensorDataModule\n  init_args:\n    path: data.npz\n"
        "    batch_size: 5\n    val_split: 0.2\n"
    )
    out = tmp_path / "batch.png"
    done = run_fresh(
        ["-m", "datamodules", "inspect", "--config", str(config), "--out", str(out)], tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "  splits: train=40, val=10, test=0" in done.stdout
    assert "  x: (5, 1) float32" in done.stdout
