"""Benchmarks print their figures and nothing else: no DataModule summary logged at INFO."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tests import subprocesses

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = sorted((ROOT / "benchmarks").glob("bench_*.py"))


def sets_our_log_level(path: Path) -> bool:
    """Whether the script sets the ``datamodules`` logger's level itself."""
    source = path.read_text()
    return 'getLogger("datamodules").setLevel(' in source or (
        '"datamodules"' in source and "getLogger(name).setLevel(" in source
    )


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_every_benchmark_using_the_library_sets_the_log_level(path: Path) -> None:
    imports = {
        node.module.split(".")[0]
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    if imports & {"datamodules", "collates"}:
        assert sets_our_log_level(path), f"{path.name} would print DataModule summaries"


def test_a_benchmark_run_prints_no_summary() -> None:
    script = ROOT / "benchmarks" / "bench_tensor.py"
    result = subprocesses.run(
        [sys.executable, str(script), "--samples", "2000", "--repeats", "1"],
        text=True, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "TensorDataModule" in result.stdout  # its figures' row
    assert "splits:" not in result.stdout + result.stderr
    assert "num_workers=" not in result.stderr
