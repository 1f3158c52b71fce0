"""The library's logger follows the application's logging setup, as Lightning's does: its own
handler only when nothing is configured, and never a level over the user's."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import torch

from datamodules import TensorDataModule
from tests import subprocesses

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
    result = subprocesses.run([sys.executable, "-c", code], text=True)
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


def test_the_summary_is_logged_once_per_datamodule_on_rank_zero(caplog, tmp_path) -> None:
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    from datamodules import StreamingDataModule
    from tests.datamodules.contract import quiet_trainer
    from tests.recording import RecordingModel

    (tmp_path / "a.jsonl").write_text("".join(f'{{"x": {i}}}\n' for i in range(24)))
    shard = str(tmp_path / "a.jsonl")
    makers = {
        "TensorDataModule": lambda: TensorDataModule(
            torch.arange(24.0), val_split=0.25, test_split=0.25, batch_size=4, num_workers=0
        ),
        "StreamingDataModule": lambda: StreamingDataModule(
            shard, shard, shard, batch_size=4, num_workers=0, index_cache=False
        ),
    }
    ids = lambda batch: [0] * len(batch["x"] if isinstance(batch, dict) else batch[0])  # noqa: E731
    for name, make in makers.items():
        dm = make()
        with caplog.at_level(logging.INFO, logger="datamodules"):
            caplog.clear()
            for stage in ("fit", "validate", "fit"):  # setup again and again
                dm.setup(stage)
            trainer = quiet_trainer(max_epochs=2, reload_dataloaders_every_n_epochs=1)
            trainer.fit(RecordingModel(ids), datamodule=dm)
            trainer.validate(RecordingModel(ids), datamodule=dm, verbose=False)
            trainer.test(RecordingModel(ids), datamodule=dm, verbose=False)
            logged = [r for r in caplog.records if r.getMessage().startswith(name + "\n")]
            assert len(logged) == 1, name
            caplog.clear()
            previous, rank_zero_only.rank = rank_zero_only.rank, 1  # another rank: nothing
            try:
                make().train_dataloader()
            finally:
                rank_zero_only.rank = previous
            assert not [r for r in caplog.records if r.getMessage().startswith(name)]
