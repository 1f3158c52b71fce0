"""One remote file over concurrent range requests, against HTTP servers on 127.0.0.1.

A ranged server (``bytes=a-b`` answered with 206 and ``Content-Range``) counts the requests
it has open at once, sleeps a little per request so that they overlap, and can fail a given
part (a 503, or a body cut halfway). Python's plain ``http.server`` ignores ``Range`` and
answers 200 with the whole body. Every read must give the file's bytes exactly.
"""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import os
import socket
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

from datamodules.remote import pool as pool_module
from datamodules.remote import ranges, versions
from datamodules.remote.cache import ShardCache
from datamodules.remote.files import open_binary
from datamodules.remote.retrying import RemoteError, RemoteOptions

PART = 64 << 10
SIZE = 10 * PART + 1234  # 11 parts, the last one short


class RangedHandler(http.server.SimpleHTTPRequestHandler):
    """Serves ``bytes=a-b`` ranges; counts requests open at once; fails parts on request."""

    state: dict  # open, most, ranges (list of (path, start, end)), fail ({start: [actions]})
    delay = 0.05

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        state = self.state
        with state["lock"]:
            state["open"] += 1
            state["most"] = max(state["most"], state["open"])
        done = False

        def close() -> None:  # before the last bytes go: a count never above the client's
            nonlocal done
            if not done:
                done = True
                with state["lock"]:
                    state["open"] -= 1

        try:
            self._get(close)
        finally:
            close()

    def _get(self, close) -> None:
        time.sleep(self.delay)
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            close()
            self.send_error(404, "Not Found")
            return
        data = path.read_bytes()
        start, end = 0, len(data) - 1
        header = self.headers.get("Range")
        if header:
            first, last = header.split("=")[1].split("-")
            start, end = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
            if start >= len(data):
                close()
                self.send_error(416, "Range Not Satisfiable")
                return
        with self.state["lock"]:
            self.state["ranges"].append((self.path, start, end + 1))
            actions = self.state["fail"].get(start)
            action = actions.pop(0) if actions else "serve"
        time.sleep(self.state.get("slow", {}).get(start, 0))
        if header and start in state_whole(self.state):  # this once: the whole body
            self.state["whole"].discard(start)
            header, start, end = None, 0, len(data) - 1
        if action == "503":
            close()
            self.send_error(503, "Service Unavailable")
            return
        body = data[start : end + 1]
        self.send_response(206 if header else 200)
        self.send_header("Content-Length", str(len(body)))
        if header:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            if action == "cut":
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                close()
                time.sleep(0.1)
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(body[:-1])
            self.wfile.flush()
            close()
            self.wfile.write(body[-1:])


def state_whole(state: dict) -> set:
    with state["lock"]:
        return set(state.get("whole", ()))


class PlainHandler(http.server.SimpleHTTPRequestHandler):
    """Python's own file server (ignores ``Range``), counting GETs by path."""

    gets: Counter

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.gets[self.path] += 1
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a guess, dropped
            super().do_GET()


class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 64  # the stdlib's 5 drops parallel connections (resent after 1 s)


def _serve(handler: type, root: Path):
    server = Server(("127.0.0.1", 0), partial(handler, directory=root))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def data(tmp_path: Path) -> Path:
    root = tmp_path / "served"
    root.mkdir()
    (root / "blob.bin").write_bytes(os.urandom(SIZE))
    (root / "empty.bin").write_bytes(b"")
    return root


@pytest.fixture
def ranged(data: Path):
    state = {"lock": threading.Lock(), "open": 0, "most": 0, "ranges": [], "fail": {}}
    server, base = _serve(type("Handler", (RangedHandler,), {"state": state}), data)
    yield base, state
    server.shutdown()
    server.server_close()


