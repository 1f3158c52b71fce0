"""A real HTTP server on 127.0.0.1 that serves a folder as object storage does, and counts.

It serves byte ranges (``206`` with ``Content-Range``), an ``ETag`` and ``Last-Modified`` per
file (from its size and modification time), answers a matching ``If-None-Match`` with ``304``,
and counts every request per (method, path) and every body byte sent; ``log`` holds each GET
with its ``Range`` and when it arrived and ended. ``latency`` (seconds before each answer)
and ``bandwidth`` (bytes/s per connection) make it as slow as a remote store when asked.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

__all__ = ["CountingServer", "Request", "counting_server"]


@dataclass(frozen=True)
class Request:
    """One GET as the server saw it: ``arrived`` and ``ended`` in ``time.monotonic()``
    seconds (``ended``: after its last byte was sent), ``start`` the first byte it asked for
    (0 without a ``Range``)."""

    path: str
    start: int
    arrived: float
    ended: float


class _Handler(http.server.SimpleHTTPRequestHandler):
    owner: CountingServer

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _file(self) -> Path | None:
        path = Path(self.translate_path(self.path))
        return path if path.is_file() else None

    def _validators(self, path: Path) -> dict[str, str]:
        st = path.stat()
        return {
            "ETag": f'"{st.st_size:x}-{st.st_mtime_ns:x}"',
            "Last-Modified": self.date_time_string(int(st.st_mtime)),
        }

    def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
        self.owner.note("HEAD", self.path, 0)
        time.sleep(self.owner.latency)
        path = self._file()
        if path is None:
            self.send_error(404, "Not Found")
            return
        self.send_response(200)
        self.send_header("Content-Length", str(path.stat().st_size))
        for key, value in self._validators(path).items():
            self.send_header(key, value)
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        arrived = time.monotonic()
        try:
            self._get()
        finally:
            header = self.headers.get("Range") or "bytes=0-"
            start = int(header.split("=", 1)[1].partition("-")[0])
            self.owner.logged(Request(self.path, start, arrived, time.monotonic()))

    def _get(self) -> None:
        time.sleep(self.owner.latency)
        path = self._file()
        if path is None:
            self.owner.note("GET", self.path, 0)
            self.send_error(404, "Not Found")
            return
        data = path.read_bytes()
        validators = self._validators(path)
        if self.headers.get("If-None-Match") == validators["ETag"]:
            self.owner.note("GET", self.path, 0)
            self.send_response(304)
            for key, value in validators.items():
                self.send_header(key, value)
            self.end_headers()
            return
        start, end = 0, len(data) - 1
        header = self.headers.get("Range")
        if header:
            first, _, last = header.split("=", 1)[1].partition("-")
            start = int(first)
            end = min(int(last), len(data) - 1) if last else len(data) - 1
        body = memoryview(data)[start : end + 1]
        # Counted before the first byte leaves, and each chunk before it is sent: a client
        # that has the response in hand always finds it counted (a count taken after the
        # send could still be missing when the client asks for the counts).
        self.owner.note("GET", self.path, 0)
        self.send_response(206 if header else 200)
        self.send_header("Content-Length", str(len(body)))
        if header:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        for key, value in validators.items():
            self.send_header(key, value)
        self.end_headers()
        began = time.perf_counter()
        chunk = 64 * 1024
        for at in range(0, len(body), chunk):
            piece = body[at : at + chunk]
            self.owner.sent(self.path, len(piece))
            try:
                self.wfile.write(piece)
            except (BrokenPipeError, ConnectionResetError):  # the client went away
                self.owner.sent(self.path, -len(piece))
                return
            if self.owner.bandwidth:
                ahead = (at + chunk) / self.owner.bandwidth - (time.perf_counter() - began)
                if ahead > 0:
                    time.sleep(ahead)


class CountingServer:
    """The server's address and counts.

    Attributes:
        url: ``http://127.0.0.1:PORT``.
        requests: Requests per ``(method, path)``.
        bytes: Body bytes sent per path.
        log: Every GET answered, in the order they ended (:class:`Request`).
    """

    def __init__(self, root: str | os.PathLike, latency: float = 0.0, bandwidth: float = 0.0):
        self.latency, self.bandwidth = latency, bandwidth
        self.requests: Counter = Counter()
        self.bytes: Counter = Counter()
        self.log: list[Request] = []
        self._lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"owner": self})
        self.server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), partial(handler, directory=os.fspath(root))
        )
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,))
        self._thread.daemon = True
        self._thread.start()

    def note(self, method: str, path: str, sent: int) -> None:
        with self._lock:
            self.requests[(method, path)] += 1
            self.bytes[path] += sent

    def sent(self, path: str, count: int) -> None:
        """Counts ``count`` body bytes of ``path`` (negative: a chunk that did not leave)."""
        with self._lock:
            self.bytes[path] += count

    def logged(self, request: Request) -> None:
        with self._lock:
            self.log.append(request)

    def reset(self) -> None:
        """Forgets the counts and the log so far."""
        with self._lock:
            self.requests.clear()
            self.bytes.clear()
            self.log.clear()

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def counting_server(root: str | os.PathLike, **kwargs: Any) -> Iterator[CountingServer]:
    """A :class:`CountingServer` of ``root`` for the ``with`` block."""
    server = CountingServer(root, **kwargs)
    try:
        yield server
    finally:
        server.close()
