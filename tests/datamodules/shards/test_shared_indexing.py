"""Indexing once per job under DDP: three gloo processes (``setup("fit")`` as a Trainer calls it
on every rank) each scan a third of the shards and all end with every index in their cache; a
remote dataset index is fetched once per node (ranks sharing a cache folder), not per rank."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from datamodules.streaming import write_shards
from tests.counting_http import counting_server

RUNNER = Path(__file__).with_name("dist_setup_runner.py")
ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(kwargs: list[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    """Runs one runner process per entry of ``kwargs`` (rank order) in one gloo group."""
    port = free_port()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(RUNNER),
                "--rank",
                str(rank),
                "--world",
                str(len(kwargs)),
                "--port",
                str(port),
                "--args",
                json.dumps(kw),
                "--out",
                str(out),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for rank, kw in enumerate(kwargs)
    ]
    errors = []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
        if proc.returncode:
            errors.append(err[-3000:])
    assert not errors, "\n".join(errors)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(len(kwargs))]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shared")
    write_shards(
        ({"id": i} for i in range(70)), root / "train", fmt="jsonl", max_records=10
    )  # 7 shards: an odd count, uneven shares
    write_shards(({"id": i} for i in range(100, 130)), root / "val", fmt="jsonl", max_records=10)
    return root


def test_each_shard_is_scanned_by_one_rank_and_the_index_read_once_per_node(
    data: Path, tmp_path: Path
) -> None:
    # Three ranks on two "nodes": ranks 0 and 1 share a cache folder, rank 2 has its own.
    train = sorted(str(p) for p in (data / "train").glob("*.jsonl"))
    caches = [tmp_path / "node-a", tmp_path / "node-a", tmp_path / "node-b"]
    with counting_server(data / "val") as server:
        kwargs = [
            {
                "train_files": train,
                "val_files": f"{server.url}/shard.index.json",
                "index_cache": str(cache),
                "batch_size": 4,
                "num_workers": 0,
                "prefetch_shards": 0,
            }
            for cache in caches
        ]
        ranks = run_ranks(kwargs, tmp_path / "out")
        requests = dict(server.requests)
    scanned = [set(r["scanned"]) for r in ranks]
    assert set().union(*scanned) == set(train) and sum(map(len, scanned)) == len(train)
    assert [len(s) for s in scanned] == [3, 2, 2]  # shards r, r + 3, ...: each once
    assert all(r["rescanned"] == [] for r in ranks)  # every index is in every node's cache
    assert ranks[0]["train"] == ranks[1]["train"] == ranks[2]["train"] == [train, [10] * 7]
    assert ranks[0]["val"] == ranks[1]["val"] == ranks[2]["val"]
    assert sum(ranks[0]["val"][1]) == 30
    # Two setups, each fetching the index once per node (the second a 304); no shard touched.
    assert requests == {("GET", "/shard.index.json"): 2 * 2}
