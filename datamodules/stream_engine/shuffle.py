"""The bounded shuffle buffer of stream workers, and its replay over record positions.

:func:`shuffle_buffer` shuffles a stream through a buffer of ``size`` items;
:func:`replay_shuffle` runs the same draws over positions ``range(n)`` without reading any
record, which is how a resumed worker finds the records it has not yet delivered;
:func:`shuffle_runs` makes the same draws over runs of positions with NumPy, a run at a time,
which is how the columnar path shuffles.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["replay_shuffle", "shuffle_buffer", "shuffle_runs"]


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


def shuffle_runs(
    runs: Iterator[tuple[int, int]], size: int, rng: random.Random, buf: list[int]
) -> Iterator[np.ndarray]:
    """:func:`shuffle_buffer` over the positions of ``runs`` (``[a, b)`` each), a run at a time.

    The same draws, the same buffer and so the same positions in the same order as
    ``shuffle_buffer(chain(range(a, b) ...), size, rng, buf)``, yielded as arrays, one per run
    (and a last one, the buffer, once the runs end).

    Why it is exact: each item past the first ``size`` draws ``i = int(rng.random() * size)``,
    is put in slot ``i`` and pushes out what slot ``i`` held. So an item's draws alone say
    which item it pushes out: the last earlier one drawn to the same slot, or the slot's
    holder before the run. Sorting a run's draws by slot (stably, so by step within a slot)
    lines up, for every draw, the draw before it in its slot: one ``argsort`` replaces the
    loop. The slots' last draws leave the buffer the loop would leave.
    """
    rand = rng.random
    held = np.asarray(buf, dtype=np.int64)
    fill = len(buf)
    if fill < size:
        held = np.concatenate([held, np.zeros(size - fill, dtype=np.int64)])
    for a, b in runs:
        if fill < size:  # the buffer fills up first, emitting nothing
            k = min(size - fill, b - a)
            held[fill : fill + k] = np.arange(a, a + k)
            fill += k
            a += k
        m = b - a
        if m <= 0:
            continue
        items = np.arange(a, b, dtype=np.int64)
        draws = np.array([rand() for _ in range(m)]) * size
        slots = draws.astype(np.int64)
        order = np.argsort(slots, kind="stable")
        ranked = slots[order]
        first = np.empty(m, dtype=bool)
        first[0] = True
        np.not_equal(ranked[1:], ranked[:-1], out=first[1:])
        pushed = np.empty(m, dtype=np.int64)
        pushed[first] = held[ranked[first]]
        later = ~first[1:]
        pushed[1:][later] = items[order[:-1][later]]
        out = np.empty(m, dtype=np.int64)
        out[order] = pushed
        last = np.empty(m, dtype=bool)
        last[-1] = True
        np.not_equal(ranked[1:], ranked[:-1], out=last[:-1])
        held[ranked[last]] = items[order[last]]
        yield out
    rest = held[:fill].tolist()
    rng.shuffle(rest)
    if rest:
        yield np.asarray(rest, dtype=np.int64)
