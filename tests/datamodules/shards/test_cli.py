"""The shard layer's command line starts light: ``python -m datamodules shards --help`` parses
and answers without importing torch or Lightning (the package root loads its names lazily)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests import subprocesses

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import sys
from datamodules.__main__ import main
try:
    main(["shards", "--help"])
except SystemExit as stop:
    assert stop.code == 0, stop.code
heavy = sorted(m for m in ("torch", "lightning", "lightning.pytorch", "numpy") if m in sys.modules)
print("HEAVY", heavy)
"""


def test_shards_help_imports_no_torch_or_lightning() -> None:
    result = subprocesses.run([sys.executable, "-c", PROBE], cwd=ROOT, text=True)
    assert result.returncode == 0, result.stderr
    assert "usage: python -m datamodules shards" in result.stdout
    assert "HEAVY []" in result.stdout


def test_the_package_root_loads_its_names_on_first_use() -> None:
    probe = (
        "import sys, datamodules; assert 'torch' not in sys.modules; "
        "from datamodules import Source, TextDataModule; assert 'lightning' in sys.modules; "
        "import datamodules.text.datamodule as home; assert TextDataModule is home.TextDataModule; "
        "print(sorted(set(datamodules.__all__) <= set(dir(datamodules)) for _ in [0]))"
    )
    result = subprocesses.run([sys.executable, "-c", probe], cwd=ROOT, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[True]"
