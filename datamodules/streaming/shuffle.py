"""The bounded shuffle buffer of stream workers, and its replay over record positions.

:func:`shuffle_buffer` shuffles a stream through a buffer of ``size`` items;
:func:`replay_shuffle` runs the same draws over positions ``range(n)`` without reading any
record, which is how a resumed worker finds the records it has not yet delivered.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any


def shuffle_buffer(
    items: Iterator[Any], size: int, rng: random.Random, buf: list[Any]
) -> Iterator[Any]:
    """Bounded shuffle: once ``size`` items are held, each new item evicts a random one."""
    rand = rng.random
    for item in items:
        if len(buf) < size:
            buf.append(item)
            continue
        i = int(rand() * size)
        out = buf[i]
        buf[i] = item
        yield out
    rng.shuffle(buf)
    yield from buf
    buf.clear()


def replay_shuffle(n: int, t: int, size: int, rng: random.Random) -> tuple[list[int], int, bool]:
    """Runs :func:`shuffle_buffer` over positions ``range(n)`` until ``t`` were emitted.

    Returns ``(buffer, next position, flushing)``: while reading, the buffer of positions and
    the next position to read (``rng`` is left where the real run would be); after the input
    ran out (``flushing``), the positions still to be emitted, in order.
    """
    buf: list[int] = []
    rand = rng.random
    emitted = 0
    for p in range(n):
        if len(buf) < size:
            buf.append(p)
            continue
        if emitted == t:
            return buf, p, False
        buf[int(rand() * size)] = p
        emitted += 1
    rng.shuffle(buf)
    return buf[t - emitted :], n, True
