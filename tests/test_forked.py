"""tests.forked.run_main bounds a hung run: its session is killed at ``timeout``, and the error
shows the stacks of every process in it (the run's own and those it forked, one after the
other), so a hang fails its test with what it was waiting on instead of hanging the suite."""

from __future__ import annotations

import inspect
import os
import time

import pytest

from tests import forked


def sleeps_in_two_processes(argv: list[str]) -> None:
    """Forks one child; both wait far past any timeout a test gives."""
    if os.fork() == 0:
        time.sleep(float(argv[0]) + 1)  # the child's own frame
        os._exit(0)
    time.sleep(float(argv[0]))


def prints_and_returns(argv: list[str]) -> None:
    print("ran with", argv)


def test_a_run_that_returns_gives_its_status_and_output(tmp_path) -> None:
    code, log = forked.run_main(prints_and_returns, ["a", "b"], tmp_path / "ok.log", timeout=120)
    assert (code, log) == (0, "ran with ['a', 'b']\n")


def test_a_hung_run_is_killed_with_every_process_stacks_shown(tmp_path) -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"ran past 5 s and was killed") as raised:
        forked.run_main(sleeps_in_two_processes, ["600"], tmp_path / "hung.log", timeout=5)
    assert time.monotonic() - started < 120
    message = str(raised.value)
    # both processes wrote their stacks: each names the line it waits on
    assert message.count("Current thread") == 2, message
    lines = inspect.getsourcelines(sleeps_in_two_processes)[1]
    child, parent = lines + 3, lines + 5  # the two sleeps
    for line in (child, parent):
        assert f"line {line} in sleeps_in_two_processes" in message, message
    # one process after another, the run's own first: whole stacks, not interleaved lines
    where = [message.index(f"line {line} in sleeps_in_two_processes") for line in (parent, child)]
    assert where[0] < message.index("Current thread", where[0]) < where[1], message
