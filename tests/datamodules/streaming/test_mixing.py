"""Source mixing in index space: exact quotas, passes without replacement, interleaving."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamodules.core.mixture import Source, check_sources, quotas
from datamodules.stream_engine.mixing import epoch_pieces


def record_ids(pieces, counts) -> list[tuple[int, int]]:
    """(source, record index within the source) of every record of the pieces, in order."""
    offsets = [[sum(c[:k]) for k in range(len(c))] for c in counts]
    return [
        (p.source, offsets[p.source][p.shard] + i) for p in pieces for i in range(p.start, p.stop)
    ]


def test_weights_split_the_epoch_by_largest_remainder() -> None:
    sources = [Source("a", weight=7), Source("b", weight=2), Source("c", weight=1)]
    assert quotas(sources, [100, 100, 100], 1_000_001) == [700_001, 200_000, 100_000]
    assert quotas(sources, [50, 30, 20], None) == [70, 20, 10]  # default: all the records
    three = [Source(x, weight=1) for x in "abc"]
    assert quotas(three, [1, 1, 1], 10) == [4, 3, 3]  # ties go to the earlier source


def test_repeats_are_passes_per_epoch() -> None:
    sources = [Source("a", repeat=0.25), Source("b", repeat=1), Source("c", repeat=3)]
    assert quotas(sources, [10, 7, 5], None) == [2, 7, 15]  # round(0.25 x 10) = round(2.5) = 2
    assert quotas([Source("a"), Source("b")], [4, 9], None) == [4, 9]


@pytest.mark.parametrize(
    ("sources", "match"),
    [
        ([Source("web/", weight=1), Source("code/", repeat=2)], r"weight: web; repeat: code"),
        ([Source("web/", weight=1), Source("books/")], r"weight: web; neither: books"),
        ([Source("a/x.jsonl"), Source("b/x.jsonl")], r"'x.jsonl'\] are used twice"),
        ([], r"give at least one Source"),
    ],
)
def test_bad_mixes_name_the_sources(sources, match) -> None:
    with pytest.raises(ValueError, match=match):
        check_sources(sources, "train_files")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"weight": -1}, ValueError, r"weight=-1 is not accepted: use a number >= 0 or a sche"),
        ({"weight": float("nan")}, ValueError, r"weight=nan is not accepted: use a number >= 0"),
        ({"weight": [[0, 1], [0, 2]]}, ValueError, r"the epochs of a schedule must increase"),
        ({"weight": [[0, -1]]}, ValueError, r"weight=\[\[0, -1\]\] is not accepted"),
        ({"weight": [[0, 1, 2]]}, ValueError, r"is not accepted: use a number >= 0 or a sche"),
        ({"weight": []}, ValueError, r"weight=\[\] is not accepted: use a number >= 0 or a sc"),
        ({"weight": [[0, "1"]]}, TypeError, r"weight=\[\[0, '1'\]\] is not accepted"),
        ({"weight": True}, TypeError, r"weight=True is not accepted"),
        ({"repeat": -1}, ValueError, r"repeat=-1 is not accepted: use a number >= 0"),
        ({"weight": 1, "repeat": 1}, ValueError, r"give one of them"),
        ({"weight": "7"}, TypeError, r"weight='7' is not accepted"),
        ({"name": ""}, ValueError, r"name='' is not accepted"),
        ({"name": 3}, TypeError, r"name=3 is not accepted"),
    ],
)
def test_bad_sources_raise_naming_the_argument(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        Source("data/", **kwargs)


def test_a_weight_of_0_leaves_a_source_out_but_not_every_source() -> None:
    # (main refused weight=0; a weight of 0 in some or all epochs is part of the mixtures
    # contract, and an epoch whose weights are all 0 is what is refused)
    assert quotas([Source("a", weight=0), Source("b", weight=1)], [5, 5], None) == [0, 10]
    with pytest.raises(ValueError, match="every source's weight is 0 in epoch 0"):
        check_sources([Source("a", weight=0), Source("b", weight=0)], "train_files")


def test_epoch_size_needs_weights() -> None:
    with pytest.raises(ValueError, match="epoch_size= splits the epoch between weighted"):
        quotas([Source("a", repeat=1)], [3], 10)


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=4), min_size=1, max_size=3),
    data=st.data(),
)
def test_quotas_are_exact_and_passes_never_repeat_a_record_early(counts, data) -> None:
    sizes = [sum(c) for c in counts]
    quota = [data.draw(st.integers(0, 3 * n)) if n else 0 for n in sizes]
    seen: list[list[int]] = [[] for _ in counts]
    for epoch in range(4):
        plan = [(s, epoch * q, q) for s, q in enumerate(quota)]
        pieces = epoch_pieces(counts, plan, seed=7, epoch=epoch)
        ids = record_ids(pieces, counts)
        assert Counter(s for s, _ in ids) == Counter({s: q for s, q in enumerate(quota) if q})
        for s, i in ids:
            seen[s].append(i)
    for s, n in enumerate(sizes):
        # Pass after pass: each block of n draws is every record of the source exactly once.
        run = seen[s]
        for p in range(len(run) // n if n else 0):
            assert sorted(run[p * n : (p + 1) * n]) == list(range(n))
        tail = run[(len(run) // n) * n :] if n else []
        assert len(set(tail)) == len(tail)


def test_a_downsampled_source_continues_where_it_stopped() -> None:
    counts = [[30, 20], [10]]
    quota = [20, 10]  # source 0: 20 of its 50 records per epoch
    epochs = [
        [
            i
            for s, i in record_ids(
                epoch_pieces(counts, [(k, e * q, q) for k, q in enumerate(quota)], 3, e), counts
            )
            if s == 0
        ]
        for e in range(5)
    ]
    assert sorted(epochs[0] + epochs[1] + epochs[2][:10]) == list(range(50))  # one pass first
    assert len(set(epochs[0]) | set(epochs[1])) == 40


def test_sources_interleave_and_the_order_is_seeded() -> None:
    counts = [[2000], [2000]]
    plan = [(0, 0, 2000), (1, 0, 2000)]
    pieces = epoch_pieces(counts, plan, seed=1, epoch=0, chunk=100)
    sources = [p.source for p in pieces]
    switches = sum(1 for a, b in zip(sources, sources[1:], strict=False) if a != b)
    assert switches >= 10  # interleaved, not one source after the other
    assert pieces == epoch_pieces(counts, plan, seed=1, epoch=0, chunk=100)
    assert pieces != epoch_pieces(counts, plan, seed=1, epoch=1, chunk=100)
    plain = epoch_pieces(counts, plan, seed=1, epoch=0, shuffle=False)
    assert [(p.source, p.start, p.stop) for p in plain] == [(0, 0, 2000), (1, 0, 2000)]
