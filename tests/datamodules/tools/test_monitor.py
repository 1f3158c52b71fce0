"""DataWaitMonitor through a real Trainer: slow loader -> high fraction, slow step -> low."""

from __future__ import annotations

import csv
import time
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from datamodules import DataWaitMonitor, TensorDataModule
from datamodules.core.hardware import Measurement, TuneResult
from datamodules.tools.monitor import DataWaitStats, DataWaitWarning, suggest
from tests.datamodules.contract import quiet_trainer

SLEEP = 0.025
FETCH_ACTION = "[_TrainingEpochLoop].train_dataloader_next"  # Lightning's profiler record


class SleepyModel(pl.LightningModule):
    """One scalar parameter; ``training_step`` sleeps ``step_sleep`` seconds."""

    def __init__(self, step_sleep: float = 0.0, val_sleep: float = 0.0) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.step_sleep = step_sleep
        self.val_sleep = val_sleep

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.step_sleep:
            time.sleep(self.step_sleep)
        return (self.weight - 1.0).pow(2).sum()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if self.val_sleep:
            time.sleep(self.val_sleep)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def slow_batches(batch: Any) -> Any:
    """A train transform that makes every batch cost SLEEP seconds to produce."""
    time.sleep(SLEEP)
    return batch


def make_dm(n: int = 120, slow: bool = False, **kwargs: Any) -> TensorDataModule:
    ids = torch.arange(n)
    kwargs.setdefault("val_split", 0)
    return TensorDataModule(
        ids.float()[:, None],
        ids % 2,
        batch_size=10,
        num_workers=0,
        train_transforms=slow_batches if slow else None,
        **kwargs,
    )


def fit(
    dm: TensorDataModule, model: SleepyModel, monitor: DataWaitMonitor, **trainer_kwargs: Any
) -> tuple[pl.Trainer, list[warnings.WarningMessage]]:
    trainer_kwargs.setdefault("max_epochs", 1)
    trainer = quiet_trainer(callbacks=[monitor], **trainer_kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, datamodule=dm)
    return trainer, [w for w in caught if issubclass(w.category, DataWaitWarning)]


