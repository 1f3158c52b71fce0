"""Runs a test script's ``main(argv)`` in a process of its own that needs no fresh interpreter.

A DDP test needs processes, not fresh interpreters: a fresh one spends 15-20 s on this machine
importing torch, torchmetrics and Lightning before the first step, per rank. Here each run is
forked from one forkserver that imported Lightning and the library once per test session
(``multiprocessing``'s ``forkserver``), never from the test process itself: once a process has
asked torch about CUDA it may not fork a DDP launcher (``ddp_fork`` refuses, rightly), and the
test process asks all the time. The run is a real process in a session of its own, with the
test's environment and working directory; the DDP ranks that its ``Trainer`` starts
(``strategy="ddp_fork"``: real processes, gloo) are its children. Whatever happens (it ends,
runs past ``timeout``, the test is interrupted), the whole session is killed afterwards, so no
rank or DataLoader worker outlives the test. Its stdout and stderr go to ``log``. A run past
``timeout`` first has every process of its session write its threads' stacks to ``log``
(``faulthandler`` on ``SIGUSR1``, which forked ranks and workers inherit), and the error shows
them; no wait here is unbounded, so a hung run fails its test instead of hanging the suite.

The commands the docs show keep running in fresh interpreters (:mod:`tests.subprocesses`):
there the import order is what is tested.
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["TIMEOUT", "run_main"]

#: Seconds a run may take: a hang, not a slow machine (pytest-timeout's is longer). The
#: longest run here takes 23 s on 2 shared cores.
TIMEOUT = 600

#: Seconds to wait for the forkserver to report a killed run's end before giving up on it.
REAP = 30

#: Seconds each process of a hung run gets to write its stacks, one after another (written at
#: once, their lines interleave).
DUMP = 0.3

#: What the forkserver imports once, so that no run pays for it.
PRELOAD = ["torch", "lightning.pytorch", "datamodules", "tests.ddp_runner"]

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)


def _signal_session(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _kill_session(pid: int) -> None:
    _signal_session(pid, signal.SIGKILL)


def _session_members(sid: int) -> list[int]:
    """The processes of session ``sid`` in pid order (from ``/proc``; empty without it)."""
    members = []
    for entry in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = entry.read_text().rpartition(")")[2].split()
            if int(fields[3]) == sid:  # after the name: state, ppid, pgrp, session
                members.append(int(entry.parent.name))
    return sorted(members)


def _dump_stacks(sid: int) -> None:
    """Has each process of session ``sid`` write its threads' stacks to its log, in turn."""
    members = _session_members(sid)
    if not members:
        _signal_session(sid, signal.SIGUSR1)
        time.sleep(DUMP)
    for pid in members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGUSR1)
            time.sleep(DUMP)


def _child(
    main: Callable[[list[str]], object],
    argv: list[str],
    log: str,
    environ: dict[str, str],
    cwd: str,
) -> None:
    os.setsid()
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    code = 1
    try:
        main(argv)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def run_main(
    main: Callable[[list[str]], object],
    argv: Sequence[str],
    log: Path,
    *,
    timeout: float = TIMEOUT,
) -> tuple[int, str]:
    """Runs ``main(list(argv))`` in a process forked from the forkserver and waits for it.

    Args:
        main: A module-level function (the child imports it by name).
        argv: Its arguments.
        log: Where its stdout and stderr go.
        timeout: Seconds before it counts as hung.

    Returns:
        Its exit status (0 when ``main`` returned) and the text it printed.

    Raises:
        AssertionError: It ran past ``timeout`` (its session killed, its output's end and every
            process's stacks shown), or the forkserver did not report its end within ``REAP``
            seconds of the kill.
    """
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    process = _context.Process(
        target=_child, args=(main, list(argv), str(log), dict(os.environ), os.getcwd())
    )
    process.start()
    try:
        process.join(timeout)
        if process.exitcode is None:
            _dump_stacks(process.pid)
            _kill_session(process.pid)
            process.join(REAP)
            text = log.read_text(errors="replace") if log.exists() else ""
            raise AssertionError(
                f"{main.__module__}.{main.__name__}({list(argv)}) ran past {timeout} s and was "
                f"killed with its session; its output, with every process's stacks, ended:\n"
                f"{text[-20000:]}"
            )
    finally:
        _kill_session(process.pid)  # ranks or workers left behind, if any
        if process.exitcode is None:
            process.kill()
            process.join(REAP)
    if process.exitcode is None:
        raise AssertionError(f"the forkserver never reported the end of run {process.pid}")
    return process.exitcode, log.read_text(errors="replace") if log.exists() else ""
