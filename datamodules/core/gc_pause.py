"""Python's cyclic garbage collector paused while an index is built from a large file."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["paused_gc"]


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector paused while millions of small containers are built (a
    parsed JSON file, a million shards' rows): each full collection would walk all of them
    again, which cost about twice the parse. Restored as it was, on error too."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
