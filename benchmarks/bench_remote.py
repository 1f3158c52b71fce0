"""Streaming remote shards: every epoch from the server, or the first into a cache, against
local disk, side by side in the same run.

Data: the 100k-record JSONL shards of ``benchmarks/bench_streaming.py`` (16 shards, records
``{"id", "tokens"}`` with lognormal lengths), written to a temporary directory.

Server: a ``ThreadingHTTPServer`` on 127.0.0.1 that serves byte ranges, waits ``--latency``
(100 ms) before every response and sends at most ``--bandwidth`` (20 MB/s) per connection,
which is what object storage looks like from one machine. It runs in a process of its own
(``--in-process``: in the benchmark's, as before: its threads then stall while the loader's
process forks its workers or holds the interpreter, which a real store does not) and counts
the requests in flight (from a request's arrival to its last byte sent) over time.

Three DataModules stay alive side by side, ``StreamingDataModule(...)`` with 2 workers, batch
64, a 10,000-record shuffle buffer and the default collate, and their epochs alternate (which
one goes first rotates each epoch):

* ``local``: the shards as local files (the baseline);
* ``remote``: the URLs, no cache: every epoch reads from the server (the next shards fetched
  ahead into a private folder, ``prefetch_shards``, default 1);
* ``remote, cache_dir``: the URLs with a ``cache_dir`` made empty at each run's start: its
  first epoch reads from the server into the cache, the later ones read the copies.

An epoch is one full pass of a fresh ``train_dataloader()`` (worker start included; every
record checked to arrive exactly once). Per epoch of a run the benchmark prints records/s,
each remote mode's ratio to the local epoch of the same round, and the requests in flight
during it (the most at once, and the mean), and the milliseconds from ``iter`` to the
epoch's first request at the server, its first response, the first batch and the end, and
the CPU seconds each epoch took in the benchmark's process and its workers and, beside them,
in the server's process (on a machine whose cores the loader's workers keep busy, the
server's and the network reads' CPU is what a remote epoch pays beyond a local one); then
the median ratio per epoch over
``--runs`` runs, and, for the first epoch of the last run, the requests in flight per 100 ms.

Run: ``python benchmarks/bench_remote.py [--records 100000] [--runs 3] [--epochs 3]
[--prefetch 1] [--in-process]``.
"""

from __future__ import annotations

import argparse
import http.server
import logging
import multiprocessing
import os
import platform
import resource
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
    flight: InFlight | None = None

    def log_message(self, *args: Any) -> None:
        pass

    def handle_one_request(self) -> None:
        flight = self.flight
        # A kept-alive connection waits here for its next request: counted once it arrives.
        if flight is None or not self.rfile.peek(1):
            super().handle_one_request()
            return
        flight.change(+1)
        try:
            super().handle_one_request()
        finally:
            flight.change(-1)

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
        if self.flight is not None:
            self.flight.first_byte()
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


