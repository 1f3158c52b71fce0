"""Building a cache directory once per machine: the other processes wait, then read it."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable
from typing import Any

__all__ = ["build_once"]


def build_once(path: str, build: Callable[[], Any]) -> None:
    """Runs ``build()`` unless the directory ``path`` exists, under an exclusive lock on
    ``<path>.lock``: one process per machine builds (DDP ranks, workers of a job), the others
    wait in ``flock`` and then map what it wrote. ``build`` must create ``path`` atomically
    (a temporary directory renamed into place)."""
    if os.path.isdir(path):
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    handle = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        if not os.path.isdir(path):
            build()
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        os.close(handle)
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + ".lock")
