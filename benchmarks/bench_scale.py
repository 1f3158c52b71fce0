"""What an elastic resume costs at scale: ranks and workers simulated in one process.

A job checkpoints half way through an epoch on one layout and resumes on a smaller one. For
each scale this prints, for streams (``ShardedStream`` over virtual shards of ids: nothing is
read from disk) and for map-style splits (``IndexBatchSampler``):

* the fresh epoch's plan time (to the first batch of rank 0),
* the checkpoint's state size (JSON bytes),
* for the first, a middle and the last rank of the new layout: the resume's time (index-space
  work plus the first batch of every worker of the rank, one after the other) and its peak
  memory above a fresh start of the same rank (each measured in a process of its own).

At 10M stream records it also checks exactness over every new rank without building the
records: the ranks' ranges are disjoint and contiguous, their union counts exactly the
records not delivered, and the positions equal the exact remainder
(``datamodules.stream_engine.elastic.remainder``).

Bars (issue "elastic resume at internet scale"): streams at 1B records, 4,096 x 8 -> 3,072 x 8,
resume at most 5 s and 256 MB above a fresh start on every rank measured, state under 1 KB;
map-style at 100M samples, 64 -> 48 ranks, at most 5 s and 1 GB.

    python benchmarks/bench_scale.py                 # every scale (several minutes)
    python benchmarks/bench_scale.py --scales 1M 10M # the small ones
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import subprocess
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import datamodules.stream_engine.stream as stream_module  # noqa: E402
from datamodules.core.elastic import Segment  # noqa: E402
from datamodules.core.samplers import IndexBatchSampler  # noqa: E402
from datamodules.stream_engine.elastic import remainder  # noqa: E402
from datamodules.stream_engine.layout import Plan, worker_done  # noqa: E402
from datamodules.stream_engine.remainder import remaining_sequence  # noqa: E402
from datamodules.stream_engine.stream import ShardedStream  # noqa: E402

# Benchmarks print figures, not the DataModules' summaries (logged at INFO).
logging.getLogger("datamodules").setLevel(logging.WARNING)

#: name -> (records, shards, old world, new world, workers)
STREAMS = {
    "1K": (1_000, 10, 4, 3, 2),
    "1M": (10**6, 100, 8, 6, 2),
    "10M": (10**7, 1_000, 64, 48, 8),
    "100M": (10**8, 10_000, 1_024, 768, 8),
    "1B": (10**9, 100_000, 4_096, 3_072, 8),
}
#: name -> (samples, old world, new world)
MAPS = {"1K": (1_000, 4, 3), "1M": (10**6, 8, 6), "100M": (10**8, 64, 48)}
BATCH, BUFFER, SEED = 32, 10_000, 7


class VirtualReader:
    """Shard ``v{i}`` holds the ids ``[first[i], first[i] + count)``: no I/O."""

    def __init__(self, counts: list[int]) -> None:
        self.first = np.concatenate([[0], np.cumsum(counts)]).tolist()

    def __call__(self, path: str, start: int, stop: int):
        base = self.first[int(path[1:])]
        return iter(range(base + start, base + stop))


def shard_counts(records: int, shards: int) -> list[int]:
    """Uneven shards (sizes drawn around the mean) holding ``records`` in all."""
    rng = np.random.default_rng(0)
    weights = rng.uniform(0.5, 1.5, shards)
    counts = np.floor(weights / weights.sum() * records).astype(np.int64)
    counts[: records - int(counts.sum())] += 1
    return counts.tolist()


def stream(counts: list[int], rank: int, world: int, workers: int) -> ShardedStream:
    shards = [(f"v{i}", c) for i, c in enumerate(counts)]
    s = ShardedStream(
        shards, batch_size=BATCH, rank=rank, world_size=world, shuffle=True,
        shuffle_buffer=BUFFER, seed=SEED, reader=VirtualReader(counts),
    )  # fmt: skip
    s.attach_loader(workers)  # as StreamLoader does
    return s


def first_batches(s: ShardedStream, workers: int) -> int:
    """The first batch of each of the rank's workers, as the workers would make them."""
    s.begin_epoch(workers)
    got = 0
    for w in range(workers):
        stream_module.get_worker_info = lambda w=w: types.SimpleNamespace(id=w, num_workers=workers)
        got += len(next(iter(s)))
    stream_module.get_worker_info = lambda: None
    return got


