"""DataWaitMonitor: how much of the training loop's time is spent waiting for data.

What is measured, and where
---------------------------
Lightning's training loop runs, for every batch (``_TrainingEpochLoop.advance``)::

    fetch     next(data_fetcher)          profiled as "[_TrainingEpochLoop].train_dataloader_next"
    transfer  on_before_batch_transfer, batch_to_device (transfer_batch_to_device,
              on_after_batch_transfer)
    step      on_train_batch_start hooks -> training_step, backward, optimizer step
              -> on_train_batch_end hooks
    other     logging, validation, checkpointing, LR schedulers (on_advance_end)

The monitor notes the clock when the fetch starts, when ``on_train_batch_start`` runs (the
batch has been fetched and moved to the device) and when ``on_train_batch_end`` runs. Lightning
has no public hook at the start of a fetch; the fetcher calls the loop's ``_on_before_fetch``
(which starts that profiler record) right before ``next(iterator)``, so the monitor puts a
wrapper of it on the loop instance during ``fit`` (and removes it in ``teardown``). If a
Lightning version lacks that method, the monitor falls back to the gap between steps, an
upper bound that includes validation and logging. So, per batch:

* ``wait`` = fetch + transfer: from the start of the loader's ``__next__`` to the start of the
  step. It contains no validation, checkpointing or logging time.
* ``step`` = from ``on_train_batch_start`` to ``on_train_batch_end``.

``data_wait_fraction = sum(wait) / sum(wait + step)`` and ``samples_per_sec = samples /
sum(wait + step)`` (the rate at which the training loop consumes samples; time spent on
validation, checkpoints and logging between steps is left out of both). A batch's size is the
first dimension of its first tensor. With a ``training_step`` that takes the dataloader
iterator, fetches happen inside the step; their time is moved from ``step`` to ``wait``.

Times are host wall-clock times. On CUDA, kernels run asynchronously and the host blocks for
the device where the step synchronises (``loss.item()``, the optimizer step, a full launch
queue), usually inside the step; so a high fraction still means the device finished its work
and then waited for the host's next batch. A copy from pageable host memory may also wait for
queued kernels, which then counts as waiting; pinned memory (``pin_memory="auto"`` on CUDA)
makes the copy asynchronous. (The tests and benchmark run on CPU.)

The metrics go to every logger of the Trainer (``logger.log_metrics``, like Lightning's
``LearningRateMonitor``): ``data_wait_fraction`` and ``samples_per_sec`` every
``log_every_n_steps`` batches, and ``data_wait_fraction_epoch`` / ``samples_per_sec_epoch``
at the end of every epoch. Under DDP every rank measures itself; rank 0's numbers are logged
and only rank 0 warns.

Cost: three ``perf_counter`` calls, one extra function call and a few additions per batch,
plus Lightning's dispatch of its per-step hooks to one more callback; see
``benchmarks/bench_monitor.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.rank_zero import rank_zero_warn

from datamodules.core.checks import check_bool, check_fraction, check_int
from datamodules.core.hardware import available_cpus
from datamodules.tools.tuner import batch_length

__all__ = ["DataWaitMonitor", "DataWaitStats", "DataWaitWarning", "suggest"]


class DataWaitWarning(UserWarning):
    """Warned (at most once per run) when the training loop waits too long for data."""


@dataclass
class DataWaitStats:
    """Accumulated timings of a window of training batches (an interval or an epoch).

    Attributes:
        epoch: The epoch the window belongs to.
        steps: Batches measured.
        samples: Samples in those batches.
        wait: Seconds spent fetching and transferring them.
        step: Seconds spent in their training steps.
    """

    epoch: int = 0
    steps: int = 0
    samples: int = 0
    wait: float = 0.0
    step: float = 0.0

    @property
    def fraction(self) -> float:
        """Share of the window's time spent waiting for data (0 when nothing was measured)."""
        total = self.wait + self.step
        return self.wait / total if total > 0 else 0.0

    @property
    def samples_per_sec(self) -> float:
        """Samples consumed per second of fetch + transfer + step time."""
        total = self.wait + self.step
        return self.samples / total if total > 0 else 0.0

    def add(self, other: DataWaitStats) -> None:
        """Adds another window's counts to this one."""
        self.steps += other.steps
        self.samples += other.samples
        self.wait += other.wait
        self.step += other.step


