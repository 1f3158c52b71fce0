"""StreamingDataModule against its baselines, litdata and webdataset over the same records.

Data: ``--records`` records ``{"id": int, "tokens": list of round(exp(N(3.2, 0.8))) ints}``
(lengths clipped to [1, 512]) in 16 shards, written to a temporary directory as JSONL and as
Parquet (row groups of 2,048) for ours, with ``litdata.optimize`` for litdata (tokens as int64
arrays) and as tar shards for webdataset. Ours is
``StreamingDataModule(shards, ...).train_dataloader()`` (the loader a Trainer gets) with its
default collate, over 0 and 2 workers. litdata and webdataset run 2 workers. Every loader
batches 64 records, shuffles (ours and webdataset: a 10,000-record buffer) and pads with the
same rules: ``collates.records.collate_records`` (what the DataModule's default collate gives
for dict records; ``--collate lean`` swaps in ``pad_tokens`` below for every loader).

Baselines, in one process over the same data: the standard library's ``json.loads`` over the
JSONL lines (already in memory), and pyarrow reading the Parquet files' columns into NumPy.

Each loader runs alone (the cores to itself): one first epoch (workers starting), then
``--repeats`` later epochs with persistent workers, whose median is the figure that the ratios
compare. Ours also checks that every record arrived exactly once in every epoch.

``--memory``: peak memory of one full epoch of ours (the DataModule over JSONL, 2 workers,
batch 64, shuffle buffer 10,000, default collate), for 100k and 1M records, each in a fresh
process; summed over the main process and its workers, as PSS (shared pages split between
processes) and RSS.

``--mixed``: the cost of mixing. The same JSONL and Parquet shards as three weighted Sources
(6, 5 and 5 shards) with weight schedules (``[[0, 1], [2, 3]]``, ``2``, ``[[0, 3], [2, 1]]``)
and ``epoch_size`` = all the records, against the same shards unmixed, 0 and 2 workers;
records per second, the two loaders alternating epochs (which goes first alternates too; the
schedule moves with the epochs), the ratio that of the medians (bar: mixed at least 0.95x
unmixed).

Run: ``python benchmarks/bench_streaming.py [--records 100000] [--repeats 5] [--memory]
[--mixed]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collates.records import collate_records  # noqa: E402
from datamodules import Source, StreamingDataModule  # noqa: E402

# Benchmarks print figures, not the DataModules' summaries (logged at INFO).
logging.getLogger("datamodules").setLevel(logging.WARNING)


def pad_tokens(records: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """A lean padded collate: ``id`` stacked, ``tokens`` right-padded with 0, ``lengths``.

    One NumPy conversion per batch (not per record) whether tokens are lists or arrays.
    """
    tokens = [r["tokens"] for r in records]
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    out = np.zeros((len(tokens), int(lengths.max())), dtype=np.int64)
    if isinstance(tokens[0], np.ndarray):
        flat = np.concatenate(tokens)
    else:
        flat = np.fromiter(chain.from_iterable(tokens), dtype=np.int64, count=int(lengths.sum()))
    out[np.arange(out.shape[1]) < lengths[:, None]] = flat
    ids = torch.tensor([r["id"] for r in records])
    return {"id": ids, "tokens": torch.from_numpy(out), "lengths": torch.from_numpy(lengths)}


COLLATES = {"lean": pad_tokens, "project": collate_records}
SHARDS, BATCH, WORKERS, BUFFER = 16, 64, 2, 10_000


def shard_records(shard: int, n_records: int, seed: int = 0) -> list[dict[str, Any]]:
    """The records of one shard (shard ``k`` holds ids ``k, k + 16, ...``), deterministic."""
    rng = np.random.default_rng([seed, shard])
    ids = list(range(shard, n_records, SHARDS))
    lengths = np.clip(np.rint(np.exp(rng.normal(3.2, 0.8, len(ids)))), 1, 512).astype(int)
    flat = rng.integers(0, 32_000, int(lengths.sum())).tolist()
    out, at = [], 0
    for i, n in zip(ids, lengths.tolist(), strict=True):
        out.append({"id": i, "tokens": flat[at : at + n]})
        at += n
    return out


def write_jsonl(root: Path, n_records: int) -> list[str]:
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(SHARDS):
        path = root / f"shard-{k:02d}.jsonl"
        with open(path, "w") as f:
            for rec in shard_records(k, n_records):
                f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        paths.append(str(path))
    return paths


def write_parquet(root: Path, n_records: int) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(SHARDS):
        recs = shard_records(k, n_records)
        table = pa.table(
            {
                "id": [r["id"] for r in recs],
                "tokens": pa.array([r["tokens"] for r in recs], pa.list_(pa.int64())),
            }
        )
        path = root / f"shard-{k:02d}.parquet"
        pq.write_table(table, path, row_group_size=2048)
        paths.append(str(path))
    return paths


class LitdataShard:
    """``litdata.optimize`` fn: yields the records of one shard, tokens as int64 arrays."""

    def __init__(self, n_records: int) -> None:
        self.n_records = n_records

    def __call__(self, shard: int):
        for rec in shard_records(shard, self.n_records):
            yield {"id": rec["id"], "tokens": np.asarray(rec["tokens"], dtype=np.int64)}


def write_litdata(root: Path, n_records: int) -> str | None:
    try:
        import litdata
    except ImportError:
        return None
    method = multiprocessing.get_start_method(allow_none=True)
    litdata.optimize(
        fn=LitdataShard(n_records),
        inputs=list(range(SHARDS)),
        output_dir=str(root),
        chunk_bytes="4MB",
        num_workers=2,
        verbose=False,
    )
    # optimize() forces the global start method to "spawn": restore the platform default so
    # that every loader below starts its workers the same way.
    multiprocessing.set_start_method(method, force=True)
    return str(root)


def write_webdataset(root: Path, n_records: int) -> list[str] | None:
    try:
        import webdataset as wds
    except ImportError:
        return None
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(SHARDS):
        path = root / f"shard-{k:02d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for rec in shard_records(k, n_records):
                sink.write({"__key__": f"{rec['id']:09d}", "json": rec})
        paths.append(str(path))
    return paths


# ---------------------------------------------------------------------------- loaders


def datamodule(
    paths: list[str], seed: int, collate: Any, cache: Any, workers: int = WORKERS
) -> StreamingDataModule:
    """Ours: the DataModule's default collate for ``collate_records``, else ``collate``."""
    return StreamingDataModule(
        paths,
        batch_size=BATCH,
        num_workers=workers,
        shuffle_buffer=BUFFER,
        shuffle_seed=seed,
        collate=None if collate is collate_records else collate,
        index_cache=cache,
    )


