"""Commands run as a user runs them, in a fresh interpreter, that never outlive their test.

:func:`run` starts the command in a process group of its own and, whatever happens (it ends,
it runs past ``timeout``, the test is interrupted), kills that whole group afterwards, so the
DataLoader workers or DDP processes a command started go with it. Its ``timeout`` is a bound
for a hung command, far above what a loaded machine takes, never a speed claim.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from typing import Any

__all__ = ["TIMEOUT", "run"]

#: Seconds a command may run: a hang, not a slow machine (pytest-timeout's is longer). The
#: longest command here (an example's training run) takes about 2 minutes on 2 shared cores.
TIMEOUT = 600

#: Seconds to wait for a killed command's pipes to close: a process that left its group (a
#: session of its own) may hold them open; then its output is not waited for.
REAP = 30


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def run(
    command: Sequence[str], *, timeout: float = TIMEOUT, check: bool = False, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """Runs ``command`` (text output captured unless ``stdout``/``stderr`` are given) and
    returns its ``CompletedProcess``; kills its process group when it returns or fails.

    Raises:
        AssertionError: It ran past ``timeout`` (its group killed, its stderr's end shown).
        subprocess.CalledProcessError: ``check=True`` and it exited with a non-zero status.
    """
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    kwargs.setdefault("text", True)
    process = subprocess.Popen(list(command), start_new_session=True, **kwargs)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process.pid)
        try:
            out, err = process.communicate(timeout=REAP)
        except subprocess.TimeoutExpired:
            out, err = "", f"(its pipes were still open {REAP} s after the kill)"
        raise AssertionError(
            f"{' '.join(map(str, command))} ran past {timeout} s and was killed with its "
            f"process group; its stderr ended:\n{(err or '')[-3000:]}"
        ) from None
    finally:
        _kill_group(process.pid)  # workers left behind by the command, if any
        if process.poll() is None:
            process.kill()
            process.wait(REAP)
    done = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    if check:
        done.check_returncode()
    return done
