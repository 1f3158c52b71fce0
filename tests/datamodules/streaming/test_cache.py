"""The local shard cache and prefetch, against a real HTTP server on 127.0.0.1 that counts
every request: a second epoch sends none, two processes download each shard once, the limit
evicts least recently used copies but never one being read."""

from __future__ import annotations

import http.server
import json
import multiprocessing
import os
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

from datamodules.remote.cache import ShardCache, parse_size
from datamodules.remote.retrying import RemoteOptions
from datamodules.shards.index import index_shards
from datamodules.stream_engine.loader import StreamLoader
from datamodules.stream_engine.readers import ShardReader
from datamodules.stream_engine.stream import ShardedStream

N = 400  # records per shard


class CountingHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the folder and counts requests by (method, path)."""

    counts: Counter

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.counts["GET", self.path] += 1
        super().do_GET()

    def do_HEAD(self) -> None:  # noqa: N802
        self.counts["HEAD", self.path] += 1
        super().do_HEAD()


@pytest.fixture
def server(tmp_path: Path):
    root = tmp_path / "served"
    root.mkdir()
    for k in range(3):
        lines = [json.dumps({"id": k * N + i, "pad": "y" * (10 + k)}) for i in range(N)]
        (root / f"s{k}.jsonl").write_text("\n".join(lines) + "\n")
    counts: Counter = Counter()
    handler = type("Handler", (CountingHandler,), {"counts": counts})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=root))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", counts, root
    httpd.shutdown()
    httpd.server_close()


def urls(base: str) -> list[str]:
    return [f"{base}/s{k}.jsonl" for k in range(3)]


def gets(counts: Counter) -> int:
    return sum(n for (method, _), n in counts.items() if method == "GET")


def test_the_second_epoch_sends_no_request(server, tmp_path: Path) -> None:
    base, counts, _ = server
    options = RemoteOptions(backoff=0.01)
    indexes = index_shards(urls(base), cache_dir=False, options=options)
    cache = ShardCache(tmp_path / "cache", None, options)
    reader = ShardReader({i.path: i for i in indexes}, options=options, cache=cache)
    stream = ShardedStream(indexes, batch_size=50, shuffle=True, shuffle_buffer=64, reader=reader)
    loader = StreamLoader(stream, num_workers=2, persistent_workers=False)
    indexed = Counter(counts)  # counting the records read each shard once
    first = sorted(r["id"] for batch in loader for r in batch)
    after_first = Counter(counts)
    second = sorted(r["id"] for batch in loader for r in batch)
    assert first == second == list(range(3 * N))
    downloads = after_first - indexed
    assert downloads == Counter({("GET", f"/s{k}.jsonl"): 1 for k in range(3)})  # once each
    assert counts == after_first  # the second epoch: no request at all


def download_all(directory: str, shard_urls: list[str], barrier) -> None:
    cache = ShardCache(directory, None, RemoteOptions(backoff=0.01))
    barrier.wait()
    for url in shard_urls:
        cache.ensure(url, None, None)


def test_two_processes_sharing_a_cache_download_each_shard_once(server, tmp_path: Path) -> None:
    base, counts, _ = server
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(2)
    args = (str(tmp_path / "cache"), urls(base), barrier)
    processes = [context.Process(target=download_all, args=args) for _ in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    assert {path: n for (m, path), n in counts.items() if m == "GET"} == {
        f"/s{k}.jsonl": 1 for k in range(3)
    }


def test_the_limit_evicts_least_recently_used_but_never_a_shard_being_read(
    server, tmp_path: Path
) -> None:
    base, counts, root = server
    sizes = [os.path.getsize(root / f"s{k}.jsonl") for k in range(3)]
    s0, s1, s2 = urls(base)
    cache = ShardCache(tmp_path / "cache", sizes[1] + sizes[2] + 10, RemoteOptions())
    cache.ensure(s0, None, sizes[0])
    cache.ensure(s1, None, sizes[1])
    cache.ensure(s2, None, sizes[2])  # over the limit: s0 is the least recently used
    present = {os.path.basename(p).split("-", 1)[1] for _, _, p in cache.entries()}
    assert present == {"s1.jsonl", "s2.jsonl"}
    with cache.open(s1, None, sizes[1]) as local:  # s1 is being read (and now most recent)
        cache.ensure(s0, None, sizes[0])  # evicts s2, the least recently used one not read
        present = {os.path.basename(p).split("-", 1)[1] for _, _, p in cache.entries()}
        assert present == {"s0.jsonl", "s1.jsonl"}
        with open(local) as f:
            assert sum(1 for _ in f) == N
        cache.limit = 1  # even a limit nothing fits under never evicts a shard being read
        cache.evict()
        present = {os.path.basename(p).split("-", 1)[1] for _, _, p in cache.entries()}
        assert present == {"s1.jsonl"}
    assert gets(counts) == 4  # s0 twice (evicted once), s1 and s2 once


def test_a_new_version_of_a_shard_is_downloaded_again(server, tmp_path: Path) -> None:
    base, counts, root = server
    s0 = urls(base)[0]
    cache = ShardCache(tmp_path / "cache", None, RemoteOptions())
    first = cache.ensure(s0, "v1", None)
    assert cache.ensure(s0, "v1", None) == first and gets(counts) == 1
    (root / "s0.jsonl").write_text('{"id": -1}\n')
    local = cache.ensure(s0, "v2", 11)
    assert Path(local).read_text() == '{"id": -1}\n' and gets(counts) == 2


def test_prefetch_reads_every_record_and_leaves_no_copy(server) -> None:
    base, counts, _ = server
    options = RemoteOptions(backoff=0.01)
    indexes = index_shards(urls(base), cache_dir=False, options=options)
    indexed = gets(counts)  # counting the records read each shard once
    reader = ShardReader({i.path: i for i in indexes}, options=options, prefetch_shards=1)
    reader.plan(urls(base))
    ids = [r["id"] for r in reader(urls(base)[0], 0, N)]
    # While s0 was read, s1 downloaded in the background (bounded wait for the thread).
    deadline = time.monotonic() + 10
    while counts["GET", "/s1.jsonl"] < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert counts["GET", "/s1.jsonl"] == 2  # the index's read and the prefetch
    ids += [r["id"] for url in urls(base)[1:] for r in reader(url, 0, N)]
    assert ids == list(range(3 * N))
    assert reader.cache is not None and reader.cache.entries() == []  # each copy deleted
    assert gets(counts) - indexed == 3  # one download per shard


@pytest.mark.parametrize(("budget", "ahead"), [(1 << 20, 2), (1, 2)])
def test_small_shards_are_fetched_further_ahead(server, monkeypatch, budget, ahead) -> None:
    """``prefetch_shards=1`` fetches one shard ahead at a time, and more at once while the
    next shards add up to less than PREFETCH_BYTES (the connections stay busy on small
    shards). Once a copy is complete the next shard is fetched too (one complete copy waits
    at most): with s0 streamed, s1 and then s2 (test_remote_lookahead.py times it)."""
    from datamodules.stream_engine import readers

    monkeypatch.setattr(readers, "PREFETCH_BYTES", budget)
    base, counts, _ = server
    options = RemoteOptions(backoff=0.01)
    indexes = index_shards(urls(base), cache_dir=False, options=options)
    reader = ShardReader({i.path: i for i in indexes}, options=options, prefetch_shards=1)
    reader.plan(urls(base))  # s0 is streamed; s1 (and s2 under the budget) fetched ahead
    deadline = time.monotonic() + 10
    fetched = lambda: sum(counts["GET", f"/s{k}.jsonl"] == 2 for k in (1, 2))  # noqa: E731
    while fetched() < ahead and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # nothing more comes
    assert fetched() == ahead
    ids = [r["id"] for url in urls(base) for r in reader(url, 0, N)]
    assert ids == list(range(3 * N))


@pytest.mark.parametrize(
    ("value", "expected"),
    [(123, 123), ("50GB", 50 * 10**9), ("512 MiB", 512 * 2**20), ("1.5kb", 1500), (None, None)],
)
def test_cache_limit_sizes(value, expected) -> None:
    assert parse_size(value) == expected


@pytest.mark.parametrize(
    ("value", "error"),
    [(0, ValueError), (-5, ValueError), ("lots", ValueError), ("5 parsecs", ValueError),
     (2.5, TypeError), (True, TypeError)],
)  # fmt: skip
def test_a_bad_cache_limit_names_the_argument(value, error) -> None:
    with pytest.raises(error, match=r"cache_limit=.* is not accepted: use a number of bytes"):
        parse_size(value)


def test_the_datamodule_reads_its_second_epoch_from_the_cache(server, tmp_path: Path) -> None:
    from datamodules import StreamingDataModule

    base, counts, _ = server
    dm = StreamingDataModule(
        urls(base),
        cache_dir=str(tmp_path / "cache"),
        cache_limit="1GB",
        batch_size=50,
        num_workers=2,
        persistent_workers=False,
        index_cache=False,
    )
    loader = dm.train_dataloader()
    epochs = []
    for _ in range(2):
        before = Counter(counts)
        epochs.append(sorted(int(i) for batch in loader for i in batch["id"]))
        epochs.append(counts - before)
    assert epochs[0] == epochs[2] == list(range(3 * N))
    assert epochs[1] == Counter({("GET", f"/s{k}.jsonl"): 1 for k in range(3)})
    assert epochs[3] == Counter()  # the second epoch: no request
    assert "cache " + str(tmp_path / "cache") + " (limit 1,000,000,000 bytes)" in dm.summary()
