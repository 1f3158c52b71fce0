"""Setup at scale: what ``StreamingDataModule.setup("fit")`` reads before training starts.

Data: ``--shards`` (100) tar shards written by ``write_shards`` (``--records`` records of about
``--record-bytes`` each per shard: 53 MB by default) and their ``shard.index.json``.

Server: a ``ThreadingHTTPServer`` on 127.0.0.1 that serves byte ranges, ETags and conditional
GETs, waits ``--latency`` (20 ms) before every answer, sends at most ``--bandwidth`` (50 MB/s)
per connection, and counts the requests and body bytes it serves.

Each case is a fresh process (so nothing is remembered in memory) calling
``StreamingDataModule(train_files=...).setup("fit")``; the server's counts are the figures:

* ``no index, cold`` / ``warm``: the shard URLs, with an empty index cache, then again with the
  cache the first run filled;
* ``index, cold`` / ``warm``: the URL of ``shard.index.json``, then again (a conditional GET);
* ``2-process DDP, no index``: two processes in one gloo group with separate index caches (two
  nodes sharing no disk), each shard scanned by one of them;
* time to the first batch (setup + the first batch of the train loader, 0 workers), with and
  without the index, cold;
* a simulated index of ``--sim-shards`` (1,000,000) shards as ``write_shards`` would write it
  (at that count its seek offsets are left out by the index's budget), read by ``setup`` on one
  rank: wall and CPU seconds and the memory it adds (peak RSS after setup minus RSS before).

The bars of issue 27 are checked at the end (``ok`` / ``MISSED``).

Run: ``python benchmarks/bench_setup.py [--shards 100] [--sim-shards 1000000]``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import logging
import os
import platform
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

logging.getLogger("datamodules").setLevel(logging.WARNING)  # no summary per loader


class CountingHandler(http.server.SimpleHTTPRequestHandler):
    """Byte ranges, ETags, 304s, a latency per answer, a per-connection rate; counts."""

    latency = 0.02
    bandwidth = 50e6
    counts: Counter
    lock: threading.Lock

    def log_message(self, *args: Any) -> None:
        pass

    def _note(self, sent: int) -> None:
        with self.lock:
            self.counts["requests"] += 1
            self.counts["bytes"] += sent

    def _validators(self, path: Path) -> dict[str, str]:
        st = path.stat()
        return {
            "ETag": f'"{st.st_size:x}-{st.st_mtime_ns:x}"',
            "Last-Modified": self.date_time_string(int(st.st_mtime)),
        }

    def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
        time.sleep(self.latency)
        path = Path(self.translate_path(self.path))
        self._note(0)
        if not path.is_file():
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(path.stat().st_size))
        for key, value in self._validators(path).items():
            self.send_header(key, value)
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        time.sleep(self.latency)
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self._note(0)
            self.send_error(404)
            return
        validators = self._validators(path)
        if self.headers.get("If-None-Match") == validators["ETag"]:
            self._note(0)
            self.send_response(304)
            self.end_headers()
            return
        data = path.read_bytes()
        start, header = 0, self.headers.get("Range")
        if header:
            start = int(header.split("=")[1].split("-")[0])
        body = memoryview(data)[start:]
        self.send_response(206 if header else 200)
        self.send_header("Content-Length", str(len(body)))
        if header:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        for key, value in validators.items():
            self.send_header(key, value)
        self.end_headers()
        sent, began, chunk = 0, time.perf_counter(), 64 * 1024
        try:
            for at in range(0, len(body), chunk):
                self.wfile.write(body[at : at + chunk])
                sent += len(body[at : at + chunk])
                ahead = (at + chunk) / self.bandwidth - (time.perf_counter() - began)
                if ahead > 0:
                    time.sleep(ahead)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            self._note(sent)


def serve(root: Path, latency: float, bandwidth: float) -> tuple[Any, str, Counter]:
    counts: Counter = Counter()
    attrs = {"latency": latency, "bandwidth": bandwidth, "counts": counts,
             "lock": threading.Lock()}  # fmt: skip
    handler = type("Handler", (CountingHandler,), attrs)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=root))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}", counts


# ---------------------------------------------------------------------------- child processes


def rss_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One case in this (fresh) process: setup, optionally the first batch."""
    if spec.get("world", 1) > 1:
        from datetime import timedelta

        import torch.distributed as dist

        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{spec['port']}", rank=spec["rank"],
            world_size=spec["world"], timeout=timedelta(seconds=300),
        )  # fmt: skip
    from datamodules import StreamingDataModule

    before = rss_now()
    wall, cpu = time.perf_counter(), time.process_time()
    dm = StreamingDataModule(
        spec["files"], batch_size=32, num_workers=0, index_cache=spec["cache"],
        prefetch_shards=0, shuffle_buffer=256,
    )  # fmt: skip
    dm.setup("fit")
    out = {
        "setup_s": time.perf_counter() - wall,
        "setup_cpu_s": time.process_time() - cpu,
        "added_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before,
        "records": dm.split_size("train"),
    }
    if spec.get("first_batch"):
        next(iter(dm.train_dataloader()))
        out["first_batch_s"] = time.perf_counter() - wall
    if spec.get("world", 1) > 1:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    return out


