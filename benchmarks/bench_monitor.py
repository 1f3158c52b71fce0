"""Overhead of DataWaitMonitor on a fast in-memory training run.

The same ``Trainer.fit`` (TensorDataModule of random features in memory, CSVLogger writing
every 50 steps, no validation, one CPU thread) runs in three arms, interleaved in a rotating
order, and each run is timed from ``on_train_start`` to ``on_train_end``:

* ``none``: no extra callback (the baseline);
* ``noop``: an empty ``Callback`` (what Lightning charges for calling one more callback's
  per-step hooks, whatever the callback does);
* ``monitor``: ``DataWaitMonitor``.

Reported: median throughput per arm and the median of the per-round ratios to the baseline,
in CPU time (steadier on a shared machine: other processes do not inflate it much) and in
wall time. Then the monitor's own per-step work (its hooks and fetch wrappers, called
directly), as a share of a step. The target is a loss under 3 %.

Two workloads: ``mlp`` (a small MLP, 32 -> 256 -> 256 -> 2, batch 256: a fast in-memory run)
and ``linear`` (one linear layer, batch 64: about the shortest step Lightning runs, where its
own per-callback cost is largest).

Run: ``python benchmarks/bench_monitor.py`` (about a minute on 2 busy cores).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import warnings
from types import SimpleNamespace
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger

from datamodules import DataWaitMonitor, TensorDataModule

ARMS = ("none", "noop", "monitor")


class Model(pl.LightningModule):
    def __init__(self, features: int, hidden: int) -> None:
        super().__init__()
        if hidden:
            self.layer = torch.nn.Sequential(
                torch.nn.Linear(features, hidden),
                torch.nn.ReLU(),
                torch.nn.Linear(hidden, hidden),
                torch.nn.ReLU(),
                torch.nn.Linear(hidden, 2),
            )
        else:
            self.layer = torch.nn.Linear(features, 2)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class LoopTimer(Callback):
    """Times the training loop only (not Trainer setup or teardown): wall and CPU time."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.start = (time.perf_counter(), time.process_time())

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.wall = time.perf_counter() - self.start[0]
        self.cpu = time.process_time() - self.start[1]


def run(data: tuple[torch.Tensor, torch.Tensor], workload: Any, arm: str) -> Any:
    """One fit; returns (samples per wall second, samples per CPU second, steps)."""
    dm = TensorDataModule(*data, batch_size=workload.batch_size, val_split=0, num_workers=0)
    timer = LoopTimer()
    extra = {"none": [], "noop": [Callback()], "monitor": [DataWaitMonitor(warn=False)]}[arm]
    with tempfile.TemporaryDirectory() as logs:
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=1,
            logger=CSVLogger(logs),
            log_every_n_steps=50,
            callbacks=[timer, *extra],
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
        )
        trainer.fit(Model(data[0].shape[1], workload.hidden), datamodule=dm)
    samples = len(data[0])
    return samples / timer.wall, samples / timer.cpu, trainer.global_step


class _Loop:
    """Stands in for the training loop whose fetch callbacks the monitor wraps."""

    def _on_before_fetch(self) -> None:
        pass

    def _on_after_fetch(self) -> None:
        pass


def own_cost_per_step(steps: int = 20_000) -> float:
    """Seconds per step of the monitor's own work: its two hooks and its fetch wrappers."""
    monitor = DataWaitMonitor(warn=False)
    monitor._every = 2**62  # never flush: measure the per-step path
    batch = (torch.zeros(64, 32), torch.zeros(64, dtype=torch.int64))
    plain, wrapped = _Loop(), _Loop()
    monitor._hook_fetch(SimpleNamespace(fit_loop=SimpleNamespace(epoch_loop=wrapped)))  # type: ignore[arg-type]
    timings = []
    for loop, hooks in ((plain, False), (wrapped, True)):
        begin = time.perf_counter()
        for i in range(steps):
            loop._on_before_fetch()
            loop._on_after_fetch()
            if hooks:
                monitor.on_train_batch_start(None, None, batch, i)  # type: ignore[arg-type]
                monitor.on_train_batch_end(None, None, None, batch, i)  # type: ignore[arg-type]
        timings.append((time.perf_counter() - begin) / steps)
    return timings[1] - timings[0]


def bench(name: str, workload: Any, args: argparse.Namespace) -> None:
    generator = torch.Generator().manual_seed(0)
    samples = workload.batch_size * workload.steps
    data = (
        torch.randn(samples, args.features, generator=generator),
        torch.randint(0, 2, (samples,), generator=generator),
    )
    for arm in ARMS:
        run(data, workload, arm)  # warm-up (imports, allocator)
    results: dict[str, list[Any]] = {arm: [] for arm in ARMS}
    for repeat in range(args.repeats):
        shift = repeat % len(ARMS)
        for arm in ARMS[shift:] + ARMS[:shift]:
            results[arm].append(run(data, workload, arm))
    print(
        f"{name}: hidden={workload.hidden}, batch {workload.batch_size}, {workload.steps} steps "
        f"per run, {args.repeats} rounds of 3 arms"
    )
    for index, clock in ((1, "CPU"), (0, "wall")):
        base = [r[index] for r in results["none"]]
        for arm in ARMS[1:]:
            speeds = [r[index] for r in results[arm]]
            ratios = [s / b for s, b in zip(speeds, base, strict=True)]
            low, _, high = statistics.quantiles(ratios, n=4)
            print(
                f"  {clock:>4} {arm:<8} {statistics.median(speeds):>9,.0f} samples/s vs "
                f"{statistics.median(base):>9,.0f} without: ratio median "
                f"{statistics.median(ratios):.3f} (quartiles {low:.3f}..{high:.3f})"
            )
    step_time = workload.batch_size / statistics.median(r[1] for r in results["none"])
    own = own_cost_per_step()
    print(
        f"  monitor's own work per step: {own * 1e6:.1f} us of a {step_time * 1e6:.0f} us step "
        f"(CPU) = {own / step_time:.2%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--workloads", nargs="+", default=["mlp", "linear"])
    args = parser.parse_args()
    torch.set_num_threads(1)  # 2 shared cores: intra-op threads only add noise here
    warnings.filterwarnings("ignore")
    for name in ("lightning.pytorch", "datamodules"):
        logging.getLogger(name).setLevel(logging.WARNING)
    workloads = {
        "mlp": SimpleNamespace(hidden=256, batch_size=256, steps=250),
        "linear": SimpleNamespace(hidden=0, batch_size=64, steps=500),
    }
    print(f"torch {torch.__version__}, lightning {pl.__version__}, 1 thread")
    for name in args.workloads:
        bench(name, workloads[name], args)


if __name__ == "__main__":
    main()