def read_metrics(trainer: pl.Trainer) -> list[dict[str, str]]:
    with open(Path(trainer.logger.log_dir) / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


class TestThroughATrainer:
    def test_slow_loader_gives_a_high_fraction_logs_it_and_warns(self, tmp_path: Path) -> None:
        monitor = DataWaitMonitor(log_every_n_steps=4, min_steps=4)
        trainer, warned = fit(
            make_dm(slow=True), SleepyModel(), monitor, logger=CSVLogger(tmp_path, name="run")
        )
        (epoch,) = monitor.epochs
        assert epoch.steps == 12 and epoch.samples == 120
        assert epoch.fraction > 0.8
        assert epoch.samples_per_sec < 10 / SLEEP  # at most one batch per SLEEP
        rows = read_metrics(trainer)
        intervals = [r for r in rows if r.get("data_wait_fraction")]
        epochs = [r for r in rows if r.get("data_wait_fraction_epoch")]
        assert [int(r["step"]) for r in intervals] == [3, 7, 11]
        assert all(float(r["data_wait_fraction"]) > 0.5 for r in intervals)
        assert all(float(r["samples_per_sec"]) > 0 for r in intervals)
        assert len(epochs) == 1 and float(epochs[0]["data_wait_fraction_epoch"]) > 0.8
        assert float(epochs[0]["samples_per_sec_epoch"]) == pytest.approx(epoch.samples_per_sec)
        assert len(warned) == 1
        message = str(warned[0].message)
        assert message == monitor.warning
        assert message.startswith("DataWaitMonitor (epoch 0, last 4 steps, ")
        assert "of the training time for data; num_workers=0 -> try " in message
        assert "measure the options with dm.tune_loader() or num_workers='tune'" in message

    def test_slow_step_with_fast_loader_gives_a_low_fraction(self) -> None:
        monitor = DataWaitMonitor()
        _, warned = fit(make_dm(), SleepyModel(step_sleep=SLEEP), monitor)
        (epoch,) = monitor.epochs
        assert epoch.steps == 12
        assert epoch.fraction < 0.2
        assert epoch.step >= 12 * SLEEP
        assert warned == [] and monitor.warning is None

    def test_validation_time_is_not_counted_as_waiting(self) -> None:
        # Validation (2 batches of 2 * SLEEP) runs between steps after batches 3, 6 and 9:
        # about 0.3 s against 0.25 s of steps. A gap-based measure would report over half
        # the time as waiting; the fetch-based one leaves validation out.
        monitor = DataWaitMonitor()
        dm = make_dm(val_split=20)
        model = SleepyModel(step_sleep=SLEEP, val_sleep=2 * SLEEP)
        fit(dm, model, monitor, val_check_interval=3)
        (epoch,) = monitor.epochs
        assert epoch.steps == 10
        assert epoch.fraction < 0.2
        assert epoch.wait < 2 * SLEEP

    def test_warns_at_most_once_per_run(self) -> None:
        monitor = DataWaitMonitor(log_every_n_steps=3, min_steps=3)
        _, warned = fit(make_dm(n=60, slow=True), SleepyModel(), monitor, max_epochs=2)
        assert [e.epoch for e in monitor.epochs] == [0, 1]
        assert len(warned) == 1

    def test_fetch_hook_keeps_the_profiler_working_and_is_removed(self) -> None:
        monitor = DataWaitMonitor()
        trainer, _ = fit(make_dm(), SleepyModel(), monitor, profiler="simple", max_epochs=2)
        # The user's profiler still timed every fetch.
        fetches = trainer.profiler.recorded_durations[FETCH_ACTION]
        assert len(fetches) == 2 * 12
        loop = vars(trainer.fit_loop.epoch_loop)
        assert "_on_before_fetch" not in loop and "_on_after_fetch" not in loop
        assert [e.steps for e in monitor.epochs] == [12, 12]
        # The monitor's wait contains the profiled fetch time (and the transfer after it).
        assert sum(e.wait for e in monitor.epochs) >= sum(fetches)

    def test_without_logger_results_stay_on_the_monitor(self) -> None:
        monitor = DataWaitMonitor(warn=False)
        fit(make_dm(slow=True), SleepyModel(), monitor)
        assert monitor.epochs[0].fraction > 0.8 and monitor.warning is None
        report = monitor.report().splitlines()
        assert report[0] == "epoch  steps  data_wait_fraction  samples_per_sec"
        assert report[1].split()[:2] == ["0", "12"]


class TestPieces:
    def test_stats_arithmetic(self) -> None:
        stats = DataWaitStats(steps=4, samples=40, wait=3.0, step=1.0)
        assert stats.fraction == 0.75 and stats.samples_per_sec == 10.0
        stats.add(DataWaitStats(steps=1, samples=10, wait=0.0, step=1.0))
        assert (stats.steps, stats.samples, stats.fraction) == (5, 50, 0.6)
        assert DataWaitStats().fraction == 0.0 and DataWaitStats().samples_per_sec == 0.0

    def test_suggest_more_workers_and_the_tuners_pick(self) -> None:
        tuned = TuneResult(3, 2, (Measurement(3, 2, (1234.0,)),), 0.05, "train", "tuned")
        text = suggest(0.37, 0, 4, tuned=tuned, tunable=True)
        assert text == (
            "the model waited 37% of the training time for data; num_workers=0 -> try 2; "
            "the tuner says num_workers=3, prefetch_factor=2 (1,234 samples/s for the loader "
            "alone)."
        )
        assert "num_workers=2 -> try 4" in suggest(0.5, 2, 8)
        assert "num_workers=3 -> try 4" in suggest(0.5, 3, 4)

    def test_suggest_when_all_cpus_are_used(self) -> None:
        text = suggest(0.5, 2, 2, prefetch_factor=2, pin_memory=False, accelerator="cuda")
        assert "num_workers=2 already uses the 2 CPU(s) of this rank, so the loader is " in text
        assert "raise prefetch_factor (now 2)" in text
        assert "prefetch_factor" not in suggest(0.5, 2, 2, prefetch_factor=4)
        assert "set pin_memory=True" in text
        assert "pin_memory" not in suggest(0.5, 2, 2, pin_memory=False, accelerator="cpu")

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"threshold": 0}, ValueError, "threshold=0"),
            ({"threshold": 1.5}, ValueError, "threshold=1.5"),
            ({"log_every_n_steps": 0}, ValueError, "log_every_n_steps=0"),
            ({"min_steps": 2.5}, TypeError, "min_steps=2.5"),
        ],
    )
    def test_bad_arguments(self, kwargs: dict[str, Any], error: type, match: str) -> None:
        with pytest.raises(error, match=match):
            DataWaitMonitor(**kwargs)


def slow_record(record: Any) -> Any:
    """A stream transform that makes every record slow to produce."""
    time.sleep(SLEEP / 5)
    return record


def test_advice_for_a_stream_does_not_offer_the_tuner(tmp_path: Path) -> None:
    from datamodules import StreamingDataModule

    shard = tmp_path / "a.jsonl"
    shard.write_text("".join(f'{{"id": {i}}}\n' for i in range(60)))
    dm = StreamingDataModule(str(shard), batch_size=5, num_workers=0, transform=slow_record)
    monitor = DataWaitMonitor(min_steps=4, log_every_n_steps=4)
    with pytest.warns(DataWaitWarning) as caught:
        quiet_trainer(max_epochs=1, callbacks=[monitor]).fit(SleepyModel(), datamodule=dm)
    (message,) = [str(w.message) for w in caught if issubclass(w.category, DataWaitWarning)]
    assert "waited" in message and "tune" not in message
