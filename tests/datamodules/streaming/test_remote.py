"""Remote shards that survive the network: a flaky HTTP server and a real S3 API, on 127.0.0.1.

The HTTP server answers each shard's first GET with 503, cuts the second body halfway, and
stalls the third beyond the timeout; reads must still deliver every record exactly once,
resumed at the byte offset (Range requests), and count the retries. A 404 fails at once,
naming the URL. The S3 tests run moto's server and read JSONL and Parquet through ``s3://``.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs
from moto import server as moto_server

from datamodules.remote.retrying import RemoteError, RemoteOptions, describe
from datamodules.shards.errors import ShardError
from datamodules.shards.index import index_shard, index_shards
from datamodules.shards.records import read_records
from datamodules.stream_engine.loader import StreamLoader
from datamodules.stream_engine.readers import ShardReader
from datamodules.stream_engine.stream import ShardedStream

N = 3000  # records per shard: a body of ~100 KB, so a cut lands mid-shard
STALL = 1.5  # seconds the stalling answer waits (the reads' timeout is 0.5 s)


def fast_options(**kwargs) -> RemoteOptions:
    """Retries with tiny backoffs and a short timeout, so the tests take well under a second."""
    return RemoteOptions(**{"retries": 5, "timeout": 0.5, "backoff": 0.01, **kwargs})


class FlakyHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files with byte ranges; the 1st GET of a file is a 503, the 2nd is cut halfway,
    the 3rd stalls past the timeout; later GETs are served. Counts every request."""

    gets: Counter
    ranges: list
    schedule = ("503", "cut", "stall")

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        path = self.translate_path(self.path)
        self.gets[self.path] += 1
        n = self.gets[self.path]
        if not Path(path).is_file():
            self.send_error(404, "Not Found")
            return
        data = Path(path).read_bytes()
        start = 0
        header = self.headers.get("Range")
        if header:
            start = int(header.split("=")[1].split("-")[0])
            self.ranges.append((self.path, start))
        body = data[start:]
        action = self.schedule[n - 1] if n <= len(self.schedule) else "serve"
        if action == "503":
            self.send_error(503, "Service Unavailable")
            return
        self.send_response(206 if header else 200)
        self.send_header("Content-Length", str(len(body)))
        if header:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if action == "stall":
            time.sleep(STALL)
        if action == "cut":
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            time.sleep(0.2)  # the client takes in the first half, then the connection drops
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a client gave up
            self.wfile.write(body)


@pytest.fixture
def shard_dir(tmp_path: Path) -> Path:
    root = tmp_path / "shards"
    root.mkdir()
    for k in range(2):
        lines = [json.dumps({"id": k * N + i, "text": "x" * 20}) for i in range(N)]
        (root / f"s{k}.jsonl").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture
def flaky(shard_dir: Path):
    gets: Counter = Counter()
    ranges: list = []
    handler = type("Handler", (FlakyHandler,), {"gets": gets, "ranges": ranges})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(handler, directory=str(shard_dir))
    )
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", gets, ranges
    server.shutdown()
    server.server_close()


def test_a_read_survives_503_a_cut_body_and_a_stall(flaky) -> None:
    base, gets, ranges = flaky
    options = fast_options()
    records = list(read_records(f"{base}/s0.jsonl", options=options))
    assert [r["id"] for r in records] == list(range(N))  # every record once, in order
    assert gets["/s0.jsonl"] == 4  # 503, cut, stall, then served
    assert options.stats.retries == 3 and options.stats.failures == 0
    # After the cut the read resumed where it stopped: a Range request from mid-body.
    assert any(path == "/s0.jsonl" and start > 0 for path, start in ranges)


def test_an_epoch_through_two_workers_is_exactly_once(flaky, shard_dir: Path) -> None:
    base, gets, _ = flaky
    options = fast_options()
    urls = [f"{base}/s0.jsonl", f"{base}/s1.jsonl"]
    indexes = index_shards(urls, cache_dir=False, options=options)
    assert [i.count for i in indexes] == [N, N]
    stream = ShardedStream(
        indexes,
        batch_size=256,
        shuffle=True,
        shuffle_buffer=500,
        reader=ShardReader({i.path: i for i in indexes}, options=options),
    )
    loader = StreamLoader(stream, num_workers=2)
    ids = sorted(r["id"] for batch in loader for r in batch)
    assert ids == list(range(2 * N))
    assert options.stats.retries >= 6  # 3 per shard, counted across the worker processes


