"""examples/forecast.py, run as a user runs it: in a fresh interpreter, ``--fast``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^(\w+)\s+([\d.]+)\s+([\d.]+)\s+\((beats|does NOT beat)", re.M)


@pytest.mark.timeout(1800)  # a loaded machine may be slow; the process group goes on any exit
def test_the_fast_forecast_beats_the_seasonal_naive_on_every_dataset() -> None:
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "forecast.py"), "--fast"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = process.communicate()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, err[-3000:]
    rows = {name: (float(ours), float(naive)) for name, ours, naive, _ in ROW.findall(out)}
    assert sorted(rows) == ["co2", "elnino", "macrodata", "sunspots"], out
    for name, (ours, naive) in rows.items():
        assert ours < naive, (name, ours, naive)
