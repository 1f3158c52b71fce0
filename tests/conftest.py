"""Test-wide settings: caches (token stores, shard indexes) go to a temporary folder, never to
the user's ``~/.cache``."""

from __future__ import annotations

import os
import tempfile

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache() -> None:
    if "DATAMODULES_CACHE" not in os.environ:
        os.environ["DATAMODULES_CACHE"] = tempfile.mkdtemp(prefix="datamodules-test-cache-")
