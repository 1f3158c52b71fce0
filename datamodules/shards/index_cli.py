"""``python -m datamodules index SHARDS... --output FILE.index.json``: a dataset index of shards
another tool wrote, so that setup reads one file instead of every shard.

Usage::

    python -m datamodules index "data/train-{000000..000099}.tar" --output data/train.index.json
    python -m datamodules index "s3://bucket/c4/*.jsonl.zst" --output c4.index.json --workers 32

``SHARDS`` are paths, URLs, globs, brace patterns or directories of tar, JSONL, CSV / TSV, txt,
Parquet or Arrow IPC shards (compressed line formats too), local or remote (fsspec). Each shard
is read once: its records counted by parsing them (so bad records are found and noted), its
seek offsets kept. Local shards are indexed by ``--workers`` processes, remote ones by as many
threads, with a progress bar. Each finished shard is noted in ``FILE.index.json.part``, so a
rerun after an interruption indexes only the shards not done yet (as does a rerun over an
index already written: new shards are added).

The output is webdataset's wids shard index (:mod:`~datamodules.shards.dataset_index`), read by
``StreamingDataModule(train_files="FILE.index.json")`` and by ``wids.ShardListDataset``; local
shards are listed relative to it, remote ones by their URL.

This module stays light: ``--help`` and the argument checks import neither torch nor
Lightning; the indexing is imported after parsing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["PROG", "index_main", "parse_args", "run"]

PROG = "python -m datamodules index"
DESCRIPTION = (
    "index shards another tool wrote (tar, JSONL, CSV/TSV, txt, Parquet, Arrow; local or remote) "
    "into a dataset index (webdataset's wids format) that setup reads instead of the shards."
)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The arguments of ``python -m datamodules index``, checked (exits 2 on bad ones)."""
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION)
    parser.add_argument(
        "shards", nargs="+", help="paths, URLs, globs, brace patterns or directories of shards"
    )
    parser.add_argument("--output", "-o", required=True, help="the index to write (*.json)")
    parser.add_argument(
        "--workers", type=int, default=None,
        help="processes (local shards) or threads (remote ones); default: the CPUs, 16 remote",
    )  # fmt: skip
    parser.add_argument("--name", default=None, help="the dataset's name (default: from OUTPUT)")
    parser.add_argument(
        "--fmt", default=None, choices=("jsonl", "txt", "csv", "tsv", "parquet", "arrow", "tar"),
        help="the format of every shard (default: from each extension)",
    )  # fmt: skip
    parser.add_argument(
        "--storage-options", default=None, metavar="JSON",
        help='fsspec options for remote shards, e.g. \'{"endpoint_url": "http://..."}\'',
    )  # fmt: skip
    parser.add_argument("--retries", type=int, default=5, help="retries of a transient failure")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds without a byte")
    args = parser.parse_args(list(argv))
    if not args.output.lower().endswith(".json"):
        parser.error(f"--output {args.output!r}: name it *.index.json (it is JSON)")
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers {args.workers}: use 1 or more")
    if args.retries < 0 or args.timeout <= 0:
        parser.error("--retries must be >= 0 and --timeout > 0")
    try:
        args.storage_options = json.loads(args.storage_options or "{}")
    except ValueError as err:
        parser.error(f"--storage-options is not JSON: {err}")
    if not isinstance(args.storage_options, dict):
        parser.error("--storage-options: give a JSON object")
    return args


