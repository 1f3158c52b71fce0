"""The range requests of one process: a pool of threads, capped, the file being read first.

Every range request of :mod:`~datamodules.remote.ranges` runs in this process's pool, so a
process has at most :func:`connections` of them open at once, whatever it reads and
prefetches: by default :data:`NODE_CONNECTIONS` shared by the node's processes
(``LOCAL_WORLD_SIZE`` ranks times their DataLoader workers), 2 to :data:`MAX_CONNECTIONS`
each. Requests for a file being read (:data:`READING`) run before those of files fetched
ahead (``(PREFETCH, n)``: the n-th file scheduled first, so the next shard is not slowed by
the ones after it), then first come first served. A forked process (a DataLoader
worker) makes its own pool: threads do not cross a fork.
"""

from __future__ import annotations

import itertools
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from datamodules.remote.retrying import RemoteOptions

__all__ = [
    "MAX_CONNECTIONS",
    "NODE_CONNECTIONS",
    "PREFETCH",
    "READING",
    "RequestPool",
    "connections",
    "pool",
    "wait_requested",
]

#: Range requests one node's processes may have open at once, all together.
NODE_CONNECTIONS = 64
#: The most range requests one process has open at once.
MAX_CONNECTIONS = 16
#: Priorities in the pool, lowest first: a file being read, then files fetched ahead, by the
#: order they were scheduled in (``(PREFETCH, n)``).
READING, PREFETCH = (0, 0), 1


def connections(options: RemoteOptions) -> int:
    """Range requests this process may have open at once.

    ``options.connections`` when given; else :data:`NODE_CONNECTIONS` shared by the node's
    processes (``LOCAL_WORLD_SIZE`` ranks times this rank's DataLoader workers), at least 2
    and at most :data:`MAX_CONNECTIONS` each.
    """
    if options.connections:
        return options.connections
    processes = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    data = sys.modules.get("torch.utils.data")  # never imported here: the CLI runs without torch
    info = data.get_worker_info() if data is not None else None
    if info is not None:
        processes *= max(1, info.num_workers)
    return max(2, min(MAX_CONNECTIONS, NODE_CONNECTIONS // processes))


class RequestPool:
    """``size`` threads that run range requests, lowest priority first, then FIFO."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.pid = os.getpid()
        self.tasks: queue.PriorityQueue = queue.PriorityQueue()
        self.order = itertools.count()
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.running = 0  # requests open now (read by the tests)
        self.most = 0  # the most open at once
        self.files = 0  # files being read or fetched through the pool now
        self.asking = 0  # files scheduled to be fetched that have not asked for all parts
        self.asked = threading.Condition(self.lock)
        #: Set once a file being read has asked for its parts (prefetch may wait for it).
        self.reading = threading.Event()

    def add_file(self, n: int = 1) -> None:
        """Counts ``n`` more files read or fetched through the pool now (-n: done)."""
        with self.lock:
            self.files += n

    def asking_for(self, n: int) -> None:
        """Counts ``n`` more files scheduled to be fetched that have not yet asked for all
        their parts (-1: one has)."""
        with self.asked:
            self.asking += n
            self.asked.notify_all()

    def share(self) -> int:
        """The connections one of the files read or fetched now may spread its parts over:
        the pool's, split between them (at least 1). A request's latency is paid per part, so
        several files at once are each asked for in fewer, larger parts; more parts than
        connections would only queue behind each other."""
        with self.lock:
            return max(1, self.size // max(1, self.files))

    def submit(self, priority: tuple[int, int], call: Callable[[], Any]) -> Future:
        future: Future = Future()
        if priority[0] == READING[0]:
            self.reading.set()
            _reading.set()
        self.tasks.put((priority, next(self.order), call, future))
        with self.lock:
            start = not self.threads
            if start:
                self.threads.append(
                    threading.Thread(target=self._start, name="ranges", daemon=True)
                )
        if start:
            self.threads[0].start()
        return future

    def _start(self) -> None:
        """The first thread: starts the others, then runs requests too. Started here, not by
        :meth:`submit`, because starting a thread waits for it to run: milliseconds each
        (more while the reader's thread holds the interpreter), paid by a worker's first
        burst of requests 16 times over."""
        for _ in range(self.size - 1):
            thread = threading.Thread(target=self._run, name="ranges", daemon=True)
            with self.lock:
                self.threads.append(thread)
            thread.start()
        self._run()

    def _run(self) -> None:
        while True:
            _, _, call, future = self.tasks.get()
            if not future.set_running_or_notify_cancel():
                continue
            with self.lock:
                self.running += 1
                self.most = max(self.most, self.running)
            try:
                future.set_result(call())
            except BaseException as error:  # noqa: BLE001 (handed to whoever waits)
                future.set_exception(error)
            finally:
                with self.lock:
                    self.running -= 1


_pool_lock = threading.Lock()
_pool_now: RequestPool | None = None
_reading = threading.Event()  # a file being read in this process has asked for parts


def _after_fork() -> None:  # the child has none of the parent's threads, nor its lock's owner
    global _pool_lock, _pool_now, _reading
    _pool_lock, _pool_now, _reading = threading.Lock(), None, threading.Event()


def wait_requested(timeout: float) -> bool:
    """Waits, at most ``timeout`` seconds, until a file being read in this process has asked
    for its first parts (:data:`READING`) and the files scheduled to be fetched ahead have
    asked for all of theirs; whether they have. Work that would slow those requests down
    (a worker's imports, say) waits for them to be out, then runs while they are answered."""
    deadline = time.monotonic() + timeout
    if not _reading.wait(timeout):
        return False
    requests = _pool_now
    if requests is None:
        return True
    with requests.asked:
        left = max(0.0, deadline - time.monotonic())
        return requests.asked.wait_for(lambda: requests.asking <= 0, left)


os.register_at_fork(after_in_child=_after_fork)


def pool(options: RemoteOptions) -> RequestPool:
    """This process's pool (a fresh one after a fork: threads do not cross it)."""
    global _pool_now
    with _pool_lock:
        if _pool_now is None or _pool_now.pid != os.getpid():
            _pool_now = RequestPool(connections(options))
        return _pool_now