def suggest(
    fraction: float,
    num_workers: int | None,
    cpus_per_rank: int,
    *,
    prefetch_factor: int | None = None,
    pin_memory: bool | None = None,
    accelerator: str | None = None,
    tuned: Any = None,
    tunable: bool = False,
) -> str:
    """Returns the advice of a :class:`DataWaitWarning` (a pure function of what is known).

    Args:
        fraction: The measured data-wait fraction.
        num_workers: The train loader's worker count (None when unknown).
        cpus_per_rank: CPUs available to this rank.
        prefetch_factor: The loader's prefetch factor (None without workers or unknown).
        pin_memory: Whether the loader pins memory (None when unknown).
        accelerator: The device type (``"cuda"``, ``"cpu"``...).
        tuned: A :class:`~datamodules.tools.tuner.TuneResult`, when the tuner ran.
        tunable: Whether the DataModule has ``tune_loader`` (a BaseDataModule).
    """
    parts = [f"the model waited {fraction:.0%} of the training time for data"]
    if num_workers is None:
        parts.append("use a DataLoader with worker processes (num_workers > 0)")
    elif num_workers < cpus_per_rank:
        target = min(cpus_per_rank, max(2, 2 * num_workers))
        parts.append(f"num_workers={num_workers} -> try {target}")
    else:
        text = (
            f"num_workers={num_workers} already uses the {cpus_per_rank} CPU(s) of this rank, so "
            "the loader is CPU-bound: make each batch cheaper (e.g. decode smaller images, move "
            "uint8->float and normalisation to on_after_batch_transfer) or give each rank more CPUs"
        )
        if prefetch_factor is not None and prefetch_factor < 4:
            text += f"; if batch times vary, raise prefetch_factor (now {prefetch_factor})"
        parts.append(text)
    if accelerator == "cuda" and pin_memory is False:
        parts.append("set pin_memory=True for asynchronous host-to-device copies")
    if tuned is not None:
        parts.append(
            f"the tuner says num_workers={tuned.num_workers}, prefetch_factor="
            f"{tuned.prefetch_factor} ({tuned.samples_per_sec:,.0f} samples/s for the loader alone)"
        )
    elif tunable:
        parts.append("measure the options with dm.tune_loader() or num_workers='tune'")
    return "; ".join(parts) + "."


