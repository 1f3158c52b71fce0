"""Setup over remote shards with a counting HTTP server on 127.0.0.1: an index URL touches no
shard, a warm index cache makes no request per shard, a changed shard is named (and re-indexed
on the next setup), a remote index is fetched conditionally."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from datamodules import StreamingDataModule
from datamodules.shards.errors import ShardError
from datamodules.streaming import write_shards
from tests.counting_http import counting_server

N_SHARDS, PER_SHARD = 6, 25


def records(n: int, first: int = 0) -> list[dict[str, Any]]:
    return [{"id": i, "text": "y" * (i % 17)} for i in range(first, first + n)]


@pytest.fixture
def served(tmp_path: Path):
    root = tmp_path / "served"
    write_shards(records(N_SHARDS * PER_SHARD), root, fmt="jsonl", max_records=PER_SHARD)
    with counting_server(root) as server:
        yield server, root


def make(files: Any, tmp_path: Path, **kwargs: Any) -> StreamingDataModule:
    kwargs = {
        "batch_size": 10,
        "num_workers": 0,
        "shuffle_buffer": 20,
        "prefetch_shards": 0,
        **kwargs,
    }
    return StreamingDataModule(files, index_cache=str(tmp_path / "index-cache"), **kwargs)


def ids(dm: StreamingDataModule) -> list[int]:
    return [int(i) for batch in dm.train_dataloader() for i in batch["id"].tolist()]


def shard_requests(server) -> int:
    return sum(n for (_, path), n in server.requests.items() if path.endswith(".jsonl"))


def test_setup_over_an_index_url_reads_the_index_and_no_shard(served, tmp_path) -> None:
    server, _ = served
    dm = make(f"{server.url}/shard.index.json", tmp_path)
    dm.setup("fit")
    assert dict(server.requests) == {("GET", "/shard.index.json"): 1}  # no HEAD, no shard
    assert dm.split_size("train") == N_SHARDS * PER_SHARD
    assert sorted(ids(dm)) == list(range(N_SHARDS * PER_SHARD))
    assert shard_requests(server) == N_SHARDS  # one GET per shard, when read
    server.reset()
    again = make(f"{server.url}/shard.index.json", tmp_path)
    again.setup("fit")  # the node's copy, revalidated: 304, no body
    assert dict(server.requests) == {("GET", "/shard.index.json"): 1}
    assert server.total_bytes == 0


def test_a_warm_index_cache_makes_no_request_per_shard(served, tmp_path) -> None:
    server, root = served
    urls = [f"{server.url}/shard-{k:06d}.jsonl" for k in range(N_SHARDS)]
    make(urls, tmp_path).setup("fit")
    assert shard_requests(server) == 2 * N_SHARDS  # cold: a HEAD and a GET each
    server.reset()
    dm = make(urls, tmp_path, shuffle=False)
    dm.setup("fit")
    assert server.total_requests == 0  # warm: trusted, checked when opened
    assert sorted(ids(dm)) == list(range(N_SHARDS * PER_SHARD))

    # A shard rewritten on the server: named when opened, never read wrongly...
    write_shards(records(PER_SHARD + 3, first=1000), root / "new", fmt="jsonl")
    os.replace(root / "new" / "shard-000000.jsonl", root / "shard-000002.jsonl")
    stale = make(urls, tmp_path, shuffle=False)
    stale.setup("fit")
    with pytest.raises(ShardError, match=r"shard-000002\.jsonl.*changed since it was indexed"):
        ids(stale)
    # ... and the next setup indexes it anew (its trusted entry was dropped).
    server.reset()
    fresh = make(urls, tmp_path, shuffle=False)
    fresh.setup("fit")
    assert shard_requests(server) == 2  # that shard only
    expected = [i for k in range(N_SHARDS) if k != 2 for i in range(k * 25, k * 25 + 25)]
    assert sorted(ids(fresh)) == sorted(expected + list(range(1000, 1028)))


def test_a_stale_remote_index_names_shard_index_and_sizes(served, tmp_path) -> None:
    server, root = served
    index = f"{server.url}/shard.index.json"
    listed = json.loads((root / "shard.index.json").read_text())["shardlist"][4]["filesize"]
    write_shards(records(5, first=500), root / "new", fmt="jsonl")
    os.replace(root / "new" / "shard-000000.jsonl", root / "shard-000004.jsonl")
    now = os.path.getsize(root / "shard-000004.jsonl")
    dm = make(index, tmp_path, shuffle=False, cache_dir=str(tmp_path / "copies"))
    dm.setup("fit")
    with pytest.raises(ShardError) as caught:
        ids(dm)
    message = str(caught.value)
    assert f"{server.url}/shard-000004.jsonl" in message and index in message
    assert f"is {now} bytes" in message and f"says {listed} bytes" in message
    assert not list((tmp_path / "copies").glob("*shard-000004.jsonl"))  # nothing kept
