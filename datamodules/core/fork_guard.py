"""Waiting, just before a fork, for any thread that holds the interpreter's thread-list lock.

On CPython before 3.12 (3.11 until its late bug-fix releases), a forked child takes that lock
(``HEAD_LOCK``) before re-initialising it, so a child forked while another thread of the parent
held it hangs for ever in ``PyOS_AfterFork_Child`` (CPython gh-112275). Threads that do not hold
the GIL take it whenever they make a Python thread state: under DDP, gloo's work threads do so
when they drop the last reference to a collective's tensors (seen with ``gdb`` in a 3-rank run
on 2 cores, where a preempted holder keeps the lock for milliseconds, and a DataLoader worker
forked then hung).

:func:`install` registers a ``before`` fork handler that calls ``sys._current_frames()``, which
takes and releases that lock: a thread holding it (even descheduled) finishes first, so the
fork no longer inherits it held, except from a thread that takes it in the few microseconds
between the handler and the fork itself. The DataModules' own collectives avoid those threads
altogether (:mod:`datamodules.core.store_exchange`); this covers the others' (Lightning's
broadcasts, DDP's). Nothing is installed on interpreters that re-initialise the lock first.

The call runs with the garbage collector paused. ``sys._current_frames()`` allocates its dict
and frame objects while it holds the lock; an allocation could start a collection, and a
collection runs finalizers, which may release the GIL (``multiprocessing``'s ``Finalize``
closes pipes). A thread that holds the GIL and waits for the lock (one ending: CPython deletes
its thread state under that lock) then never lets the finalizer return, and the fork never
happens: a DataLoader's ``iter()`` hung so in the test suite, beside remote readers' threads.
"""

from __future__ import annotations

import gc
import os
import sys

__all__ = ["install"]

_installed = False


def _wait_for_thread_list() -> None:
    collecting = gc.isenabled()
    gc.disable()  # no collection, so no finalizer, while the thread-list lock is held
    try:
        sys._current_frames()
    finally:
        if collecting:
            gc.enable()


def install() -> None:
    """Registers the handler once per process (CPython before 3.12 only)."""
    global _installed
    if _installed or sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return
    os.register_at_fork(before=_wait_for_thread_list)
    _installed = True