def test_a_missing_shard_fails_at_once_naming_the_url(flaky) -> None:
    base, gets, _ = flaky
    options = fast_options()
    with pytest.raises(ShardError, match=r"missing\.jsonl.*404"):
        index_shard(f"{base}/missing.jsonl", cache_dir=False, options=options)
    with pytest.raises(ShardError, match=r"http://127\.0\.0\.1:\d+/missing\.jsonl.*404"):
        list(read_records(f"{base}/missing.jsonl", options=options))
    assert options.stats.retries == 0  # permanent: not retried


def test_retries_give_up_naming_the_url_and_status(flaky) -> None:
    base, gets, _ = flaky
    options = fast_options(retries=0)
    with pytest.raises(ShardError, match=r"s0\.jsonl.*HTTP 503.*gave up after 0 retries"):
        list(read_records(f"{base}/s0.jsonl", options=options))
    assert gets["/s0.jsonl"] == 1 and options.stats.failures == 1


def test_failures_are_classified() -> None:
    class Response(Exception):
        def __init__(self, status: int) -> None:
            super().__init__(f"status {status}")
            self.status = status

    class Throttled(Exception):
        response = {"Error": {"Code": "SlowDown"}}

    assert describe(Response(503))[:2] == (True, 503)
    assert describe(Response(429))[:2] == (True, 429)
    assert describe(Response(403))[:2] == (False, 403)
    assert describe(FileNotFoundError("x"))[:2] == (False, 404)
    assert describe(Throttled())[:2] == (True, "SlowDown")
    assert describe(TimeoutError())[0] is True
    assert describe(ConnectionResetError())[0] is True
    assert describe(ValueError("bad"))[0] is False
    error = RemoteError("http://h/x", 404, "not found (404)")
    assert str(error) == "http://h/x: not found (404)"


def test_a_server_that_is_down_is_retried_and_named_not_a_404() -> None:
    url = f"http://127.0.0.1:{free_port()}/shard.jsonl"  # nothing listens there
    options = fast_options(retries=3)
    with pytest.raises(ShardError, match=r"connection refused.*gave up after 3 retries") as got:
        index_shard(url, cache_dir=False, options=options)
    assert "404" not in str(got.value) and "not found" not in str(got.value)
    assert options.stats.retries == 3 and options.stats.failures == 1


def test_a_server_that_never_answers_is_a_timeout_retried() -> None:
    with socket.socket() as sock:  # accepts connections (the backlog) but never answers
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/shard.jsonl"
        options = fast_options(retries=1, timeout=0.2)
        with pytest.raises(ShardError, match=r"no byte within the timeout.*after 1 retries"):
            index_shard(url, cache_dir=False, options=options)
    assert options.stats.retries == 1 and options.stats.failures == 1


def test_network_failures_wrapped_by_fsspec_are_classified_by_their_cause() -> None:
    import aiohttp

    # fsspec's HTTP info() raises FileNotFoundError from whatever made HEAD and GET fail.
    def wrapped(cause: BaseException) -> FileNotFoundError:
        try:
            raise FileNotFoundError("http://h/x") from cause
        except FileNotFoundError as error:
            return error

    key = aiohttp.client_reqrep.ConnectionKey("h", 80, False, True, None, None, None)
    refused = aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "Connect failed"))
    dns = aiohttp.ClientConnectorDNSError(key, socket.gaierror(-2, "Name or service not known"))
    assert describe(wrapped(refused))[:2] == (True, None)
    assert describe(wrapped(refused))[2].startswith("connection refused")
    assert describe(wrapped(dns))[:2] == (True, None)
    assert describe(wrapped(dns))[2].startswith("host name not resolved (DNS)")
    assert describe(wrapped(aiohttp.ServerTimeoutError("t")))[:2] == (True, None)
    not_found = aiohttp.ClientResponseError(None, (), status=404, message="Not Found")
    assert describe(wrapped(not_found)) == (False, 404, "not found (404)")
    assert describe(not_found) == (False, 404, "not found (404)")
    forbidden = aiohttp.ClientResponseError(None, (), status=403, message="Forbidden")
    assert describe(wrapped(forbidden))[:2] == (False, 403)

    class NoSuchKey(Exception):  # what s3fs wraps in its FileNotFoundError
        response = {"Error": {"Code": "NoSuchKey"}}

    assert describe(wrapped(NoSuchKey())) == (False, 404, "not found (404)")