@pytest.fixture
def plain(data: Path):
    gets: Counter = Counter()
    server, base = _serve(type("Handler", (PlainHandler,), {"gets": gets}), data)
    yield base, gets
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def fresh_pool(monkeypatch):
    """Each test its own pool (its own cap) and no memory of which hosts serve ranges."""
    monkeypatch.setattr(pool_module, "_pool_now", None)
    monkeypatch.setattr(ranges, "_RANGES", set())
    monkeypatch.setattr(ranges, "_NO_RANGES", set())


def options(**kwargs) -> RemoteOptions:
    return RemoteOptions(
        **{"retries": 3, "timeout": 5, "backoff": 0.01, "part_size": PART, **kwargs}
    )


def read_all(url: str, opts: RemoteOptions, offset: int = 0, size: int | None = None) -> bytes:
    with open_binary(url, offset, opts, size) as f:
        out = io.BytesIO()
        while chunk := f.read(50_000):  # reads of another size than the parts
            out.write(chunk)
        return out.getvalue()


def test_bytes_are_the_files_from_any_offset(ranged, data: Path) -> None:
    base, state = ranged
    expected = (data / "blob.bin").read_bytes()
    opts = options(connections=4)
    assert read_all(f"{base}/blob.bin", opts) == expected
    for offset in (1, PART - 1, PART, 5 * PART + 17, SIZE - 1, SIZE):
        assert read_all(f"{base}/blob.bin", opts, offset) == expected[offset:]
    assert read_all(f"{base}/blob.bin", opts, 3, SIZE) == expected[3:]  # size given
    assert read_all(f"{base}/empty.bin", opts) == b""  # 416: nothing to read
    # Every request asked for one part at most.
    assert all(end - start <= PART for _, start, end in state["ranges"])
    assert opts.stats.retries == 0 and opts.stats.failures == 0


def test_parts_are_fetched_concurrently_within_the_cap(ranged, data: Path, tmp_path) -> None:
    base, state = ranged
    opts = options(connections=3)
    expected = (data / "blob.bin").read_bytes()
    assert read_all(f"{base}/blob.bin", opts) == expected
    assert state["most"] == 3  # concurrent, and never more than the cap
    state["most"] = 0
    target = tmp_path / "copy.bin"
    assert ranges.download(f"{base}/blob.bin", str(target), opts, SIZE) == SIZE
    assert target.read_bytes() == expected
    assert state["most"] == 3
    assert pool_module.pool(opts).most == 3  # the process's pool: the cap


def test_the_cap_holds_for_many_files_at_once(ranged, data: Path, tmp_path: Path) -> None:
    base, state = ranged
    for k in range(4):
        (data / f"f{k}.bin").write_bytes(os.urandom(3 * PART))
    opts = options(connections=2)
    readers = [open_binary(f"{base}/f{k}.bin", 0, opts) for k in range(2)]
    copies = [threading.Thread(target=ranges.download, args=(f"{base}/f{k}.bin",
              str(tmp_path / f"c{k}"), opts)) for k in (2, 3)]  # fmt: skip
    for thread in copies:
        thread.start()
    for k, reader in enumerate(readers):
        with reader:
            assert reader.read() == (data / f"f{k}.bin").read_bytes()
    for thread in copies:
        thread.join(timeout=30)
        assert not thread.is_alive()
    for k in (2, 3):
        assert (tmp_path / f"c{k}").read_bytes() == (data / f"f{k}.bin").read_bytes()
    assert state["most"] == 2


def test_the_default_cap_shares_a_node_budget(monkeypatch) -> None:
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert pool_module.connections(RemoteOptions()) == pool_module.MAX_CONNECTIONS
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")
    assert pool_module.connections(RemoteOptions()) == pool_module.NODE_CONNECTIONS // 16
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1000")
    assert pool_module.connections(RemoteOptions()) == 2  # never below 2
    assert pool_module.connections(RemoteOptions(connections=5)) == 5


