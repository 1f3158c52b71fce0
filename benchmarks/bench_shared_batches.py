"""What sending a batch from a DataLoader worker costs: reused buffers against a fresh segment.

Run: ``python benchmarks/bench_shared_batches.py`` (about a minute on 2 cores).

Each worker builds uint8 image batches of 64 x 3 x 224 x 224 (9.6 MB; filling them is the
only work) and sends them to the main process, which touches one byte of each. Per batch,
median over repeats of one epoch, all in one run, the same sampler and worker count:

* ``DataLoader default``: ``ResumableDataLoader(..., reuse_batch_memory=False)``, i.e. the
  batch is allocated in a fresh shared-memory segment (as ``default_collate`` does) whose
  descriptor PyTorch passes through a socket;
* ``reused buffers``: the same loader with its
  :class:`~datamodules.core.shared_batches.SharedBatchPool`
  (the default), the batch allocated with :func:`~datamodules.core.shared_batches.empty_batch`;
* ``private memory, nothing sent``: the worker fills a buffer of its own and returns an int:
  the floor, what the fill alone costs.

Then the same for small batches, as text gives: a dict of four int64 tensors, ``(32, 50)``
token ids and mask, ``(32,)`` labels and lengths (26 KB). Ours sends tensors under 128 KB by
value; PyTorch gives each tensor its own shared-memory segment and socket round trip.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from datamodules.core.loaders import ResumableDataLoader  # noqa: E402
from datamodules.core.samplers import IndexBatchSampler  # noqa: E402
from datamodules.core.shared_batches import empty_batch  # noqa: E402

# Benchmarks print figures, not the DataModules' summaries (logged at INFO).
logging.getLogger("datamodules").setLevel(logging.WARNING)

SHAPE = (64, 3, 224, 224)


class Batches:
    """``batches`` index batches; each becomes one image batch filled with its first index."""

    def __init__(self, batches: int, send: bool, small: bool = False) -> None:
        self.batches = batches
        self.send = send
        self.small = small
        self.private: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.batches * SHAPE[0]

    def __getitem__(self, rows: torch.Tensor):
        value = int(rows[0]) % 256
        if self.small:
            ids = torch.full((32, 50), value, dtype=torch.int64)
            lengths = torch.full((32,), 50, dtype=torch.int64)
            return {"input_ids": ids, "attention_mask": ids > 0, "labels": ids[:, 0].clone(),
                    "lengths": lengths}  # fmt: skip
        if not self.send:
            if self.private is None:
                self.private = torch.empty(SHAPE, dtype=torch.uint8)
            self.private.fill_(value)
            return value
        images = empty_batch(SHAPE, torch.uint8, channels_last=True)
        images.fill_(value)
        return images


def ms_per_batch(loader: ResumableDataLoader) -> float:
    start = time.perf_counter()
    count = 0
    for batch in loader:
        if isinstance(batch, torch.Tensor):
            int(batch[0, 0, 0, 0])  # the main process touches the batch
        elif isinstance(batch, dict):
            int(batch["input_ids"][0, 0])
        count += 1
    return (time.perf_counter() - start) / count * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)

    def make(send: bool, reuse: bool, small: bool = False) -> ResumableDataLoader:
        sampler = IndexBatchSampler(args.batches * SHAPE[0], SHAPE[0], shuffle=False)
        return ResumableDataLoader(
            Batches(args.batches, send, small),
            sampler=sampler,
            reuse_batch_memory=reuse,
            num_workers=args.workers,
            persistent_workers=True,
        )

    mb = torch.Size(SHAPE).numel() / 1e6
    cases = {
        f"{args.batches} batches of {SHAPE} uint8 ({mb:.1f} MB)": {
            "DataLoader default": make(send=True, reuse=False),
            "reused buffers": make(send=True, reuse=True),
            "private memory, nothing sent": make(send=False, reuse=True),
        },
        f"{args.batches} small batches (dict of 4 int64 tensors, 26 KB)": {
            "DataLoader default": make(send=True, reuse=False, small=True),
            "reused buffers": make(send=True, reuse=True, small=True),
        },
    }
    for title, loaders in cases.items():
        for loader in loaders.values():  # start the workers
            ms_per_batch(loader)
        times: dict[str, list[float]] = {name: [] for name in loaders}
        for _ in range(args.repeats):
            for name, loader in loaders.items():
                times[name].append(ms_per_batch(loader))
        median = {name: statistics.median(t) for name, t in times.items()}
        print(f"{title}, {args.workers} workers, median of {args.repeats} epochs")
        print(f"{'loader':30s} {'ms/batch':>9s} {'vs default':>11s}")
        for name, ms in median.items():
            print(f"{name:30s} {ms:9.2f} {median['DataLoader default'] / ms:10.1f}x")
        pool = loaders["reused buffers"].batch_pool
        assert pool is not None
        print(f"reused buffers: {pool.stats()}\n")


if __name__ == "__main__":
    main()
