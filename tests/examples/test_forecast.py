"""examples/forecast.py, run as a user runs it: in a fresh interpreter, ``--fast``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.subprocesses import run

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^(\w+)\s+([\d.]+)\s+([\d.]+)\s+\((beats|does NOT beat)", re.M)


def test_the_fast_forecast_beats_the_seasonal_naive_on_every_dataset() -> None:
    done = run([sys.executable, str(ROOT / "examples" / "forecast.py"), "--fast"], cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {name: (float(ours), float(naive)) for name, ours, naive, _ in ROW.findall(done.stdout)}
    assert sorted(rows) == ["co2", "elnino", "macrodata", "sunspots"], done.stdout
    for name, (ours, naive) in rows.items():
        assert ours < naive, (name, ours, naive)
