"""Fresh workers against warm ones: an epoch of a stream whose workers start fresh each epoch.

Data: the 100k-record JSONL and Parquet streams of ``bench_streaming.py`` (``--records``
records in 16 shards, written once to a temporary directory). For each format, two loaders,
each in a fresh interpreter (so that the main process has imported only what the DataModule
imports itself): ``StreamingDataModule(shards, num_workers=2, batch_size=64,
shuffle_buffer=10_000)`` with ``persistent_workers=False`` (fresh workers every epoch, as every
validation loader and every non-persistent loader has) and with ``persistent_workers=True``
(warm workers). Each loader is made once and iterated every epoch, as the Trainer does:
``--epochs`` epochs, the first (index, caches, the first fork) left out, the median of the
rest compared; every epoch is checked to deliver each record exactly once.

The bar (issue: fresh workers start fast): an epoch with fresh workers takes at most 1.25x
the time of an epoch with warm workers.

The floor: what starting and stopping fresh workers costs with nothing to read, a plain
``DataLoader`` over an empty ``IterableDataset`` with the same two workers, in a fresh
interpreter that has imported what the stream's does (torch, pyarrow's readers, this
package). Its epochs are the fork of each worker, its start and its exit; no loader of
ours can start fresh workers for less, and the report compares it with the 25% of a warm
epoch that the bar leaves.

Run: ``python benchmarks/bench_worker_start.py [--records 100000] [--epochs 6]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

BAR = 1.25


def one(paths: list[str], persistent: bool, epochs: int, records: int) -> list[float]:
    """Seconds of each epoch of one loader (this process: a fresh interpreter)."""
    import logging

    from datamodules import StreamingDataModule

    logging.getLogger("datamodules").setLevel(logging.WARNING)
    dm = StreamingDataModule(
        paths, batch_size=64, num_workers=2, shuffle_buffer=10_000,
        persistent_workers=persistent, index_cache=False,
    )  # fmt: skip
    loader = dm.train_dataloader()
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        seen = 0
        for batch in loader:
            seen += len(batch["id"])
        times.append(time.perf_counter() - start)
        assert seen == records, (seen, records)
    return times


def floor(epochs: int) -> list[float]:
    """Seconds of each epoch of a plain DataLoader with 2 fresh workers and nothing to read."""
    from torch.utils.data import DataLoader, IterableDataset

    import datamodules  # noqa: F401  (what the stream's interpreter has imported)
    from datamodules.stream_engine.columns import preload

    preload()

    class Empty(IterableDataset):
        def __iter__(self):
            return iter(())

    loader = DataLoader(Empty(), batch_size=None, num_workers=2, persistent_workers=False)
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        for _ in loader:
            pass
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--one", nargs=2, metavar=("FMT", "PERSISTENT"), help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor:
        print(json.dumps(floor(args.epochs)))
        return
    if args.one:
        fmt, persistent = args.one
        paths = sorted(str(p) for p in Path(args.root, fmt).iterdir())
        print(json.dumps(one(paths, persistent == "1", args.epochs, args.records)))
        return
    from bench_streaming import write_jsonl, write_parquet

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min average)")
    with tempfile.TemporaryDirectory() as tmp:
        write_jsonl(Path(tmp, "jsonl"), args.records)
        write_parquet(Path(tmp, "parquet"), args.records)
        warm = {}
        for fmt in ("jsonl", "parquet"):
            medians = {}
            for persistent in ("0", "1"):
                command = [sys.executable, __file__, "--one", fmt, persistent, "--root", tmp,
                           "--records", str(args.records),
                           "--epochs", str(args.epochs)]  # fmt: skip
                out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
                times = json.loads(out.strip().splitlines()[-1])
                medians[persistent] = statistics.median(times[1:])
                shown = ", ".join(f"{t:.2f}" for t in times)
                kind = "warm (persistent)" if persistent == "1" else "fresh"
                print(f"{fmt:8s} {kind:18s} epochs {shown} s; median after the first "
                      f"{medians[persistent]:.2f} s")  # fmt: skip
            warm[fmt] = medians["1"]
            ratio = medians["0"] / medians["1"]
            verdict = "meets" if ratio <= BAR else "misses"
            print(f"{fmt:8s} fresh / warm: {ratio:.2f}x ({verdict} the bar of {BAR}x)")
        command = [sys.executable, __file__, "--floor", "--epochs", str(args.epochs)]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        times = json.loads(out.strip().splitlines()[-1])
        empty = statistics.median(times[1:])
        shown = ", ".join(f"{t * 1000:.0f}" for t in times)
        print(f"floor: an empty epoch with 2 fresh workers (plain DataLoader): epochs {shown} ms; "
              f"median after the first {empty * 1000:.0f} ms")  # fmt: skip
        for fmt, seconds in warm.items():
            print(f"{fmt:8s} the floor is {empty / seconds:.0%} of a warm epoch; the bar leaves "
                  f"{BAR - 1:.0%}")  # fmt: skip
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min average)")


if __name__ == "__main__":
    main()
