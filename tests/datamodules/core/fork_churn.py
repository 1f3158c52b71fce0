"""Forks while other threads start and end and garbage with a GIL-releasing finalizer waits
for the collector: ``python -m tests.datamodules.core.fork_churn FORKS`` prints ``forked N``,
or hangs on the first fork where the fork guard lets a collection run under the interpreter's
thread-list lock (each allocation starts a collection here; a thread that starts or ends takes
that lock while holding the GIL, which the finalizer gave away)."""

from __future__ import annotations

import gc
import os
import sys
import threading
import time

from datamodules.core import fork_guard


class GilReleasingGarbage:
    """A reference cycle whose finalizer releases the GIL, as a pipe's ``Finalize`` does."""

    def __init__(self) -> None:
        self.cycle = self

    def __del__(self) -> None:
        time.sleep(0.005)


def main(forks: int) -> int:
    fork_guard.install()
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            thread = threading.Thread(target=int)
            thread.start()
            thread.join()

    for _ in range(2):
        threading.Thread(target=churn, daemon=True).start()
    gc.set_threshold(1)
    done = 0
    for _ in range(forks):
        GilReleasingGarbage()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        done += os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    stop.set()
    return done


if __name__ == "__main__":
    print("forked", main(int(sys.argv[1])))