class InFlight:
    """Requests in flight at the server over time: ``(seconds, count)`` at every change."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.began = time.perf_counter()
        self.changes: list[tuple[float, int]] = []
        self.arrivals: list[float] = []  # when each request arrived (perf_counter)
        self.bytes_from: list[float] = []  # when each GET's headers were sent (perf_counter)

    def first_byte(self) -> None:
        with self.lock:
            self.bytes_from.append(time.perf_counter())

    def starts(self, start: float, stop: float) -> tuple[float | None, float | None]:
        """Seconds from ``start`` to the first request's arrival and to the first response's
        headers within ``[start, stop)`` (None: none)."""
        with self.lock:
            arrived = [t for t in self.arrivals if start <= t < stop]
            answered = [t for t in self.bytes_from if start <= t < stop]
        return tuple(times[0] - start if times else None for times in (arrived, answered))

    def change(self, step: int) -> None:
        with self.lock:
            self.now += step
            if step > 0:
                self.arrivals.append(time.perf_counter())
            self.changes.append((time.perf_counter() - self.began, self.now))

    def window(self, start: float, stop: float) -> list[tuple[float, int]]:
        """The changes within ``[start, stop)`` (perf_counter seconds), the count at
        ``start`` first."""
        a, b = start - self.began, stop - self.began
        with self.lock:
            changes = list(self.changes)
        before = [c for t, c in changes if t < a]
        return [(a, before[-1] if before else 0)] + [(t, c) for t, c in changes if a <= t < b]


class ServedFlight(InFlight):
    """The counts of a server in another process (:func:`serve_process`), copied here by
    :meth:`refresh` (``perf_counter`` is the system's monotonic clock: the same in both)."""

    def __init__(self, conn: Any, began: float) -> None:
        super().__init__()
        self.conn, self.began = conn, began

    def refresh(self) -> None:
        self.conn.send("counts")
        changes, arrivals, bytes_from = self.conn.recv()
        with self.lock:
            self.changes, self.arrivals, self.bytes_from = changes, arrivals, bytes_from


def serve_process(root: Path, latency: float, bandwidth: float, conn: Any) -> None:
    """Serves ``root`` (:func:`serve`) until told to stop; sends its counts when asked."""
    flight = InFlight()
    server, base = serve(root, latency, bandwidth, flight)
    conn.send((base, flight.began))
    while conn.recv() == "counts":
        with flight.lock:
            conn.send((list(flight.changes), list(flight.arrivals), list(flight.bytes_from)))
    server.shutdown()


def in_flight(changes: list[tuple[float, int]], stop: float, step: float | None = None) -> Any:
    """The most requests in flight at once and the time-weighted mean over ``changes`` up to
    ``stop`` (seconds as in the changes); with ``step``, the mean per step instead."""
    t0 = changes[0][0]
    edges = [t for t, _ in changes[1:]] + [stop]
    spans = [(t, e, c) for (t, c), e in zip(changes, edges, strict=True)]
    if step is None:
        total = sum((e - t) * c for t, e, c in spans)
        return max(c for _, _, c in spans), total / max(stop - t0, 1e-9)
    out = []
    for k in range(int((stop - t0) / step) + 1):
        lo, hi = t0 + k * step, t0 + (k + 1) * step
        out.append(sum(max(0.0, min(e, hi) - max(t, lo)) * c for t, e, c in spans) / step)
    return out


class Server(http.server.ThreadingHTTPServer):
    """A threaded server that accepts many connections at once, as object storage does (the
    stdlib's backlog of 5 drops the rest, and a dropped SYN waits a second to be resent)."""

    request_queue_size = 256


def serve(
    root: Path, latency: float, bandwidth: float, flight: InFlight | None = None
) -> tuple[Any, str]:
    handler = type(
        "Handler", (SlowHandler,), {"latency": latency, "bandwidth": bandwidth, "flight": flight}
    )
    server = Server(("127.0.0.1", 0), partial(handler, directory=root))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have ended (the workers of the
    loaders that have finished)."""
    own, ended = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + ended.ru_utime + ended.ru_stime


def process_cpu_seconds(pid: int) -> float | None:
    """CPU seconds of a running process (Linux ``/proc``; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def epoch(dm: StreamingDataModule, n: int) -> tuple[float, float, float, float, float]:
    """One full epoch of a fresh train loader; checks every id once; returns records/s, the
    epoch's start and end (perf_counter seconds), when its first batch came, and the CPU
    seconds it took in this process and its workers."""
    cpu = cpu_seconds()
    loader = dm.train_dataloader()
    began = time.perf_counter()
    ids, first = [], None
    for batch in loader:
        if first is None:
            first = time.perf_counter()
        ids.extend(batch["id"].tolist())
    ended = time.perf_counter()
    del loader  # its workers end (and are counted) now
    if sorted(ids) != list(range(n)):
        raise AssertionError("records lost or repeated")
    return n / (ended - began), began, ended, first or ended, cpu_seconds() - cpu


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


MODES = ("local", "remote", "remote, cache_dir")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per request")
    parser.add_argument("--bandwidth", type=float, default=20e6, help="bytes/s per connection")
    parser.add_argument("--prefetch", type=int, default=1, help="prefetch_shards")
    parser.add_argument(
        "--in-process", action="store_true", help="the server in the benchmark's process"
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-remote-"))
    flight: InFlight = InFlight()
    ratios: dict[tuple[str, int], list[float]] = {}
    load_before = os.getloadavg()[0]
    try:
        local = write_jsonl(root / "shards", args.records)
        if args.in_process:
            server, base = serve(root / "shards", args.latency, args.bandwidth, flight)
        else:
            conn, there = multiprocessing.Pipe()
            served = multiprocessing.get_context("spawn").Process(
                target=serve_process,
                args=(root / "shards", args.latency, args.bandwidth, there),
                daemon=True,
            )
            served.start()
            base, began = conn.recv()
            flight = ServedFlight(conn, began)
        urls = [f"{base}/{Path(p).name}" for p in local]
        size = sum(os.path.getsize(p) for p in local)
        print(
            f"{args.records:,} records in {len(local)} JSONL shards ({size / 1e6:.1f} MB), "
            f"{WORKERS} workers, batch {BATCH}; server: {args.latency * 1000:.0f} ms per "
            f"request, {args.bandwidth / 1e6:.0f} MB/s per connection "
            f"({'in this process' if args.in_process else 'its own process'}); "
            f"prefetch_shards={args.prefetch}"
        )
        cpus, python = os.cpu_count(), platform.python_version()
        print(f"machine: {platform.machine()}, {cpus} CPUs, Python {python}")
        timeline: dict[str, list[float]] = {}
        for run in range(args.runs):
            cache = root / f"cache-{run}"
            dms = {
                "local": make(local),
                "remote": make(urls, prefetch_shards=args.prefetch),
                "remote, cache_dir": make(
                    urls, prefetch_shards=args.prefetch, cache_dir=str(cache)
                ),
            }
            print(f"\nrun {run + 1}, load average {os.getloadavg()[0]:.1f}")
            print(f"{'epoch':<7}" + "".join(f"{m:>20}" for m in MODES) + "  in flight: most / mean")
            for e in range(args.epochs):
                order = MODES[e % 3 :] + MODES[: e % 3]
                results, server_cpu = {}, {}
                for m in order:
                    before = None if args.in_process else process_cpu_seconds(served.pid)
                    results[m] = epoch(dms[m], args.records)
                    after = None if args.in_process else process_cpu_seconds(served.pid)
                    server_cpu[m] = None if before is None or after is None else after - before
                if isinstance(flight, ServedFlight):
                    flight.refresh()
                cells, notes, starts, cpus = [], [], [], []
                for m in MODES:
                    rate, began, ended, first, cpu = results[m]
                    server = "" if server_cpu[m] is None else f" + server {server_cpu[m]:.2f}"
                    cpus.append(f"{m}: {cpu:.2f}{server}")
                    request, answer = flight.starts(began, ended)
                    starts.append(
                        f"{m}: " + "/".join(
                            "-" if t is None else f"{t * 1000:.0f}"
                            for t in (request, answer, first - began, ended - began)
                        )
                    )  # fmt: skip
                    if m == "local":
                        cells.append(f"{rate:>20,.0f}")
                        continue
                    ratio = rate / results["local"][0]
                    ratios.setdefault((m, e), []).append(ratio)
                    cells.append(f"{f'{rate:,.0f} ({ratio:.2f}x)':>20}")
                    most, mean = in_flight(flight.window(began, ended), ended - flight.began)
                    notes.append(f"{most} / {mean:.1f}")
                    if run == args.runs - 1 and e == 0:
                        window = flight.window(began, ended)
                        timeline[m] = in_flight(window, ended - flight.began, 0.1)
                print(f"{e:<7}" + "".join(cells) + "  " + ", ".join(notes))
                print(
                    f"{'':<7}ms to first request/first response/first batch/end: "
                    + ", ".join(starts)
                )
                print(
                    f"{'':<7}CPU s (this process and its workers + the server): " + ", ".join(cpus)
                )
        if args.in_process:
            server.shutdown()
        else:
            conn.send("stop")
            served.join(10)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\nmedian over {args.runs} runs, vs the local epoch of the same round")
    print(f"{'epoch':<7}" + "".join(f"{m:>20}" for m in MODES[1:]))
    for e in range(args.epochs):
        row = "".join(f"{statistics.median(ratios[(m, e)]):>19.2f}x" for m in MODES[1:])
        print(f"{e:<7}{row}")
    print("\nrequests in flight per 100 ms, epoch 0 of the last run (mean over each 100 ms)")
    for m, counts in timeline.items():
        print(f"{m:<18} " + " ".join(f"{c:.0f}" for c in counts))
    after = os.getloadavg()
    print(f"load average before {load_before:.1f}, after {after[0]:.1f} (5 min {after[1]:.1f})")


if __name__ == "__main__":
    main()
