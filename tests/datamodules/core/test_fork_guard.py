"""The fork guard (datamodules.core.fork_guard) takes the interpreter's thread-list lock with no
garbage collection inside it: a collection there runs finalizers that may release the GIL, and
a thread ending at that moment (holding the GIL, waiting for the lock) deadlocks the fork."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest

from datamodules.core import fork_guard
from tests import subprocesses

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(
    sys.version_info >= (3, 12), reason="the guard is for CPython before 3.12"
)


def collections_inside_the_guard(calls: int) -> list[str]:
    """Calls the guard's handler ``calls`` times with a collection due at every allocation;
    the phase of each collection that started while the handler ran."""
    inside: list[str] = []

    def on_collection(phase: str, info: dict) -> None:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code is fork_guard._wait_for_thread_list.__code__:
                inside.append(phase)
                return
            frame = frame.f_back

    threshold = gc.get_threshold()
    gc.set_threshold(1)  # a collection at the next tracked allocation
    gc.callbacks.append(on_collection)
    try:
        for _ in range(calls):
            fork_guard._wait_for_thread_list()
    finally:
        gc.callbacks.remove(on_collection)
        gc.set_threshold(*threshold)
    return inside


def test_no_collection_runs_while_the_guard_holds_the_thread_list_lock() -> None:
    assert gc.isenabled()
    assert collections_inside_the_guard(20) == []
    assert gc.isenabled()  # restored


def test_the_guard_leaves_a_paused_collector_paused() -> None:
    gc.disable()
    try:
        fork_guard._wait_for_thread_list()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_forks_beside_threads_that_start_and_end_do_not_hang() -> None:
    """Without the pause, the first fork hangs for ever (3 runs of 3); with it, 50 forks take
    under a second."""
    done = subprocesses.run(
        [sys.executable, "-m", "tests.datamodules.core.fork_churn", "50"],
        cwd=ROOT, timeout=60, check=True,
    )  # fmt: skip
    assert done.stdout == "forked 50\n"