class Ours:
    """The loader a Trainer gets, built once (workers persist), checked exactly once."""

    def __init__(self, paths: list[str], collate: Any, cache: Any, workers: int) -> None:
        self.dm = datamodule(paths, 0, collate, cache, workers)
        self.n = self.dm.split_size("train")
        self.loader = self.dm.train_dataloader()
        self.exact = True

    def epoch(self) -> int:
        ids = [batch["id"] for batch in self.loader]
        counts = torch.bincount(torch.cat(ids), minlength=self.n)
        n = int(counts.sum())
        self.exact &= n == self.n and bool((counts == 1).all())
        return n


class Litdata:
    def __init__(self, root: str, collate: Any) -> None:
        from litdata import StreamingDataLoader, StreamingDataset

        dataset = StreamingDataset(root, shuffle=True, seed=0)
        self.loader = StreamingDataLoader(
            dataset, batch_size=BATCH, num_workers=WORKERS, collate_fn=collate,
            persistent_workers=True,
        )  # fmt: skip

    def epoch(self) -> int:
        return sum(len(batch["id"]) for batch in self.loader)


def wds_sample(sample: dict[str, Any]) -> dict[str, Any]:
    return sample["json"]


class WebDataset:
    def __init__(self, paths: list[str], collate: Any) -> None:
        import webdataset as wds

        dataset = (
            wds.WebDataset(paths, shardshuffle=len(paths), seed=0, empty_check=False)
            .shuffle(BUFFER)
            .decode()
            .map(wds_sample)
            .batched(BATCH, collation_fn=collate, partial=True)
        )
        self.loader = wds.WebLoader(
            dataset, batch_size=None, num_workers=WORKERS, persistent_workers=True
        )

    def epoch(self) -> int:
        return sum(len(batch["id"]) for batch in self.loader)


class JsonLoads:
    """Baseline: the standard library's ``json.loads`` over the same lines, in one process
    (the lines already in memory, as text)."""

    def __init__(self, paths: list[str]) -> None:
        self.lines = [line for p in paths for line in Path(p).read_text().splitlines()]

    def epoch(self) -> int:
        loads = json.loads
        for line in self.lines:
            loads(line)
        return len(self.lines)


