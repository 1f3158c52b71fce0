"""The remainder of an elastic stream resume, built per rank in O(its share), equals the exact
one (``elastic.remainder``) on every layout the in-process elastic suite covers and on random
layouts of up to 64 ranks x 8 workers, chains of resumes included."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from datamodules.core.elastic import Segment
from datamodules.stream_engine.elastic import remainder
from datamodules.stream_engine.layout import Plan
from datamodules.stream_engine.remainder import Materialized, Remainder, remaining_sequence

SUITE_SIZES = (41, 35, 44)  # the records of test_elastic.py's LAYOUTS
SEED, BUFFER = 11, 5


def assert_same(n: int, size: int, drop_last: bool, segments: list, rng: random.Random) -> None:
    exact = remainder(n, SEED, 3, size, drop_last, segments)
    lazy = remaining_sequence(n, SEED, 3, size, drop_last, segments)
    assert len(lazy) == len(exact), segments
    assert lazy.take_range(0, len(lazy)).tolist() == exact.tolist(), segments
    for _ in range(5):  # any rank's range: the same positions
        a = rng.randint(0, len(exact))
        b = rng.randint(a, len(exact))
        assert lazy.take_range(a, b).tolist() == exact[a:b].tolist(), (segments, a, b)


def test_every_combination_of_the_elastic_suite() -> None:
    rng = random.Random(0)
    for n in SUITE_SIZES:
        for w1 in (1, 2, 3):
            for k1 in range(4):
                nb = Plan.make(n, w1, 4, False).nb
                for stop in {1, nb // 2, nb - 1} - {0}:
                    first = Segment(w1, max(k1, 1), 4, stop)
                    assert_same(n, BUFFER, False, [first], rng)
                    for w2 in (1, 2, 3):  # and a resume of that resume, stopped early
                        for k2 in range(4):
                            size = 4 if (k1 + k2) % 2 else 3
                            left = len(remainder(n, SEED, 3, BUFFER, False, [first]))
                            nb2 = Plan.make(left, w2, size, False).nb
                            second = Segment(w2, max(k2, 1), size, nb2 // 2)
                            assert_same(n, BUFFER, False, [first, second], rng)


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(0, 4000),
    chain=st.lists(
        st.tuples(st.integers(1, 64), st.integers(1, 8), st.integers(1, 16), st.floats(0, 1)),
        min_size=1,
        max_size=4,
    ),
    size=st.sampled_from([0, 1, 7, 50]),
    drop_last=st.booleans(),
    seed=st.integers(0, 9),
)
def test_random_layouts_up_to_64_ranks_by_8_workers(n, chain, size, drop_last, seed) -> None:
    segments = []
    for world, workers, batch_size, fraction in chain:
        left = len(remainder(n, SEED, 3, size, drop_last, segments))
        nb = Plan.make(left, world, batch_size, drop_last).nb
        segments.append(Segment(world, workers, batch_size, round(fraction * nb)))
    assert_same(n, size, drop_last, segments, random.Random(seed))


def test_only_padded_layouts_are_built_whole() -> None:
    lazy = remaining_sequence(
        10_000, 1, 0, 16, False, [Segment(8, 2, 32, 10), Segment(5, 3, 16, 7)]
    )
    assert isinstance(lazy, Remainder)
    padded = remaining_sequence(5, 1, 0, 16, False, [Segment(8, 2, 32, 0)])  # 5 records, 8 ranks
    assert isinstance(padded, Materialized)


def test_a_rank_range_replays_only_the_old_workers_it_overlaps() -> None:
    # 64 old ranks x 8 workers, 61 of 122 batches in: each old worker left about 3,670 of
    # its 3,906 records, so a new rank's share (of 48) spans 11 of the 512 old workers.
    n = 2_000_000
    lazy = remaining_sequence(n, 1, 0, 100, False, [Segment(64, 8, 32, 61)])
    assert isinstance(lazy, Remainder) and not lazy._replays
    share = len(lazy) // 48
    positions = lazy.take_range(5 * share, 6 * share)
    assert len(positions) == share and np.all(np.diff(positions) > 0)
    assert len(lazy._replays) <= share // 3_600 + 2  # those it overlaps, of 512
    exact = remainder(n, 1, 0, 100, False, [Segment(64, 8, 32, 61)])
    assert np.array_equal(positions, exact[5 * share : 6 * share])
