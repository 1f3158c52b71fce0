"""A stream worker whose first shard is remote does its one-time imports while it waits.

``head_start`` runs a worker's one-time work (the imports its first batch needs) in a thread
once the first shard's parts are requested, so that it fills their latency instead of
following it; never in the main process (which may fork workers meanwhile), never for a local
first shard, once per process.
"""

from __future__ import annotations

import multiprocessing
import sys
import threading

import pytest

from datamodules.remote import pool as pool_module
from datamodules.stream_engine import readers


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(readers, "_HEAD_STARTS", set())
    waited: list[float] = []
    monkeypatch.setattr(readers, "wait_requested", lambda timeout: waited.append(timeout) or True)
    return waited


def _join(name: str) -> None:
    for thread in threading.enumerate():
        if thread.name == name:
            thread.join(timeout=10)
            assert not thread.is_alive()


def test_head_start_runs_once_in_a_worker_whose_first_shard_is_remote(fresh, monkeypatch) -> None:
    calls: list[str] = []

    def work() -> None:
        calls.append(threading.current_thread().name)

    readers.head_start(["http://127.0.0.1:1/a.jsonl"], "t", work)  # the main process: never
    assert not readers._HEAD_STARTS
    monkeypatch.setattr(readers, "get_worker_info", lambda: object())  # a DataLoader worker
    readers.head_start(["/data/a.jsonl", "http://127.0.0.1:1/b.jsonl"], "t", work)  # local first
    readers.head_start([], "t", work)
    assert not readers._HEAD_STARTS
    readers.head_start(["http://127.0.0.1:1/a.jsonl"], "t", work)
    readers.head_start(["s3://bucket/a.jsonl"], "t", work)  # once per process
    _join("head-start-t")
    assert calls == ["head-start-t"]
    assert fresh == [0.5]  # once the first requests were out (or half a second)


def test_a_failing_head_start_is_dropped(fresh, monkeypatch) -> None:
    monkeypatch.setattr(readers, "get_worker_info", lambda: object())
    raised: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))

    def work() -> None:
        raise ImportError("no such decoder")

    readers.head_start(["http://127.0.0.1:1/a.tar"], "boom", work)
    _join("head-start-boom")
    assert raised == []
    assert sorted(readers._HEAD_STARTS) == ["boom"]


def _child_waits(queue) -> None:
    queue.put(pool_module.wait_requested(0))


def test_wait_requested_waits_for_a_read_and_the_fetches_ahead(monkeypatch) -> None:
    monkeypatch.setattr(pool_module, "_reading", threading.Event())
    requests = pool_module.RequestPool(2)
    monkeypatch.setattr(pool_module, "_pool_now", requests)
    assert pool_module.wait_requested(0) is False
    requests.submit((pool_module.PREFETCH, 0), lambda: None).result(timeout=10)
    assert pool_module.wait_requested(0) is False  # a prefetch is not a read
    requests.submit(pool_module.READING, lambda: None).result(timeout=10)
    assert pool_module.wait_requested(0) is True
    requests.asking_for(2)  # two shards scheduled ahead, their parts not yet asked for
    assert pool_module.wait_requested(0.01) is False
    requests.asking_for(-1)
    assert pool_module.wait_requested(0) is False
    threading.Timer(0.05, requests.asking_for, (-1,)).start()
    assert pool_module.wait_requested(10) is True  # the last one asked: no need to wait on
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_waits, args=(queue,))
    child.start()
    assert queue.get(timeout=30) is False  # a forked worker waits for its own first read
    child.join(timeout=30)
    assert child.exitcode == 0


def test_the_preloads_import_what_the_first_batch_needs() -> None:
    from datamodules.imaging import decoding
    from datamodules.stream_engine import columns

    columns.preload()
    assert {"pyarrow.json", "pyarrow.compute"} <= set(sys.modules)
    decoding.preload()
    assert decoding._decoders["jpeg"] is sys.modules["torchcodec.decoders"].decode_jpeg


def test_a_cached_first_shard_is_fetched_as_a_read(tmp_path, monkeypatch) -> None:
    """With ``cache_dir`` the first shard is read once copied: its fetch asks for its parts as
    a read does, so a worker's head start need not wait out its half second."""
    from datamodules.remote.cache import ShardCache
    from datamodules.remote.retrying import RemoteOptions
    from datamodules.shards.index import index_shards
    from tests.counting_http import counting_server

    served = tmp_path / "served"
    served.mkdir()
    for k in range(2):
        (served / f"s{k}.jsonl").write_text("".join(f'{{"id": {k * 5 + i}}}\n' for i in range(5)))
    options = RemoteOptions(backoff=0.01)
    with counting_server(served) as server:
        urls = [f"{server.url}/s{k}.jsonl" for k in range(2)]
        indexes = {i.path: i for i in index_shards(urls, cache_dir=False, options=options)}
        monkeypatch.setattr(pool_module, "_reading", threading.Event())  # (indexing read)
        monkeypatch.setattr(pool_module, "_pool_now", None)
        cache = ShardCache(tmp_path / "cache", None, options)
        reader = readers.ShardReader(indexes, options=options, cache=cache, prefetch_shards=1)
        reader.plan(urls)
        assert pool_module.wait_requested(5) is True
        assert [r["id"] for url in urls for r in reader(url, 0, 5)] == list(range(10))
