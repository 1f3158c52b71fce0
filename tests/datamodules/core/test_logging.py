"""The library's logger follows the application's logging setup, as Lightning's does: its own
handler only when nothing is configured, and never a level over the user's."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import torch

from datamodules import TensorDataModule

SUMMARY_MARK = "TensorDataModule\n  splits:"


def run(setup: str) -> subprocess.CompletedProcess[str]:
    """Runs ``setup``, imports the library, builds a loader; prints the logger's state."""
    code = textwrap.dedent(
        f"""
        import logging, sys
        {setup}
        import torch
        from datamodules import TensorDataModule
        log = logging.getLogger("datamodules")
        TensorDataModule(torch.arange(8.0)).train_dataloader()
        print("STATE", logging.getLevelName(log.level), log.propagate, len(log.handlers))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def test_without_any_logging_setup_the_summary_is_printed_by_our_handler() -> None:
    result = run("")
    assert SUMMARY_MARK in result.stderr
    assert "STATE INFO False 1" in result.stdout


def test_a_level_set_before_the_import_is_kept() -> None:
    result = run('logging.getLogger("datamodules").setLevel(logging.WARNING)')
    assert SUMMARY_MARK not in result.stderr
    assert "STATE WARNING False 1" in result.stdout


def test_basic_config_receives_the_summary_and_keeps_its_level() -> None:
    shown = run(
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='ROOT %(message)s')"
    )
    assert "ROOT " + SUMMARY_MARK in shown.stdout
    assert "STATE NOTSET True 0" in shown.stdout  # no handler of ours, the root's level rules
    assert SUMMARY_MARK not in shown.stderr
    quiet = run("logging.basicConfig(level=logging.WARNING, stream=sys.stdout)")
    assert SUMMARY_MARK not in quiet.stdout + quiet.stderr


def test_caplog_sees_the_summary(caplog) -> None:
    with caplog.at_level(logging.INFO, logger="datamodules"):
        TensorDataModule(torch.arange(8.0)).train_dataloader()
    assert any(SUMMARY_MARK in r.getMessage() for r in caplog.records)