def old_state(counts: list[int], world: int, workers: int) -> dict:
    old = stream(counts, 0, world, workers)
    return old.state_dict(batches=len(old) // 2)


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------------- one measurement
def child(kind: str, scale: str, rank: int, resume: bool) -> dict:
    """Runs in a process of its own: a fresh start, or a resume, of one rank."""
    before = peak_mb()
    start = time.perf_counter()
    if kind == "stream":
        records, shards, old_world, new_world, workers = STREAMS[scale]
        counts = shard_counts(records, shards)
        state = old_state(counts, old_world, workers) if resume else None
        before = peak_mb()
        start = time.perf_counter()
        s = stream(counts, rank, new_world, workers)
        if state is not None:
            s.load_state_dict(json.loads(json.dumps(state)))
        first_batches(s, workers)
    else:
        samples, old_world, new_world = MAPS[scale]
        state = None
        if resume:
            old = IndexBatchSampler(samples, BATCH, num_replicas=old_world, rank=0, seed=SEED)
            state = old.state_dict(consumed_batches=len(old) // 2)
        before = peak_mb()
        start = time.perf_counter()
        sampler = IndexBatchSampler(samples, BATCH, num_replicas=new_world, rank=rank, seed=SEED)
        if state is not None:
            sampler.load_state_dict(json.loads(json.dumps(state)))
        else:
            sampler.set_epoch(0)
        next(iter(sampler))
    return {"seconds": time.perf_counter() - start, "peak_mb": peak_mb(), "before_mb": before}


def measure(kind: str, scale: str, rank: int, resume: bool) -> dict:
    command = [sys.executable, __file__, "--child", kind, scale, str(rank), str(int(resume))]
    out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=3600)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------- exactness at 10M
def check_exact_streams(scale: str = "10M") -> str:
    records, shards, old_world, new_world, workers = STREAMS[scale]
    counts = shard_counts(records, shards)
    state = old_state(counts, old_world, workers)
    segments = [Segment(old_world, workers, BATCH, state["batches"])]
    plan = Plan.make(records, old_world, BATCH, False)
    delivered = 0
    for rank in range(old_world):
        for w in range(workers):
            span = plan.span(rank, w, workers, worker_done(state["batches"], workers, w))
            delivered += span.t
    lazy = remaining_sequence(records, SEED, 0, BUFFER, False, segments)
    new = Plan.make(len(lazy), new_world, BATCH, False)
    starts, sizes = np.asarray(new.rank_start), np.asarray(new.rank_size)
    assert starts[0] == 0 and np.all(starts[1:] == starts[:-1] + sizes[:-1]), "ranges overlap"
    assert int(sizes.sum()) == len(lazy) == records - delivered, "not the records left"
    exact = remainder(records, SEED, 0, BUFFER, False, segments)
    for rank in range(new_world):
        a, b = int(starts[rank]), int(starts[rank] + sizes[rank])
        assert np.array_equal(lazy.take_range(a, b), exact[a:b]), f"rank {rank} differs"
    return (
        f"exact at {scale}: {new_world} new ranks, disjoint contiguous ranges of "
        f"{int(sizes.min()):,}-{int(sizes.max()):,} records, {len(lazy):,} in all = "
        f"{records:,} - {delivered:,} delivered; every rank's positions equal the exact "
        "remainder"
    )


# ---------------------------------------------------------------------- report
def report(kind: str, scales: list[str]) -> None:
    table = STREAMS if kind == "stream" else MAPS
    print(f"\n{kind}s" if kind == "stream" else "\nmap-style splits")
    head = "scale  layout              plan s  state B  rank       resume s  +MB vs fresh"
    print(head)
    for scale in scales:
        if scale not in table:
            continue
        if kind == "stream":
            records, shards, old_world, new_world, workers = table[scale]
            counts = shard_counts(records, shards)
            state = old_state(counts, old_world, workers)
            layout = f"{old_world}x{workers} -> {new_world}x{workers}"
        else:
            records, old_world, new_world = table[scale]
            old = IndexBatchSampler(records, BATCH, num_replicas=old_world, rank=0, seed=SEED)
            state = old.state_dict(consumed_batches=len(old) // 2)
            layout = f"{old_world} -> {new_world}"
        size = len(json.dumps(state))
        fresh0 = measure(kind, scale, 0, False)
        for rank in (0, new_world // 2, new_world - 1):
            fresh = fresh0 if rank == 0 else measure(kind, scale, rank, False)
            resumed = measure(kind, scale, rank, True)
            above = resumed["peak_mb"] - fresh["peak_mb"]
            print(
                f"{scale:<6} {layout:<19} {fresh0['seconds']:>6.2f}  {size:>7}  "
                f"{rank:>4} of {new_world:<4} {resumed['seconds']:>8.2f}  {above:>+8.0f}"
            )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, scale, rank, resume = sys.argv[2:6]
        print(json.dumps(child(kind, scale, int(rank), bool(int(resume)))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", nargs="+", default=list(STREAMS), choices=list(STREAMS))
    parser.add_argument("--no-exact", action="store_true", help="skip the check at 10M")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, torch {torch.__version__}; batch {BATCH}, shuffle "
        f"buffer {BUFFER}, checkpoint half way through the epoch"
    )
    report("stream", args.scales)
    report("map", args.scales)
    if not args.no_exact and "10M" in args.scales:
        print("\n" + check_exact_streams())


if __name__ == "__main__":
    main()