class DataWaitMonitor(Callback):
    """Measures and logs the share of training time spent waiting for the next batch.

    See the module docstring for exactly what is timed. Logged metrics: ``data_wait_fraction``
    and ``samples_per_sec`` every ``log_every_n_steps`` batches, ``data_wait_fraction_epoch``
    and ``samples_per_sec_epoch`` every epoch. Per-epoch results stay available in
    :attr:`epochs`, and :meth:`report` formats them.

    Args:
        threshold: Warn (once per run) when a window of at least ``min_steps`` batches waits
            more than this share of its time.
        log_every_n_steps: Batches per logged interval (default: the Trainer's; with the
            Trainer's 0, only epochs are reported).
        min_steps: Smallest window judged by the warning (short windows are noisy).
        warn: Whether to warn at all.

    Example:
        >>> trainer = pl.Trainer(callbacks=[DataWaitMonitor()])  # doctest: +SKIP
    """

    def __init__(
        self,
        threshold: float = 0.2,
        log_every_n_steps: int | None = None,
        min_steps: int = 10,
        warn: bool = True,
    ) -> None:
        super().__init__()
        check_fraction(threshold, "threshold")
        check_int(log_every_n_steps, "log_every_n_steps", 1, allow_none=True)
        check_int(min_steps, "min_steps", 1)
        check_bool(warn, "warn")
        self.threshold = float(threshold)
        self.log_every_n_steps = log_every_n_steps
        self.min_steps = min_steps
        self.warn = warn
        #: One entry per finished training epoch of the last ``fit``.
        self.epochs: list[DataWaitStats] = []
        #: The last logged interval.
        self.last_interval: DataWaitStats | None = None
        #: The warning's text, once it was given.
        self.warning: str | None = None
        self._interval = DataWaitStats()
        self._epoch = DataWaitStats()
        self._every = 50
        self._fetch_start: float | None = None
        self._step_start = 0.0
        self._last_end = 0.0
        self._in_step = False
        self._in_step_fetch = 0.0
        self._pending_wait = 0.0
        self._pending_samples = 0
        self._hooked: Any = None

    # ------------------------------------------------------------------ fetch hook
    def _hook_fetch(self, trainer: pl.Trainer) -> None:
        """Wraps the training loop's before/after-fetch callbacks to note when a fetch starts.

        ``_TrainingEpochLoop.on_run_start`` hands its bound ``_on_before_fetch`` and
        ``_on_after_fetch`` (which start and stop the profiler's ``train_dataloader_next``
        record) to the data fetcher at the start of every epoch. Instance attributes of the
        same names take their place, so the fetcher calls the wrappers: once per batch.
        """
        loop = trainer.fit_loop.epoch_loop
        before = getattr(loop, "_on_before_fetch", None)
        after = getattr(loop, "_on_after_fetch", None)
        if not (callable(before) and callable(after)):  # pragma: no cover - other Lightning
            self._hooked = None
            return
        clock = time.perf_counter
        monitor = self

        def before_fetch() -> None:
            monitor._fetch_start = clock()
            before()

        def after_fetch() -> None:
            after()
            if monitor._in_step and monitor._fetch_start is not None:
                # A fetch inside the step (training_step taking the dataloader iterator).
                monitor._in_step_fetch += clock() - monitor._fetch_start
                monitor._fetch_start = None

        loop._on_before_fetch = before_fetch
        loop._on_after_fetch = after_fetch
        self._hooked = loop

    def _unhook_fetch(self) -> None:
        loop, self._hooked = self._hooked, None
        if loop is not None:
            vars(loop).pop("_on_before_fetch", None)
            vars(loop).pop("_on_after_fetch", None)

    # ------------------------------------------------------------------ Lightning hooks
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        every = self.log_every_n_steps or int(trainer.log_every_n_steps)
        # Trainer(log_every_n_steps=0) turns step logging off: then only epochs are reported.
        self._every = every if every > 0 else 2**62
        self.epochs = []
        self.last_interval = None
        self.warning = None
        self._in_step = False
        self._hook_fetch(trainer)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._unhook_fetch()

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._interval = DataWaitStats(epoch=trainer.current_epoch)
        self._epoch = DataWaitStats(epoch=trainer.current_epoch)
        self._fetch_start = None
        self._last_end = time.perf_counter()

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        now = time.perf_counter()
        if self._fetch_start is not None:
            self._pending_wait = now - self._fetch_start
            self._fetch_start = None
        elif self._hooked is None:
            # No fetch hook: fall back to the gap since the previous step (an upper bound).
            self._pending_wait = now - self._last_end
        else:
            self._pending_wait = 0.0
        self._pending_samples = batch_length(batch)
        self._in_step = True
        self._in_step_fetch = 0.0
        self._step_start = now

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        now = time.perf_counter()
        if not self._in_step:
            return
        self._in_step = False
        interval = self._interval
        inner = self._in_step_fetch
        interval.steps += 1
        interval.samples += self._pending_samples
        interval.wait += self._pending_wait + inner
        interval.step += now - self._step_start - inner
        self._last_end = now
        if interval.steps >= self._every:
            self._flush_interval(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch.add(self._interval)
        self._interval = DataWaitStats(epoch=trainer.current_epoch)
        epoch = self._epoch
        if epoch.steps == 0:
            return
        self.epochs.append(epoch)
        self._log(
            trainer,
            {
                "data_wait_fraction_epoch": epoch.fraction,
                "samples_per_sec_epoch": epoch.samples_per_sec,
                "epoch": float(epoch.epoch),
            },
        )
        self._maybe_warn(trainer, epoch, f"epoch {epoch.epoch}")

    # ------------------------------------------------------------------ reporting
    def _flush_interval(self, trainer: pl.Trainer) -> None:
        interval = self._interval
        self._epoch.add(interval)
        self._interval = DataWaitStats(epoch=interval.epoch)
        self.last_interval = interval
        self._log(
            trainer,
            {
                "data_wait_fraction": interval.fraction,
                "samples_per_sec": interval.samples_per_sec,
            },
        )
        self._maybe_warn(trainer, interval, f"epoch {interval.epoch}, last {interval.steps} steps")

    def _log(self, trainer: pl.Trainer, metrics: dict[str, float]) -> None:
        if not trainer.loggers:
            return
        loop = trainer.fit_loop.epoch_loop
        step = getattr(loop, "_batches_that_stepped", trainer.global_step)
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)

    def _maybe_warn(self, trainer: pl.Trainer, window: DataWaitStats, where: str) -> None:
        if not self.warn or self.warning is not None:
            return
        if window.steps < self.min_steps or window.fraction <= self.threshold:
            return
        advice = self._advice(trainer, window.fraction)
        self.warning = (
            f"DataWaitMonitor ({where}, {window.samples_per_sec:,.0f} samples/s): {advice}"
        )
        rank_zero_warn(self.warning, category=DataWaitWarning)

    def _advice(self, trainer: pl.Trainer, fraction: float) -> str:
        loader = trainer.train_dataloader
        if isinstance(loader, (list, tuple)):
            loader = loader[0] if loader else None
        elif isinstance(loader, dict):
            loader = next(iter(loader.values()), None)
        dm = trainer.datamodule
        local_world = max(1, int(getattr(trainer, "num_devices", 1) or 1))
        return suggest(
            fraction,
            getattr(loader, "num_workers", None),
            max(1, available_cpus() // local_world),
            prefetch_factor=getattr(loader, "prefetch_factor", None),
            pin_memory=getattr(loader, "pin_memory", None),
            accelerator=trainer.strategy.root_device.type,
            tuned=getattr(dm, "tuned", None),
            tunable=hasattr(dm, "tune_loader") and getattr(dm, "tunable", True),
        )

    def report(self) -> str:
        """Returns a small table of the finished epochs."""
        lines = ["epoch  steps  data_wait_fraction  samples_per_sec"]
        for e in self.epochs:
            lines.append(
                f"{e.epoch:>5}  {e.steps:>5}  {e.fraction:>18.1%}  {e.samples_per_sec:>15,.0f}"
            )
        return "\n".join(lines)
