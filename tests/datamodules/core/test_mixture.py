"""Mixture arithmetic: weight schedules, quotas per epoch, runs of passes as quotas move, and a
mix continued from a checkpoint (changed or not)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datamodules.core.mixture import MixEntry, Mixture, Source, check_sources, weight_at
from datamodules.stream_engine.mixing import epoch_pieces


def test_a_schedule_is_linear_between_points_and_constant_outside() -> None:
    schedule = [[2, 1], [6, 3], [8, 0]]
    assert [weight_at(schedule, e) for e in (0, 2, 3, 4, 6, 7, 8, 20)] == [
        1, 1, 1.5, 2, 3, 1.5, 0, 0,
    ]  # fmt: skip
    assert weight_at(0.5, 9) == 0.5
    source = Source("a", weight=((0, 1), (4.5, 2)))
    assert source.weight == [[0, 1], [4.5, 2]] and Source(**source.to_plain()) == source


def test_quotas_follow_the_schedule_by_largest_remainder() -> None:
    mix = Mixture(
        [MixEntry("a", [[0, 3], [2, 1]], None, 100), MixEntry("b", 1, None, 100)], epoch_size=40
    )
    assert [mix.quotas(e) for e in range(4)] == [[30, 10], [27, 13], [20, 20], [20, 20]]
    assert [mix.starts(e) for e in range(4)] == [[0, 0], [30, 10], [57, 23], [77, 43]]
    default = Mixture([MixEntry("a", [[0, 1], [1, 0]], None, 30), MixEntry("b", 1, None, 10)])
    assert default.quotas(0) == [20, 20] and default.quotas(1) == [0, 40]  # all 40 records


def test_an_epoch_whose_weights_are_all_zero_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"train_files: every source's weight is 0 in epoch 2"):
        check_sources(
            [Source("a", weight=[[0, 1], [2, 0]]), Source("b", weight=[[0, 0], [3, 0], [4, 1]])],
            "train_files",
        )
    check_sources([Source("a", weight=[[0, 0], [1, 1]]), Source("b", weight=1)], "train_files")


schedules = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 4)),
    min_size=1,
    max_size=3,
    unique_by=lambda p: p[0],
).map(lambda points: sorted([list(p) for p in points]))


@settings(max_examples=50, deadline=None)
@given(
    counts=st.lists(st.lists(st.integers(1, 30), min_size=1, max_size=3), min_size=1, max_size=3),
    weights=st.lists(schedules, min_size=3, max_size=3),
    epoch_size=st.integers(1, 120),
)
def test_quotas_are_exact_and_no_record_repeats_within_a_pass_as_quotas_move(
    counts, weights, epoch_size
) -> None:
    entries = [MixEntry(str(s), weights[s], None, sum(c)) for s, c in enumerate(counts)]
    try:
        mix = Mixture(entries, epoch_size)
        mix.quotas(0)
    except ValueError:
        return  # an all-zero epoch: refused
    names = [e.name for e in entries]
    seen: list[Counter[int]] = [Counter() for _ in counts]
    for epoch in range(7):
        try:
            plan = mix.plan(epoch)
        except ValueError:
            return
        pieces = epoch_pieces(counts, plan, seed=3, epoch=epoch, names=names)
        got = Counter()
        for p in pieces:
            offset = sum(counts[p.source][: p.shard])
            for i in range(p.start, p.stop):
                seen[p.source][offset + i] += 1
                got[p.source] += 1
        assert [got[s] for s in range(len(counts))] == mix.quotas(epoch)
        for s, c in enumerate(counts):  # each record k or k + 1 times so far
            drawn = [seen[s][i] for i in range(sum(c))]
            assert max(drawn) - min(drawn) <= 1


def entry(name: str, weight: object, units: int = 50) -> MixEntry:
    return MixEntry(name, weight, None, units, [[f"{name}.jsonl", units]])


def test_a_resumed_mix_ends_the_interrupted_epoch_as_planned_then_applies() -> None:
    old = Mixture([entry("a", 3), entry("b", 1), entry("c", 1)], epoch_size=20)
    saved = old.state(2)  # a: 12 per epoch, b and c: 4
    assert [s["start"] for s in saved["sources"]] == [24, 8, 8]
    new = Mixture([entry("a", 1), entry("b", 1), entry("d", 2)], epoch_size=20)
    resumed = new.resumed(saved, interrupted=True)
    assert resumed.by_name(2) == {"a": 12, "b": 4, "c": 4, "d": 0}  # as planned
    assert resumed.plan(2) == [(0, 24, 12), (1, 8, 4), (3, 8, 4)]  # c kept, hidden
    assert resumed.by_name(3) == {"a": 5, "b": 5, "d": 10}  # the new mix
    assert resumed.starts(3) == [36, 12, 0, 12]  # each continues; d from its start
    assert resumed.state(3)["sources"][-1] == {  # c keeps its place
        "name": "c", "weight": 1, "repeat": None, "units": 50, "listing": [["c.jsonl", 50]],
        "hidden": True, "start": 12, "quota": 0,
    }  # fmt: skip
    at_start = new.resumed(saved, interrupted=False)
    assert at_start.by_name(2) == {"a": 5, "b": 5, "d": 10} and at_start.starts(2)[:2] == [24, 8]
    assert new.changes(saved) == [
        "'a' weight=3 -> weight=1", "'d' added (from its start)", "'c' removed (keeps its place)"
    ]  # fmt: skip
    same = Mixture([entry("a", 3), entry("b", 1), entry("c", 1)], epoch_size=20)
    again = same.resumed(saved, interrupted=True)
    assert [again.plan(e) for e in range(2, 5)] == [old.plan(e) for e in range(2, 5)]
    assert same.changes(saved) == []


def test_a_source_over_other_data_under_its_old_name_is_refused() -> None:
    saved = Mixture([entry("a", 1), entry("b", 1)]).state(1)
    moved = MixEntry("a", 1, None, 50, [["a2.jsonl", 50]])
    with pytest.raises(
        ValueError, match=r"source 'a' holds other data .*no longer has \['a.jsonl'"
    ):
        Mixture([moved, entry("b", 1)]).resumed(saved, interrupted=True)
    grown = MixEntry("b", 1, None, 60, [["b.jsonl", 60]])
    with pytest.raises(ValueError, match=r"other contents in b.jsonl \(\[50\] -> \[60\]\)"):
        Mixture([entry("a", 1), grown]).resumed(saved, interrupted=False)
