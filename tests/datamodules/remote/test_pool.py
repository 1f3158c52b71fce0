"""The process's pool of range requests: its threads, its cap, its share per file."""

from __future__ import annotations

import threading
import time

from datamodules.remote.pool import PREFETCH, READING, RequestPool


def test_the_first_request_starts_every_thread_off_the_caller() -> None:
    requests = RequestPool(4)
    assert requests.threads == []  # a pool never used starts none
    release = threading.Event()
    futures = [requests.submit((PREFETCH, 0), release.wait) for _ in range(10)]
    deadline = time.monotonic() + 10
    while requests.running < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert requests.running == 4 and len(requests.threads) == 4  # the cap, no more
    assert all(thread.is_alive() for thread in requests.threads)
    first = requests.submit(READING, lambda: "read")  # queued behind them: runs once freed
    release.set()
    assert first.result(timeout=10) == "read"
    assert all(future.result(timeout=10) for future in futures)
    assert requests.most == 4 and len(requests.threads) == 4


def test_files_at_once_split_the_connections() -> None:
    requests = RequestPool(16)
    assert requests.share() == 16
    requests.add_file(6)
    assert requests.share() == 2  # 16 // 6
    requests.add_file(20)
    assert requests.share() == 1  # never below one
    requests.add_file(-26)
    assert requests.share() == 16 and requests.files == 0
