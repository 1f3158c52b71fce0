"""examples/cli.py: every config parses and instantiates; one trains for a few steps."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest

from datamodules import BaseDataModule, DataWaitMonitor
from examples.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "examples" / "configs").glob("*.yaml"))


def test_there_is_a_config_per_landed_datamodule() -> None:
    assert "tensor.yaml" in [c.name for c in CONFIGS]


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_config_parses_and_instantiates(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["cli.py"])  # LightningCLI warns when both are given
    cli = main(["--config", str(config)], run=False)
    assert isinstance(cli.datamodule, BaseDataModule)
    assert isinstance(cli.model, pl.LightningModule)
    assert any(isinstance(c, DataWaitMonitor) for c in cli.trainer.callbacks)
    cli.datamodule.setup("fit")
    assert cli.datamodule.split_size("train") > 0


def test_data_arguments_override_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["cli.py"])  # LightningCLI warns when both are given
    config = str(ROOT / "examples" / "configs" / "tensor.yaml")
    args = ["--config", config, "--data.num_workers", "tune", "--data.batch_size", "8"]
    cli = main(args, run=False)
    assert cli.datamodule.num_workers == "tune"
    assert cli.datamodule.batch_size == 8
    assert cli.datamodule.hparams["num_workers"] == "tune"


def test_fit_runs_from_the_command_line(tmp_path: Path) -> None:
    command = [
        sys.executable,
        str(ROOT / "examples" / "cli.py"),
        "fit",
        "--config",
        str(ROOT / "examples" / "configs" / "tensor.yaml"),
        "--trainer.max_steps",
        "6",
        "--trainer.limit_val_batches",
        "1",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.log_every_n_steps",
        "2",
    ]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    run = tmp_path / "lightning_logs" / "tensor" / "version_0"
    with open(run / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    logged = [r for r in rows if r.get("data_wait_fraction")]
    assert [int(r["step"]) for r in logged] == [1, 3, 5]
    assert all(0 <= float(r["data_wait_fraction"]) <= 1 for r in logged)
    assert any(r.get("train_loss") for r in rows)
    assert (run / "checkpoints" / "last.ckpt").is_file()