# ---------------------------------------------------------------------- a real S3 API
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def s3():
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir("shards")
    for k in range(2):
        lines = [json.dumps({"id": k * 500 + i, "tokens": list(range(i % 7))}) for i in range(500)]
        fs.pipe(f"shards/part-{k}.jsonl", ("\n".join(lines) + "\n").encode())
    table = pa.table({"id": list(range(1000, 1800)), "x": [float(i) for i in range(800)]})
    with fs.open("shards/part-2.parquet", "wb") as f:
        pq.write_table(table, f, row_group_size=100)
    yield options
    server.stop()


def test_s3_jsonl_and_parquet_exactly_once_with_two_workers(s3) -> None:
    options = fast_options(storage_options=s3)
    from datamodules.shards.formats import expand_files

    urls = expand_files("s3://shards/part-*", options)
    assert urls == [
        f"s3://shards/part-{k}.{e}" for k, e in ((0, "jsonl"), (1, "jsonl"), (2, "parquet"))
    ]
    indexes = index_shards(urls, cache_dir=False, options=options)
    assert [i.count for i in indexes] == [500, 500, 800]
    stream = ShardedStream(
        indexes,
        batch_size=64,
        shuffle=True,
        shuffle_buffer=100,
        reader=ShardReader({i.path: i for i in indexes}, options=options),
    )
    ids = sorted(r["id"] for batch in StreamLoader(stream, num_workers=2) for r in batch)
    assert ids == list(range(1800))


def test_s3_missing_key_fails_naming_it(s3) -> None:
    options = fast_options(storage_options=s3)
    with pytest.raises(ShardError, match=r"s3://shards/nothing\.jsonl.*404"):
        index_shard("s3://shards/nothing.jsonl", cache_dir=False, options=options)


# ---------------------------------------------------------------------- through the DataModule
def test_the_datamodule_retries_a_503_and_names_a_404(flaky, monkeypatch) -> None:
    base, gets, _ = flaky
    monkeypatch.setattr(FlakyHandler, "schedule", ("503",))  # one 503 per shard
    from datamodules import StreamingDataModule

    urls = [f"{base}/s0.jsonl", f"{base}/s1.jsonl"]
    dm = StreamingDataModule(urls, batch_size=500, num_workers=2, index_cache=False, timeout=5)
    ids = sorted(int(i) for batch in dm.train_dataloader() for i in batch["id"])
    assert ids == list(range(2 * N))
    assert dm.remote.stats.retries >= 2  # each shard's first GET was a 503
    assert f"remote: {dm.remote.stats.retries} retried request(s), 0 failed" in dm.summary()
    missing = StreamingDataModule(f"{base}/nope.jsonl", index_cache=False)
    with pytest.raises(ShardError, match=r"http://127\.0\.0\.1:\d+/nope\.jsonl.*404"):
        missing.setup("fit")


def test_the_datamodule_retries_a_server_that_is_down_and_names_it() -> None:
    from datamodules import StreamingDataModule

    url = f"http://127.0.0.1:{free_port()}/shard.jsonl"  # nothing listens there
    dm = StreamingDataModule(url, retries=1, index_cache=False)
    with pytest.raises(ShardError, match=r"connection refused.*gave up after 1 retries") as got:
        dm.setup("fit")
    assert "404" not in str(got.value)
    assert dm.remote.stats.retries == 1


def test_the_datamodule_reads_s3_with_storage_options(s3) -> None:
    from datamodules import StreamingDataModule

    dm = StreamingDataModule(
        "s3://shards/part-*.jsonl",
        storage_options=s3,
        batch_size=64,
        num_workers=2,
        index_cache=False,
    )
    ids = sorted(int(i) for batch in dm.train_dataloader() for i in batch["id"])
    assert ids == list(range(1000))
