"""Test-wide settings: caches (token stores, shard indexes) go to a temporary folder, never to
the user's ``~/.cache``."""

from __future__ import annotations

import os
import tempfile

import pytest

EXAMPLES = "tests/examples/"


@pytest.fixture(autouse=True, scope="session")
def _private_cache() -> None:
    if "DATAMODULES_CACHE" not in os.environ:
        os.environ["DATAMODULES_CACHE"] = tempfile.mkdtemp(prefix="datamodules-test-cache-")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The examples' tests first (in their order, the rest in theirs): their training runs are
    the suite's longest, and on two workers the one that started last decides the end."""
    items.sort(key=lambda item: not item.nodeid.startswith(EXAMPLES))