def test_a_file_is_spread_over_the_connections_in_parts_of_1_to_8_mib() -> None:
    mib, opts = 1 << 20, RemoteOptions()
    assert ranges.part_size(opts, 4 * mib, 8) == mib  # a 4 MB shard: 4 parts
    assert ranges.part_size(opts, 40 * mib, 8) == 5 * mib
    assert ranges.part_size(opts, 4000 * mib, 8) == 8 * mib
    assert ranges.part_size(opts, None, 8) == mib  # the first request, before the size
    assert ranges.part_size(RemoteOptions(part_size=12345), 4000 * mib, 8) == 12345


def test_files_fetched_at_once_share_the_connections(ranged, data: Path, monkeypatch) -> None:
    """Shards scheduled together split the process's connections: each is asked for in
    fewer, larger parts (a request's latency is paid per part); one alone uses them all."""
    from datamodules.remote.cache import Prefetcher

    base, state = ranged
    monkeypatch.setattr(ranges, "MIN_PART", PART)  # parts of 64 KiB steps, as the test's files
    monkeypatch.setattr(ranges, "_CHUNK", PART)
    for k in (2, 3):
        (data / f"blob{k}.bin").write_bytes(os.urandom(SIZE))
    opts = RemoteOptions(retries=3, timeout=5, backoff=0.01, connections=4)
    cache = ShardCache(None, None, opts)
    prefetcher = Prefetcher(cache, 2)
    urls = [f"{base}/blob.bin", f"{base}/blob2.bin"]
    prefetcher.schedule([(url, None, SIZE) for url in urls])  # 2 files: 2 connections each
    for url in urls:
        prefetcher.wait(url)
        name = url.rsplit("/", 1)[1]
        assert Path(cache.entry(url)).read_bytes() == (data / name).read_bytes()
    half = 6 * PART  # ceil(SIZE / 2) in whole steps
    parts = ((0, half), (half, SIZE))
    names = ("blob.bin", "blob2.bin")
    assert sorted(state["ranges"]) == [(f"/{n}", a, b) for n in names for a, b in parts]
    pool = pool_module.pool(opts)
    assert pool.files == 0  # each counted while it was fetched
    state["ranges"].clear()
    prefetcher.schedule([(f"{base}/blob3.bin", None, SIZE)])  # alone: all 4 connections
    prefetcher.wait(f"{base}/blob3.bin")
    quarter = 3 * PART  # ceil(SIZE / 4) in whole steps
    assert sorted(state["ranges"]) == [
        ("/blob3.bin", a, min(a + quarter, SIZE)) for a in range(0, SIZE, quarter)
    ]
    state["ranges"].clear()
    with open_binary(f"{base}/blob.bin", 0, opts, SIZE) as f:  # a shard read while another
        pool.add_file()  # is fetched: each gets half the connections
        assert f.read() == (data / "blob.bin").read_bytes()
        pool.add_file(-1)
    assert sorted(state["ranges"]) == [("/blob.bin", 0, half), ("/blob.bin", half, SIZE)]
    assert pool.files == 0


