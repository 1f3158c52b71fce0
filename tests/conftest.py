"""Test-wide settings: caches (token stores, shard indexes) go to a temporary folder, never to
the user's ``~/.cache``; a test that hangs past :data:`HANG` seconds ends its process."""

from __future__ import annotations

import faulthandler
import os
import sys
import tempfile
from collections.abc import Iterator

import pytest

EXAMPLES = "tests/examples/"

#: Seconds after which a test's process writes every thread's stack to stderr and exits.
#: pytest-timeout (``timeout`` in pyproject.toml, 900 s) stops a hung test first, from a
#: Python signal handler; a deadlock that never gives the GIL back never runs that handler
#: (one ran CI to its own limit). faulthandler's watchdog is a C thread that needs
#: no GIL: the worker exits, pytest-xdist reports the test as failed and starts another.
HANG = 1000


@pytest.fixture(autouse=True, scope="session")
def _private_cache() -> None:
    if "DATAMODULES_CACHE" not in os.environ:
        os.environ["DATAMODULES_CACHE"] = tempfile.mkdtemp(prefix="datamodules-test-cache-")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    faulthandler.dump_traceback_later(HANG, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The examples' tests first (in their order, the rest in theirs): their training runs are
    the suite's longest, and on two workers the one that started last decides the end."""
    items.sort(key=lambda item: not item.nodeid.startswith(EXAMPLES))