def index_main(argv: Sequence[str] | None = None) -> int:
    """``python -m datamodules index``: parses, then indexes; returns the exit status."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return run(args)


class _Stats:
    """Retry counts of this process (the shared-memory counter of DataModules needs torch)."""

    retries = failures = 0

    def retried(self) -> None:
        self.retries += 1

    def gave_up(self) -> None:
        self.failures += 1


def _options(args: argparse.Namespace) -> Any:
    from datamodules.remote.retrying import RemoteOptions

    return RemoteOptions(args.storage_options, args.retries, args.timeout, stats=_Stats())


def _index_one(job: tuple[str, str | None, Any]) -> Any:
    """Indexes one shard, every record parsed (in a worker process or thread)."""
    from datamodules.shards.index import index_shard

    path, fmt, options = job
    return index_shard(path, fmt, "skip", cache_dir=False, options=options)


def _done_before(args: argparse.Namespace, journal: str) -> dict[str, Any]:
    """Shards indexed by an earlier run: the journal's, then the output's (path -> index)."""
    from datamodules.shards.dataset_index import parse_dataset_index
    from datamodules.shards.index import index_from_json

    done: dict[str, Any] = {}
    if os.path.exists(args.output):
        try:
            with open(args.output, "rb") as f:
                table = parse_dataset_index(f.read(), args.output, args.fmt, "skip")
            done.update((s.path, s) for s in table if not s.counted_only)  # ours only
        except (OSError, ValueError):
            pass
    if os.path.exists(journal):
        with open(journal) as f:
            for line in f:
                try:
                    index = index_from_json(json.loads(line))
                except (ValueError, TypeError):
                    continue  # a line cut by the interruption
                done[index.path] = index
    return done


def _still(index: Any, path: str) -> bool:
    """Whether an earlier run's index of ``path`` still holds (a local shard: same size)."""
    from datamodules.remote.files import is_remote, local_path

    if index is None:
        return False
    if is_remote(path):
        return True
    try:
        return os.path.getsize(local_path(path)) == index.size
    except OSError:
        return False


def _key(path: str) -> str:
    from datamodules.remote.files import is_remote, local_path

    return path if is_remote(path) else os.path.abspath(local_path(path))


def run(args: argparse.Namespace) -> int:
    """Indexes the shards that parsed arguments name and writes the index; returns the exit
    status (1 when a shard cannot be read: the others stay noted for a rerun)."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
    from dataclasses import asdict

    from tqdm.auto import tqdm

    from datamodules.remote.files import is_remote
    from datamodules.shards.dataset_index import write_dataset_index
    from datamodules.shards.formats import expand_files

    options = _options(args)
    try:
        paths = expand_files(args.shards, options)
    except ValueError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 2
    journal = args.output + ".part"  # one line per finished shard: its index
    done = {_key(p): s for p, s in _done_before(args, journal).items()}
    todo = [p for p in paths if not _still(done.get(_key(p)), p)]
    remote = any(is_remote(p) for p in todo)
    workers = args.workers or (16 if remote else os.cpu_count() or 1)
    workers = max(1, min(workers, len(todo)))
    bar = tqdm(total=len(paths), initial=len(paths) - len(todo), unit="shard", desc="index",
               disable=None)  # fmt: skip
    failed: list[str] = []
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    try:
        with open(journal, "a") as log:
            pool_class = ThreadPoolExecutor if remote or workers == 1 else ProcessPoolExecutor
            with pool_class(workers) as pool:
                pending = {pool.submit(_index_one, (p, args.fmt, options)): p for p in todo}
                while pending:
                    finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in finished:
                        path = pending.pop(future)
                        try:
                            index = future.result()
                        except Exception as err:
                            failed.append(f"{path}: {err}")
                            continue
                        if index.error is not None:
                            failed.append(index.error)
                            continue
                        done[_key(path)] = index
                        log.write(json.dumps(asdict(index)) + "\n")
                        log.flush()
                        bar.update(1)
    finally:
        bar.close()
    if failed:
        print(f"{PROG}: {len(failed)} shard(s) could not be read:", file=sys.stderr)
        for line in failed[:10]:
            print(f"  {line}", file=sys.stderr)
        print(f"the other {len(done)} are noted in {journal}: rerun to finish.", file=sys.stderr)
        return 1
    shards = [done[_key(p)] for p in paths]
    write_dataset_index(args.output, shards, args.name)
    os.remove(journal)
    records = sum(s.count for s in shards)
    size = sum(s.size or 0 for s in shards)
    skipped = sum(s.skipped for s in shards)
    print(
        f"{len(shards)} shards, {records} records ({size / 1e6:.1f} MB) indexed into "
        f"{args.output}"
        + (
            f"; {skipped} bad record(s) noted (read with on_error='skip')" if skipped else ""
        )  # fmt: skip
    )
    return 0
