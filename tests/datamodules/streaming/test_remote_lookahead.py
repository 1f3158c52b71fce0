"""The next remote shard is asked for while the current one is read, with and without a cache.

A real HTTP server on 127.0.0.1 (:mod:`tests.counting_http`, slowed to 50 ms a request and
4 MB/s a connection) logs when each range request arrives and ends, and the loader notes when
each shard's first and last records arrive; each batch is followed by a training step's
pause, so that reading a shard outlasts fetching one. With one shard fetched ahead
(``prefetch_shards=1``, the byte budget for small shards set to one byte), every shard after
the first has its first request at the server before the last record of the one before it
was read, and each from the third on while the one two before it was read: a shard is
fetched as soon as the copy before it is complete, not once that copy is opened (a copy is
read in milliseconds, and the next shard's whole fetch would follow it). At most three
shards were asked for and not yet reached at once (the one being read, one fetching, one
copy waiting), never the epoch; the requests in flight at once stay within the process's
connections.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from datamodules import StreamingDataModule
from datamodules.remote.pool import connections
from datamodules.remote.retrying import RemoteOptions
from datamodules.stream_engine import readers
from tests.counting_http import counting_server

SHARDS, N = 4, 200  # about 1.6 MB a shard: two range requests each
PAD = "x" * 8192
STEP = 0.1  # seconds a training step takes: a shard's 8 batches outlast its fetch


@pytest.fixture
def served(tmp_path: Path) -> Path:
    root = tmp_path / "served"
    root.mkdir()
    for k in range(SHARDS):
        lines = (json.dumps({"id": k * N + i, "pad": PAD}) for i in range(N))
        (root / f"s{k}.jsonl").write_text("\n".join(lines) + "\n")
    return root


@pytest.mark.parametrize("cached", [False, True], ids=["no cache", "cache_dir"])
def test_the_next_shard_is_requested_while_the_current_one_is_read(
    served, tmp_path, monkeypatch, cached
) -> None:
    monkeypatch.setattr(readers, "PREFETCH_BYTES", 1)  # one shard ahead, whatever its size
    with counting_server(served) as server:
        urls = [f"{server.url}/s{k}.jsonl" for k in range(SHARDS)]
        dm = StreamingDataModule(
            urls, batch_size=25, num_workers=0, shuffle=False, index_cache=False,
            prefetch_shards=1, cache_dir=str(tmp_path / "cache") if cached else None,
        )  # fmt: skip
        dm.setup("fit")  # indexing at full speed
        server.latency, server.bandwidth = 0.05, 4e6
        server.reset()
        began = time.monotonic()  # (an indexing request may be logged just after the reset)
        first: dict[int, float] = {}
        last: dict[int, float] = {}
        ids: list[int] = []
        for batch in dm.train_dataloader():
            now = time.monotonic()
            for i in batch["id"].tolist():
                first.setdefault(i // N, now)
                last[i // N] = now
                ids.append(i)
            time.sleep(STEP)
        log = [r for r in server.log if r.arrived >= began]
    assert ids == list(range(SHARDS * N))
    asked = {k: min(r.arrived for r in log if r.path == f"/s{k}.jsonl") for k in range(SHARDS)}
    for k in range(1, SHARDS):  # asked for while the one before was read
        assert asked[k] < last[k - 1], (k, asked, last)
    for k in range(2, SHARDS):  # and while the one two back was read (not once k - 1 opened)
        assert asked[k] < last[k - 2], (k, asked, last)
    # Bounded: at most the shard being read and two ahead of it (one fetching, one copy
    # waiting) asked for and not yet reached, never the whole epoch at once.
    times = sorted(asked.values())
    ahead = max(sum(asked[k] <= t < first[k] for k in range(SHARDS)) for t in times)
    assert ahead <= 3, (asked, first)
    ranges = [r for r in log if r.start > 0]
    assert ranges  # each shard came in more than one range
    edges = sorted([(r.arrived, 1) for r in log] + [(r.ended, -1) for r in log])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    assert most <= connections(RemoteOptions())
    assert len(log) <= 3 * SHARDS  # a few ranges a shard, each asked for once