class ArrowColumns:
    """Baseline: pyarrow reads the same Parquet files' columns into NumPy, in one process."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def epoch(self) -> int:
        import pyarrow.parquet as pq

        n = 0
        for path in self.paths:
            table = pq.read_table(path, use_threads=False)
            ids = table.column("id").to_numpy()
            tokens = table.column("tokens").combine_chunks()
            tokens.flatten().to_numpy()
            tokens.value_lengths().to_numpy()
            n += len(ids)
        return n


def timed(fn, *args) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def throughput(args: argparse.Namespace) -> None:
    n = args.records
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        cache = root / "cache"
        jsonl = write_jsonl(root / "jsonl", n)
        parquet = write_parquet(root / "parquet", n)
        lit = write_litdata(root / "litdata", n)
        web = write_webdataset(root / "wds", n)
        print(f"wrote {n:,} records x 4 formats in {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        for paths in (jsonl, parquet):  # index once (cached), as a first setup() would
            datamodule(paths, 0, None, cache).setup("fit")
        print(f"indexed the JSONL and Parquet shards in {time.perf_counter() - t0:.1f} s")
        results = {}
        for collate_name in args.collate:
            collate = COLLATES[collate_name]
            results[collate_name] = measure(args, jsonl, parquet, lit, web, collate, cache)
    for collate_name, (first, rates, exact) in results.items():
        report(args, collate_name, first, rates, exact)


def measure(args, jsonl, parquet, lit, web, collate, cache):
    """Records/s of every loader: its first epoch (workers starting) and the later ones."""
    cases: dict[str, Any] = {
        "json.loads, 1 process (baseline)": lambda: JsonLoads(jsonl),
        "pyarrow columns to NumPy (baseline)": lambda: ArrowColumns(parquet),
        "ours, JSONL, 0 workers": lambda: Ours(jsonl, collate, cache, 0),
        "ours, JSONL, 2 workers": lambda: Ours(jsonl, collate, cache, WORKERS),
        "ours, Parquet, 0 workers": lambda: Ours(parquet, collate, cache, 0),
        "ours, Parquet, 2 workers": lambda: Ours(parquet, collate, cache, WORKERS),
    }
    if lit:
        cases["litdata StreamingDataset, 2 workers"] = lambda: Litdata(lit, collate)
    if web:
        cases["webdataset, 2 workers"] = lambda: WebDataset(web, collate)
    first: dict[str, float] = {}
    rates: dict[str, list[float]] = {}
    exact = True
    for name, make in cases.items():  # one loader at a time: each has the cores to itself
        loader = make()
        seconds, count = timed(loader.epoch)
        first[name] = count / seconds
        rates[name] = []
        for _ in range(args.repeats):
            seconds, count = timed(loader.epoch)
            rates[name].append(count / seconds)
        if isinstance(loader, Ours):
            exact &= loader.exact
        elif count != args.records:
            print(f"  {name}: delivered {count:,} of {args.records:,} records")
        del loader
    return first, rates, exact


def report(args, collate_name: str, first, rates, exact: bool) -> None:
    print(
        f"\n{args.records:,} records, {SHARDS} shards, batch {BATCH}, shuffle on (buffer "
        f"{BUFFER:,}), {collate_name} padded collate, workers by "
        f"{multiprocessing.get_start_method()}; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, torch {torch.__version__}; each loader alone; later epochs: "
        f"median of {args.repeats} (persistent workers)"
    )
    median = {name: statistics.median(values) for name, values in rates.items()}
    lit = median.get("litdata StreamingDataset, 2 workers")
    print(f"  {'loader':<38} {'later epochs':>13} {'first epoch':>12}  ratios (later epochs)")
    for name, rate in median.items():
        ratios = []
        if lit and not name.endswith("(baseline)"):
            ratios.append(f"{rate / lit:.2f}x litdata")
        if name.startswith("ours, JSONL"):
            ratios.append(f"{rate / median['json.loads, 1 process (baseline)']:.2f}x json.loads")
        if name.startswith("ours, Parquet"):
            base = median["pyarrow columns to NumPy (baseline)"]
            ratios.append(f"{rate / base:.2f}x pyarrow columns")
        if name.endswith("2 workers") and name.startswith("ours"):
            zero = median[name.replace("2 workers", "0 workers")]
            ratios.append(f"{rate / zero:.2f}x its 0 workers")
        print(f"  {name:<38} {rate:>13,.0f} {first[name]:>12,.0f}  {', '.join(ratios)}")
    print(f"  ours exactly once in every epoch: {exact}")


# ---------------------------------------------------------------------------- mixing


class Mixed:
    """Ours over three scheduled Sources of the same shards; every epoch all the records."""

    def __init__(self, paths: list[str], cache: Any, workers: int) -> None:
        sources = [
            Source(paths[:6], weight=[[0, 1], [2, 3]], name="a"),
            Source(paths[6:11], weight=2, name="b"),
            Source(paths[11:], weight=[[0, 3], [2, 1]], name="c"),
        ]
        n = StreamingDataModule(paths, index_cache=cache).split_size("train")
        self.dm = StreamingDataModule(
            sources, epoch_size=n, batch_size=BATCH, num_workers=workers,
            shuffle_buffer=BUFFER, index_cache=cache,
        )  # fmt: skip
        self.loader = self.dm.train_dataloader()

    def epoch(self) -> int:
        return sum(len(batch["id"]) for batch in self.loader)


def mixed(args: argparse.Namespace) -> None:
    """Three scheduled sources against the same records unmixed."""
    n = args.records
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cache = root / "cache"
        shards = {"JSONL": write_jsonl(root / "jsonl", n),
                  "Parquet": write_parquet(root / "parquet", n)}  # fmt: skip
        print(
            f"{n:,} records, {SHARDS} shards as 3 scheduled Sources vs unmixed; batch {BATCH}, "
            f"buffer {BUFFER:,}; {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} CPUs, torch {torch.__version__}; median of {args.repeats}"
        )
        print(f"  {'loader':<34} {'records/s':>11} {'mixed is':>9}")
        for fmt, paths in shards.items():
            for workers in (0, WORKERS):
                loaders = {"unmixed": Ours(paths, collate_records, cache, workers),
                           "mixed": Mixed(paths, cache, workers)}  # fmt: skip
                for loader in loaders.values():
                    loader.epoch()  # first epoch: workers start
                rates: dict[str, list[float]] = {name: [] for name in loaders}
                for repeat in range(args.repeats):
                    order = list(loaders) if repeat % 2 == 0 else list(loaders)[::-1]
                    for name in order:  # alternating which goes first
                        seconds, count = timed(loaders[name].epoch)
                        rates[name].append(count / seconds)
                ratio = statistics.median(rates["mixed"]) / statistics.median(rates["unmixed"])
                for name, values in rates.items():
                    shown = f"{ratio:.3f}x" if name == "mixed" else ""
                    label = f"{fmt}, {workers} workers, {name}"
                    print(f"  {label:<34} {statistics.median(values):>11,.0f} {shown:>9}")
                del loaders


# ---------------------------------------------------------------------------- memory


def _tree_memory(pid: int) -> tuple[int, int]:
    """(PSS, RSS) in bytes summed over ``pid`` and its children."""
    pids = [pid]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        pids.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    pss = rss = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
                    elif line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
        except OSError:
            pass
    return pss, rss


def memory_child(root: str, n: int) -> None:
    """One epoch over the JSONL shards in ``root``; prints the peak PSS/RSS as JSON."""
    dm = datamodule(sorted(str(p) for p in Path(root).glob("*.jsonl")), 0, collate_records, False)
    dm.setup("fit")
    peak = [0, 0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            pss, rss = _tree_memory(os.getpid())
            peak[0], peak[1] = max(peak[0], pss), max(peak[1], rss)
            time.sleep(0.02)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    seen = bytearray(n)
    for batch in dm.train_dataloader():
        for i in batch["id"].tolist():
            seen[i] += 1
    stop.set()
    thread.join()
    print(json.dumps({"pss": peak[0], "rss": peak[1], "exact": seen.count(1) == n}))


def memory(args: argparse.Namespace) -> None:
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in (100_000, 1_000_000):
            root = Path(tmp) / str(n)
            write_jsonl(root, n)
            size = sum(p.stat().st_size for p in root.iterdir())
            out = subprocess.run(
                [sys.executable, __file__, "--memory-child", str(root), str(n)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            results[n] = json.loads(out.strip().splitlines()[-1])
            r = results[n]
            print(
                f"{n:>9,} records ({size / 2**20:,.0f} MiB of JSONL): peak PSS "
                f"{r['pss'] / 2**20:,.0f} MiB, RSS {r['rss'] / 2**20:,.0f} MiB, "
                f"exactly once: {r['exact']}"
            )
    small, big = results[100_000], results[1_000_000]
    print(
        f"1M vs 100k: PSS {big['pss'] / small['pss'] - 1:+.1%}, "
        f"RSS {big['rss'] / small['rss'] - 1:+.1%} (bound: +20%)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--collate",
        nargs="+",
        choices=sorted(COLLATES),
        default=["project"],
        help="project: collates.records.collate_records (ours: the DataModule's default "
        "collate); lean: pad_tokens below",
    )
    parser.add_argument("--memory", action="store_true", help="peak memory, 100k vs 1M")
    parser.add_argument("--mixed", action="store_true", help="three scheduled sources")
    parser.add_argument("--memory-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child[0], int(args.memory_child[1]))
    elif args.memory:
        memory(args)
    elif args.mixed:
        mixed(args)
    else:
        throughput(args)


if __name__ == "__main__":
    main()