def run_children(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", json.dumps(s)], stdout=subprocess.PIPE, text=True
        )  # fmt: skip
        for s in specs
    ]
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=1800)
        if proc.returncode:
            raise RuntimeError(f"a case failed (exit {proc.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------- data


def write_data(root: Path, shards: int, records: int, record_bytes: int) -> int:
    from datamodules.streaming import write_shards

    def gen():
        rng = __import__("random").Random(0)
        for i in range(shards * records):
            yield {"__key__": f"r{i:08d}", "jpg": rng.randbytes(record_bytes), "cls": i % 10}

    paths = write_shards(gen(), root, max_records=records)
    return sum(os.path.getsize(p) for p in paths)


def simulated_index(path: Path, shards: int) -> None:
    """An index of ``shards`` tar shards as write_shards writes one that large (checked against
    ``dataset_index_json`` on a small one)."""
    from datamodules.shards.dataset_index import SEEK_BUDGET, dataset_index_json
    from datamodules.shards.shard_index import ShardIndex

    assert SEEK_BUDGET // shards < 2, "the simulation assumes no seek offsets fit"
    probe = [ShardIndex(f"/d/train-{k:06d}.tar", "tar", None, "raise", 1000, size=256 << 20)
             for k in range(3)]  # fmt: skip
    expected = dataset_index_json(probe, "/d/train.index.json", "train")
    expected["shardlist"] = [{k: v for k, v in e.items() if k not in ("every", "offsets")}
                             for e in expected["shardlist"]]  # fmt: skip
    with open(path, "w") as f:
        head = {k: v for k, v in expected.items() if k != "shardlist"}
        head["datamodules"] = {"version": 1, "records": 1000 * shards}
        f.write(json.dumps(head)[:-1] + ', "shardlist": [')
        for k in range(shards):
            sep = "," if k else ""
            f.write(f'{sep}{{"url":"train-{k:07d}.tar","nsamples":1000,"filesize":{256 << 20}}}')
        f.write("]}\n")
    assert set(expected["shardlist"][0]) == {"url", "nsamples", "filesize"}


# ---------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, default=100)
    parser.add_argument("--records", type=int, default=100, help="records per shard")
    parser.add_argument("--record-bytes", type=int, default=5000)
    parser.add_argument("--latency", type=float, default=0.02, help="seconds per request")
    parser.add_argument("--bandwidth", type=float, default=50e6, help="bytes/s per connection")
    parser.add_argument("--sim-shards", type=int, default=1_000_000)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(json.loads(args.child))))
        return
    import torch

    root = Path(tempfile.mkdtemp(prefix="bench-setup-"))
    try:
        served = root / "served"
        size = write_data(served, args.shards, args.records, args.record_bytes)
        server, base, counts = serve(served, args.latency, args.bandwidth)
        urls = [f"{base}/shard-{k:06d}.tar" for k in range(args.shards)]
        index_url = f"{base}/shard.index.json"
        print(f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
              f"torch {torch.__version__}")  # fmt: skip
        print(f"{args.shards} tar shards, {size / 1e6:.1f} MB, {args.latency * 1e3:.0f} ms a "
              f"request, {args.bandwidth / 1e6:.0f} MB/s a connection\n")  # fmt: skip
        rows: dict[str, dict[str, Any]] = {}

        def case(name: str, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
            counts.clear()
            results = run_children(specs)
            rows[name] = {"bytes": counts["bytes"], "requests": counts["requests"],
                          "results": results}  # fmt: skip
            return results

        cache = str(root / "cache-plain")
        case("no index, cold", [{"files": urls, "cache": cache}])
        case("no index, warm", [{"files": urls, "cache": cache}])
        cache = str(root / "cache-index")
        case("index, cold", [{"files": index_url, "cache": cache}])
        case("index, warm", [{"files": index_url, "cache": cache}])
        port = free_port()
        case("2-process DDP, no index", [
            {"files": urls, "cache": str(root / f"ddp-{r}"), "world": 2, "rank": r, "port": port}
            for r in range(2)
        ])  # fmt: skip
        port = free_port()
        case("2-process DDP, index", [
            {"files": index_url, "cache": str(root / f"ddpi-{r}"), "world": 2, "rank": r,
             "port": port} for r in range(2)
        ])  # fmt: skip
        first = {}
        for name, files in (("no index", urls), ("index", index_url)):
            (result,) = case(f"first batch, {name}", [
                {"files": files, "cache": str(root / f"fb-{name}"), "first_batch": True}
            ])  # fmt: skip
            first[name] = result["first_batch_s"]
        server.shutdown()

        print(f"{'case':<26} {'bytes read':>14} {'x dataset':>10} {'requests':>9} {'setup s':>8}")
        for name, row in rows.items():
            took = max(r["setup_s"] for r in row["results"])
            print(f"{name:<26} {row['bytes']:>14,} {row['bytes'] / size:>10.4f} "
                  f"{row['requests']:>9} {took:>8.2f}")  # fmt: skip
        print(
            f"\ntime to the first batch: no index {first['no index']:.2f} s, "
            f"index {first['index']:.2f} s ({first['no index'] / first['index']:.1f}x)"
        )

        sim = root / "million.index.json"
        simulated_index(sim, args.sim_shards)
        (result,) = run_children([{"files": str(sim), "cache": str(root / "sim")}])
        print(
            f"\nsimulated index of {args.sim_shards:,} shards "
            f"({sim.stat().st_size / 1e6:.0f} MB): setup {result['setup_s']:.2f} s wall, "
            f"{result['setup_cpu_s']:.2f} s CPU, +{result['added_bytes'] / 2**20:.0f} MiB"
        )

        bars = [
            ("index: setup reads <= 1% of the bytes",
             rows["index, cold"]["bytes"] <= 0.01 * size),
            ("index: setup makes <= 10 requests", rows["index, cold"]["requests"] <= 10),
            ("warm setup makes <= 10 requests (index)", rows["index, warm"]["requests"] <= 10),
            ("warm setup makes <= 10 requests (no index)",
             rows["no index, warm"]["requests"] <= 10),
            ("2 DDP processes, separate caches: <= 1.1x the dataset",
             rows["2-process DDP, no index"]["bytes"] <= 1.1 * size),
            (f"{args.sim_shards:,}-shard index: setup <= 5 s", result["setup_s"] <= 5),
            (f"{args.sim_shards:,}-shard index: setup <= 1 GB",
             result["added_bytes"] <= 1e9),
        ]  # fmt: skip
        print()
        for name, ok in bars:
            print(f"  {'ok' if ok else 'MISSED':<7} {name}")
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(root)


if __name__ == "__main__":
    main()
