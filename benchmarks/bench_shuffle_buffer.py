"""Image records: what ``shuffle_buffer`` costs and buys, to choose its default for images.

Run: ``python benchmarks/bench_shuffle_buffer.py`` (about 3 minutes on 2 cores; writes the
2,000 JPEGs of 320x240 of ``bench_image_folder.py`` under the temp directory on first use).

Data: the 2,000 JPEGs (about 23 KB each, 10 classes) as 10 tar shards of about 4 MB written
by ``python -m datamodules shards`` (no val split), read ``--passes`` times an epoch
(``Source(shards, repeat=...)``: 10,000 records per worker at the default 10 passes, so that
even the largest buffer fills before the share runs out, as in a real dataset).
``StreamingDataModule(image_key="jpg")``, batch 64, 2 workers, RandomResizedCrop(224) + flip;
for each ``shuffle_buffer``, a fresh loader per epoch (worker start included), medians over
``--repeats``:

* **first batch**: seconds from ``iter(loader)`` to the first batch: a worker fills its
  buffer before it yields a record;
* **images/s**: the epoch's images over its time from the first batch on;
* **shards a batch**: distinct shards among a batch's 64 records, the mean (what the buffer
  mixes: a worker reads its shards one after another, so a small buffer gives batches of one
  or two shards);
* **MB a worker**: the buffer's bytes at these images' mean size, and at 110 KB (ImageNet's
  mean JPEG).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_image_folder import write_image_folder  # noqa: E402

from datamodules import Source, StreamingDataModule  # noqa: E402
from datamodules.shards.folder_shards import main as shards_main  # noqa: E402

logging.getLogger("datamodules").setLevel(logging.WARNING)  # figures only, no summaries
warnings.filterwarnings("ignore")
BATCH, WORKERS = 64, 2
BUFFERS = (0, 250, 500, 1000, 2000, 5000, 10_000)


def epoch(shards: list[str], buffer: int, passes: int, owners: dict[str, int]) -> dict[str, float]:
    dm = StreamingDataModule(
        [Source(shards, repeat=passes)],
        image_key="jpg",
        label_key=None,  # dict batches: the keys say which shard each record came from
        image_size=224,
        batch_size=BATCH,
        num_workers=WORKERS,
        persistent_workers=False,
        shuffle_buffer=buffer,
        index_cache=False,
    )
    loader = dm.train_dataloader()
    began = time.perf_counter()
    batches = iter(loader)
    first = next(batches)
    at_first = time.perf_counter()
    mixed = [len({owners[k] for k in first["__key__"]})]
    seen = len(first["__key__"])
    for batch in batches:
        seen += len(batch["__key__"])
        mixed.append(len({owners[k] for k in batch["__key__"]}))
    elapsed = time.perf_counter() - at_first
    return {
        "first batch": at_first - began,
        "images/s": (seen - BATCH) / elapsed,
        "shards a batch": statistics.mean(mixed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "bench-jpegs")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--passes", type=int, default=10, help="reads of the shards an epoch")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--buffers", default=",".join(map(str, BUFFERS)))
    args = parser.parse_args()
    if not (args.root / ".complete").exists():
        write_image_folder(str(args.root), n=args.n, classes=10)
        (args.root / ".complete").touch()
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="bench-shuffle-"))
    try:
        with open(os.devnull, "w") as quiet:  # the command's own report
            stdout, sys.stdout = sys.stdout, quiet
            try:
                assert shards_main([str(args.root), str(work), "--val-split", "0",
                                    "--max-bytes", "4MB", "--workers", "2"]) == 0  # fmt: skip
            finally:
                sys.stdout = stdout
        shards = sorted(str(p) for p in work.glob("train-*.tar"))
        from datamodules.shards.records import read_records

        owners = {r["__key__"]: i for i, s in enumerate(shards) for r in read_records(s)}
        mean_bytes = sum(os.path.getsize(s) for s in shards) / len(owners)
        rows: dict[int, dict[str, list[float]]] = {}
        buffers = [int(b) for b in args.buffers.split(",")]
        for _ in range(args.repeats):
            for buffer in buffers:
                for name, value in epoch(shards, buffer, args.passes, owners).items():
                    rows.setdefault(buffer, {}).setdefault(name, []).append(value)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{len(owners)} JPEGs 320x240 x {args.passes} passes -> 224, batch {BATCH}, {WORKERS} "
        f"workers, {len(shards)} tar shards; median of {args.repeats}; machine: "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"torch {torch.__version__}"
    )
    print(
        f"{'shuffle_buffer':>14} {'first batch s':>14} {'images/s':>9} {'shards a batch':>15} "
        f"{'MB a worker':>12} {'at 110 KB':>10}"
    )
    for buffer in buffers:
        med: dict[str, Any] = {k: statistics.median(v) for k, v in rows[buffer].items()}
        print(
            f"{buffer:>14,} {med['first batch']:>14.2f} {med['images/s']:>9,.0f} "
            f"{med['shards a batch']:>15.1f} {buffer * mean_bytes / 1e6:>12.0f} "
            f"{buffer * 110e3 / 1e6:>10.0f}"
        )


if __name__ == "__main__":
    main()
