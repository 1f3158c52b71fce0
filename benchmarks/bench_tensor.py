"""TensorDataModule's train loader against the usual ways of batching tensors in memory.

Run: ``python benchmarks/bench_tensor.py`` (about 30 s on 2 cores).

All three read the same X float32 (200_000, 64) and y int64, batch 256, shuffled, no
workers, one full epoch per repeat; the figure is the median samples/s over the repeats and
the ratios are against the baselines measured in the same run:

* ``DataLoader(TensorDataset(X, y), batch_size=256, shuffle=True)``: one ``__getitem__`` per
  sample and ``default_collate`` per batch (the usual baseline);
* a bare loop ``X[perm[i:i+256]], y[perm[i:i+256]]``: the memory-bound limit named by the
  issue; and the same loop with ``index_select``, which on CPU is several times faster
  than advanced indexing and is what TensorDataModule uses (the true limit).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable, Iterable

import torch
from torch.utils.data import DataLoader, TensorDataset

from datamodules import TensorDataModule

# Benchmarks print figures, not the DataModules' summaries (logged at INFO).
logging.getLogger("datamodules").setLevel(logging.WARNING)


def epoch_rate(make_epoch: Callable[[], Iterable], n: int) -> float:
    """Samples/s of one full pass over ``make_epoch()``, touching every batch."""
    start = time.perf_counter()
    count = 0
    for x, _ in make_epoch():
        count += x.shape[0]
    elapsed = time.perf_counter() - start
    assert count == n, (count, n)
    return n / elapsed


def bare_loop(x: torch.Tensor, y: torch.Tensor, batch_size: int) -> Iterable:
    perm = torch.randperm(len(x))
    for i in range(0, len(x), batch_size):
        idx = perm[i : i + batch_size]
        yield x[idx], y[idx]


def bare_index_select_loop(x: torch.Tensor, y: torch.Tensor, batch_size: int) -> Iterable:
    perm = torch.randperm(len(x))
    for i in range(0, len(x), batch_size):
        idx = perm[i : i + batch_size]
        yield x.index_select(0, idx), y.index_select(0, idx)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.manual_seed(0)
    n, b = args.samples, args.batch_size
    x = torch.randn(n, args.features)
    y = torch.randint(0, 10, (n,))

    baseline = DataLoader(TensorDataset(x, y), batch_size=b, shuffle=True)
    dm = TensorDataModule(x, y, val_split=0, batch_size=b, num_workers=0)
    dm.setup("fit")
    ours = dm.train_dataloader()
    epoch = {"value": 0}

    def ours_epoch() -> Iterable:
        ours.sampler.set_epoch(epoch["value"])
        epoch["value"] += 1
        return ours

    candidates: dict[str, Callable[[], Iterable]] = {
        "DataLoader(TensorDataset)": lambda: baseline,
        "bare X[perm[i:i+b]] loop": lambda: bare_loop(x, y, b),
        "bare index_select loop": lambda: bare_index_select_loop(x, y, b),
        "TensorDataModule": ours_epoch,
    }
    rates: dict[str, list[float]] = {name: [] for name in candidates}
    for make in candidates.values():  # warm-up
        epoch_rate(make, n)
    for _ in range(args.repeats):
        for name, make in candidates.items():  # interleaved, so drift hits all alike
            rates[name].append(epoch_rate(make, n))
    median = {name: statistics.median(r) for name, r in rates.items()}
    print(
        f"X {tuple(x.shape)} float32, y int64, batch {b}, shuffle, num_workers 0, "
        f"median of {args.repeats} epochs"
    )
    print(f"{'loader':30s} {'samples/s':>12s} {'vs DataLoader':>14s} {'vs bare loop':>13s}")
    for name, rate in median.items():
        print(
            f"{name:30s} {rate:12,.0f} {rate / median['DataLoader(TensorDataset)']:13.1f}x "
            f"{rate / median['bare X[perm[i:i+b]] loop']:12.2f}x"
        )


if __name__ == "__main__":
    main()