def test_a_failing_part_is_retried_from_the_byte_it_reached(ranged, data: Path, tmp_path) -> None:
    base, state = ranged
    expected = (data / "blob.bin").read_bytes()
    state["fail"] = {3 * PART: ["503"], 6 * PART: ["cut"]}
    opts = options(connections=4)
    assert read_all(f"{base}/blob.bin", opts) == expected
    assert opts.stats.retries == 2 and opts.stats.failures == 0
    # The cut part was asked again from where its first half ended, up to its own end.
    resumed = [(s, e) for _, s, e in state["ranges"] if 6 * PART < s < 7 * PART]
    assert resumed == [(6 * PART + PART // 2, 7 * PART)]
    # The same in a download into the cache.
    state["fail"] = {2 * PART: ["cut"], 9 * PART: ["503", "503"]}
    opts = options(connections=4)
    cache = ShardCache(tmp_path / "cache", None, opts)
    with cache.open(f"{base}/blob.bin", "v1", SIZE) as local:
        assert Path(local).read_bytes() == expected
    assert opts.stats.retries == 3


def test_a_part_that_keeps_failing_fails_the_read_naming_the_url(ranged, tmp_path) -> None:
    base, state = ranged
    state["fail"] = {4 * PART: ["503"] * 10}
    opts = options(connections=3, retries=1)
    with pytest.raises(RemoteError, match=r"blob\.bin.*503.*gave up after 1 retries"):
        read_all(f"{base}/blob.bin", opts)
    state["fail"] = {4 * PART: ["503"] * 10}
    with pytest.raises(RemoteError, match=r"blob\.bin.*503"):
        ranges.download(f"{base}/blob.bin", str(tmp_path / "x"), opts, SIZE)
    with pytest.raises(RemoteError, match=r"missing\.bin.*404"):
        read_all(f"{base}/missing.bin", opts)


def test_a_server_without_ranges_is_read_over_one_response(plain, data: Path, tmp_path) -> None:
    base, gets = plain
    expected = (data / "blob.bin").read_bytes()
    opts = options(connections=4)
    # The first answer (to a request for the first part) is the whole body: its first part
    # is read, then the rest over one more response, read in the reader's thread.
    assert read_all(f"{base}/blob.bin", opts) == expected
    assert gets["/blob.bin"] == 2
    # Known from then on: one response per read.
    assert read_all(f"{base}/blob.bin", opts, 5 * PART + 3) == expected[5 * PART + 3 :]
    assert ranges.download(f"{base}/blob.bin", str(tmp_path / "copy"), opts, SIZE) == SIZE
    assert (tmp_path / "copy").read_bytes() == expected
    assert gets["/blob.bin"] == 4
    assert read_all(f"{base}/empty.bin", opts) == b""
    (data / "small.bin").write_bytes(b"x" * 1000)  # a file within the first part: one GET
    ranges._NO_RANGES.clear()
    assert read_all(f"{base}/small.bin", opts) == b"x" * 1000
    assert gets["/small.bin"] == 1
    assert pool_module.pool(opts).running == 0  # no pool thread holds a response


def test_parts_asked_before_the_first_answer_are_dropped_without_ranges(
    plain, data: Path, tmp_path: Path
) -> None:
    base, gets = plain
    expected = (data / "blob.bin").read_bytes()
    opts = options(connections=4)
    # The size is known (from an index): the first parts are asked for at once; the plain
    # server answers each with the whole body, the first one is read, the others dropped.
    assert read_all(f"{base}/blob.bin", opts, 0, SIZE) == expected
    assert 1 < gets["/blob.bin"] <= 6  # the first part, the guesses after it, the rest
    ranges._NO_RANGES.clear()
    assert ranges.download(f"{base}/blob.bin", str(tmp_path / "copy"), opts, SIZE) == SIZE
    assert (tmp_path / "copy").read_bytes() == expected
    assert opts.stats.retries == 0 and opts.stats.failures == 0


def test_a_first_answer_that_comes_while_parts_are_asked_for(
    plain, data: Path, tmp_path: Path, monkeypatch
) -> None:
    """The first answer (a 200: no ranges) arrives between two parts being asked for: the
    parts asked before it are guesses (dropped), none is asked after it, and the bytes are
    still the file's in order (once, a reader put a later part's bytes at the offset of a
    dropped one; a download counted the whole body and a part of it twice)."""
    base, gets = plain
    expected = (data / "blob.bin").read_bytes()
    submit = pool_module.RequestPool.submit
    futures: list = []

    def submit_then_answer(self, priority, call):  # the 2nd (then 3rd) waits for the 1st
        future = submit(self, priority, call)
        futures.append(future)
        if len(futures) == 2 + wait_after:
            futures[0].result(timeout=10)
        return future

    monkeypatch.setattr(pool_module.RequestPool, "submit", submit_then_answer)
    opts = options(connections=4)
    wait_after = 0  # ReadAhead: the first part, one guess, then the answer
    assert read_all(f"{base}/blob.bin", opts, 0, SIZE) == expected
    assert len(futures) == 2  # nothing asked for after the 200
    assert gets["/blob.bin"] == 3  # the first part, the dropped guess, the rest in order
    ranges._NO_RANGES.clear()
    futures.clear()
    wait_after = -1  # download: the first part (the whole body) answered before the next
    assert ranges.download(f"{base}/blob.bin", str(tmp_path / "copy"), opts, SIZE) == SIZE
    assert (tmp_path / "copy").read_bytes() == expected
    assert len(futures) == 1 and gets["/blob.bin"] == 4


def test_a_shard_rewritten_since_its_index_is_named_by_every_range_reader(
    ranged, plain, data: Path, tmp_path: Path
) -> None:
    """Each response is checked against the version registered for the URL (its total size
    from Content-Range, or a 200's length): reads and downloads, ranged server or not."""
    opts = options(connections=4)
    for base in (ranged[0], plain[0]):
        url = f"{base}/blob.bin"
        versions.expect(url, versions.Expected(SIZE + 1))  # indexed one byte longer
        try:
            for size in (None, SIZE + 1):
                with pytest.raises(versions.ShardChanged, match=rf"size {SIZE + 1} -> {SIZE}"):
                    read_all(url, opts, 0, size)
                with pytest.raises(versions.ShardChanged, match=rf"size {SIZE + 1} -> {SIZE}"):
                    ranges.download(url, str(tmp_path / "copy"), opts, size)
            versions.expect(url, versions.Expected(SIZE))  # the version indexed: read
            assert read_all(url, opts, 0, SIZE) == (data / "blob.bin").read_bytes()
        finally:
            versions.expect(url, None)
    assert opts.stats.retries == 0  # a changed shard is not retried


def test_guesses_answered_200_by_a_ranged_server_are_asked_again(ranged, data: Path) -> None:
    base, state = ranged
    # The 4 parts asked for with the first (a cap of 4: 5 parts requested) are answered 200,
    # the whole body, before the first part's 206.
    state["whole"] = {k * PART for k in range(1, 5)}
    state["slow"] = {0: 0.5}
    expected = (data / "blob.bin").read_bytes()
    opts = options(connections=4)
    assert read_all(f"{base}/blob.bin", opts, 0, SIZE) == expected
    starts = [s for _, s, _ in state["ranges"]]
    assert [starts.count(k * PART) for k in range(6)] == [1, 2, 2, 2, 2, 1]  # asked again


def test_closing_early_stops_the_parts(ranged, data: Path) -> None:
    base, state = ranged
    opts = options(connections=2)
    with open_binary(f"{base}/blob.bin", 0, opts) as f:
        assert f.read(10) == (data / "blob.bin").read_bytes()[:10]
    pool = pool_module.pool(opts)
    deadline = time.monotonic() + 10
    while (pool.running or not pool.tasks.empty()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pool.running == 0
    assert len(state["ranges"]) <= 3  # the parts in flight, no more


def test_an_epoch_over_ranged_shards_is_exactly_once(ranged, data: Path) -> None:
    from datamodules import StreamingDataModule

    base, state = ranged
    for k in range(3):  # shards of several parts each
        lines = [json.dumps({"id": k * 1000 + i, "pad": "z" * 100}) for i in range(1000)]
        (data / f"s{k}.jsonl").write_text("\n".join(lines) + "\n")
    dm = StreamingDataModule(
        [f"{base}/s{k}.jsonl" for k in range(3)],
        batch_size=100,
        num_workers=2,
        shuffle_buffer=300,
        index_cache=False,
        prefetch_shards=1,
    )
    dm.remote = RemoteOptions(part_size=16 << 10, connections=3, backoff=0.01)
    ids = sorted(int(i) for batch in dm.train_dataloader() for i in batch["id"])
    assert ids == list(range(3000))
    assert state["most"] > 1  # parts in parallel
