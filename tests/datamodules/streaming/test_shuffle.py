"""The shuffle buffer's vectorized form draws exactly what the loop draws."""

from __future__ import annotations

import random
from itertools import chain

import pytest

from datamodules.stream_engine.shuffle import replay_shuffle, shuffle_buffer, shuffle_runs


def _runs(rng: random.Random) -> list[tuple[int, int]]:
    runs, a = [], rng.randint(0, 5)
    for _ in range(rng.randint(0, 6)):
        b = a + rng.randint(0, 40)
        runs.append((a, b))
        a = b + rng.randint(0, 3)
    return runs


@pytest.mark.parametrize("seed", range(60))
def test_shuffle_runs_emits_what_the_buffer_emits(seed: int) -> None:
    rng = random.Random(seed)
    size = rng.choice([1, 2, 3, 5, 10, 64])
    runs = _runs(rng)
    held = [rng.randint(1000, 2000) for _ in range(rng.randint(0, size))]
    loop, vector = random.Random(seed * 7), random.Random(seed * 7)
    items = chain.from_iterable(range(a, b) for a, b in runs)
    expected = list(shuffle_buffer(items, size, loop, list(held)))
    arrays = list(shuffle_runs(iter(runs), size, vector, list(held)))
    assert [int(p) for array in arrays for p in array] == expected
    assert loop.getstate() == vector.getstate()  # the same draws, no more


def test_shuffle_runs_resumes_where_the_replay_stops() -> None:
    n, size = 500, 37
    whole = list(shuffle_buffer(iter(range(n)), size, random.Random(3), []))
    for t in (1, 100, n - size, n - 5):
        rng = random.Random(3)
        held, p, flushing = replay_shuffle(n, t, size, rng)
        if flushing:
            assert held == whole[t:]
            continue
        rest = [int(q) for a in shuffle_runs(iter([(p, n)]), size, rng, held) for q in a]
        assert rest == whole[t:]
