"""Streaming remote shards: prefetch and the local cache against local disk, in the same run.

Data: the 100k-record JSONL shards of ``benchmarks/bench_streaming.py`` (16 shards, records
``{"id", "tokens"}`` with lognormal lengths), written to a temporary directory.

Server: a ``ThreadingHTTPServer`` on 127.0.0.1 that serves byte ranges, waits ``--latency``
(100 ms) before every response and sends at most ``--bandwidth`` (20 MB/s) per connection,
which is what object storage looks like from one machine.

Each figure is one full epoch of ``StreamingDataModule(...).train_dataloader()`` with 2
workers, batch 64, a 10,000-record shuffle buffer and the default collate (worker start
included; every record checked to arrive exactly once), the median over ``--repeats``:

* ``local disk``: the shards as local files (the baseline);
* ``remote, no prefetch``: the URLs read in place (``prefetch_shards=0``);
* ``remote, prefetch``: the URLs with ``prefetch_shards`` (default 1) and no cache: the first
  epoch of a run;
* ``remote, from cache``: with ``cache_dir``, the second epoch (the first fills the cache).

Each row also gives the median seconds from the loader's ``iter`` to its first batch.

Run: ``python benchmarks/bench_remote.py [--records 100000] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import http.server
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_streaming import write_jsonl  # noqa: E402

from datamodules import StreamingDataModule  # noqa: E402

logging.getLogger("datamodules").setLevel(logging.WARNING)  # no summary per loader

BATCH, WORKERS, BUFFER = 64, 2, 10_000


class SlowHandler(http.server.SimpleHTTPRequestHandler):
    """Byte ranges (``bytes=a-b``, ``bytes=a-``), a fixed latency before each response, and a
    per-connection rate limit."""

    latency = 0.1
    bandwidth = 20e6

    def log_message(self, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:  # noqa: N802
        time.sleep(self.latency)
        super().do_HEAD()

    def do_GET(self) -> None:  # noqa: N802
        time.sleep(self.latency)
        path = Path(self.translate_path(self.path))
        size = path.stat().st_size
        start, stop = 0, size
        header = self.headers.get("Range")
        if header:  # bytes=a-b or bytes=a-
            first, last = header.split("=")[1].split("-")
            start, stop = int(first), min(int(last) + 1 if last else size, size)
            if start >= size:
                self.send_error(416, "Range Not Satisfiable")
                return
        with open(path, "rb") as f:  # only the bytes asked for
            f.seek(start)
            body = memoryview(f.read(stop - start))
        self.send_response(206 if header else 200)
        self.send_header("Content-Length", str(len(body)))
        if header:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        self.send_header("Last-Modified", self.date_time_string(int(path.stat().st_mtime)))
        self.end_headers()
        chunk = 64 * 1024
        began = time.perf_counter()
        try:
            for at in range(0, len(body), chunk):
                self.wfile.write(body[at : at + chunk])
                ahead = (at + chunk) / self.bandwidth - (time.perf_counter() - began)
                if ahead > 0:
                    time.sleep(ahead)
        except (BrokenPipeError, ConnectionResetError):  # the client went away
            return


class Server(http.server.ThreadingHTTPServer):
    """A threaded server that accepts many connections at once, as object storage does (the
    stdlib's backlog of 5 drops the rest, and a dropped SYN waits a second to be resent)."""

    request_queue_size = 256


def serve(root: Path, latency: float, bandwidth: float) -> tuple[Any, str]:
    handler = type("Handler", (SlowHandler,), {"latency": latency, "bandwidth": bandwidth})
    server = Server(("127.0.0.1", 0), partial(handler, directory=root))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def epoch(dm: StreamingDataModule, n: int) -> tuple[float, float]:
    """One full epoch of the train loader; checks every id once; returns records/s and the
    seconds to the first batch."""
    loader = dm.train_dataloader()
    began = time.perf_counter()
    first = None
    ids = []
    for batch in loader:
        if first is None:
            first = time.perf_counter() - began
        ids.extend(int(i) for i in batch["id"])
    elapsed = time.perf_counter() - began
    if sorted(ids) != list(range(n)):
        raise AssertionError("records lost or repeated")
    return n / elapsed, first or 0.0


def make(paths: list[str], **kwargs: Any) -> StreamingDataModule:
    return StreamingDataModule(
        paths,
        batch_size=BATCH,
        num_workers=WORKERS,
        shuffle_buffer=BUFFER,
        persistent_workers=False,
        index_cache=False,
        **kwargs,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per request")
    parser.add_argument("--bandwidth", type=float, default=20e6, help="bytes/s per connection")
    parser.add_argument("--prefetch", type=int, default=1, help="prefetch_shards")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-remote-"))
    try:
        local = write_jsonl(root, args.records)
        server, base = serve(root, args.latency, args.bandwidth)
        urls = [f"{base}/{Path(p).relative_to(root).as_posix()}" for p in local]
        size = sum(os.path.getsize(p) for p in local)
        rates: dict[str, list[float]] = {}
        firsts: dict[str, list[float]] = {}

        def record(name: str, result: tuple[float, float]) -> None:
            rates.setdefault(name, []).append(result[0])
            firsts.setdefault(name, []).append(result[1])

        for _ in range(args.repeats):
            cache = root / "cache"
            shutil.rmtree(cache, ignore_errors=True)
            runs = {
                "local disk": (local, {}),
                "remote, no prefetch": (urls, {"prefetch_shards": 0}),
                "remote, prefetch (first epoch)": (urls, {"prefetch_shards": args.prefetch}),
            }
            for name, (paths, kwargs) in runs.items():
                record(name, epoch(make(paths, **kwargs), args.records))
            cached = make(urls, prefetch_shards=args.prefetch, cache_dir=str(cache))
            epoch(cached, args.records)  # fills the cache
            record("remote, from cache (second epoch)", epoch(cached, args.records))
        server.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    base_rate = statistics.median(rates["local disk"])
    print(
        f"{args.records:,} records in 16 JSONL shards ({size / 1e6:.1f} MB), {WORKERS} workers, "
        f"batch {BATCH}; server: {args.latency * 1000:.0f} ms per request, "
        f"{args.bandwidth / 1e6:.0f} MB/s per connection; median of {args.repeats}"
    )
    cpus, python = os.cpu_count(), platform.python_version()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {platform.machine()}, {cpus} CPUs, Python {python}; load average {load}")
    print(f"{'loader':<36}{'records/s':>12}{'vs local disk':>16}{'first batch':>14}")
    for name, values in rates.items():
        rate, first = statistics.median(values), statistics.median(firsts[name])
        print(f"{name:<36}{rate:>12,.0f}{rate / base_rate:>15.2f}x{first:>13.2f}s")


if __name__ == "__main__":
    main()
