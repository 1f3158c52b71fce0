"""Elastic resume of the whole-batch samplers: another world size or batch size, exactly once.

Every layout combination runs in-process on the samplers themselves (one sampler per rank);
the contract test runs the real thing through the Trainer under DDP for each DataModule.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from datamodules.core.buckets import BucketBatchSampler
from datamodules.core.elastic import Segment, deal
from datamodules.core.samplers import IndexBatchSampler

N = 103
LENGTHS = torch.randint(1, 30, (N,), generator=torch.Generator().manual_seed(0))


def make(kind: str, world: int, rank: int, batch_size: int | None = None) -> IndexBatchSampler:
    if kind == "index":
        return IndexBatchSampler(N, batch_size or 4, num_replicas=world, rank=rank, seed=3)
    if kind == "buckets":
        return BucketBatchSampler(
            LENGTHS, batch_size or 4, num_replicas=world, rank=rank, seed=3, pool_batches=3
        )
    return BucketBatchSampler(
        LENGTHS, None, batch_by="tokens", max_tokens=60, num_replicas=world, rank=rank, seed=3,
        pool_batches=3,
    )  # fmt: skip


def consume(samplers: list[IndexBatchSampler], epoch: int, batches: int) -> list[int]:
    """Every rank takes its first ``batches`` batches of ``epoch``; the ids they saw."""
    seen: list[int] = []
    for sampler in samplers:
        sampler.set_epoch(epoch)
        iterator = iter(sampler)
        for _ in range(batches):
            seen += next(iterator).tolist()
    return seen


def resume(state: dict, samplers: list[IndexBatchSampler]) -> tuple[list[int], list[int]]:
    """Each rank resumes from ``state`` and runs out its epoch: the ids, and batches per rank."""
    seen, counts = [], []
    for sampler in samplers:
        sampler.load_state_dict(state)
        expected = sampler.epoch_length()
        assert len(sampler) >= expected  # a Trainer reading the length never stops it early
        batches = list(sampler)
        assert expected == state["batches_consumed"] + len(batches)
        counts.append(len(batches))
        seen += [i for batch in batches for i in batch.tolist()]
    return seen, counts


@pytest.mark.parametrize("kind", ["index", "buckets", "tokens"])
@pytest.mark.parametrize("old_world", [1, 2, 3])
@pytest.mark.parametrize("new_world", [1, 2, 3])
@pytest.mark.parametrize("consumed", [0, 1, 4])
def test_every_layout_resumes_exactly_once_and_even(
    kind: str, old_world: int, new_world: int, consumed: int
) -> None:
    old = [make(kind, old_world, r) for r in range(old_world)]
    seen = consume(old, 1, consumed)
    state = old[0].state_dict(consumed_batches=consumed)
    new_batch = None if kind == "tokens" else 3  # the resumed run may change its batch size
    new = [make(kind, new_world, r, new_batch) for r in range(new_world)]
    rest, counts = resume(state, new)
    assert sorted(seen + rest) == list(range(N))
    assert len(set(counts)) == 1
    # The next epoch is exactly a fresh run's on the new layout.
    after = [[b.tolist() for b in sampler] for sampler in new]
    fresh = [make(kind, new_world, r, new_batch) for r in range(new_world)]
    for sampler in fresh:
        sampler.set_epoch(2)
    assert after == [[b.tolist() for b in sampler] for sampler in fresh]


@settings(max_examples=40, deadline=None)
@given(
    worlds=st.lists(st.integers(1, 4), min_size=2, max_size=4),
    steps=st.lists(st.integers(0, 6), min_size=3, max_size=3),
    batch_sizes=st.lists(st.integers(1, 9), min_size=4, max_size=4),
    n=st.integers(1, 60),
)
def test_nested_resumes_deliver_each_sample_once(
    worlds: list[int], steps: list[int], batch_sizes: list[int], n: int
) -> None:
    # Interrupted again and again within one epoch, each time on another layout.
    def sampler(world: int, rank: int, batch_size: int) -> IndexBatchSampler:
        return IndexBatchSampler(n, batch_size, num_replicas=world, rank=rank, seed=5)

    seen: list[int] = []
    repeats = 0
    state = None
    for run, world in enumerate(worlds):
        ranks = [sampler(world, r, batch_sizes[run]) for r in range(world)]
        for rank in ranks:
            if state is None:
                rank.set_epoch(0)
            else:
                rank.load_state_dict(state)
        if ranks[0].ended_length is not None:  # the checkpoint saw the epoch end
            assert ranks[0].epoch == 1 and len(ranks[0]) == state["batches_consumed"]
            break
        lengths = {rank.epoch_length() for rank in ranks}
        assert len(lengths) == 1  # every rank the same number of batches
        length = lengths.pop()
        done = 0 if state is None else state["batches_consumed"]
        last = run == len(worlds) - 1
        take = length - done if last else min(steps[run], length - done)
        for rank in ranks:
            iterator = iter(rank)
            for _ in range(take):
                seen += next(iterator).tolist()
        if take and done + take == length:  # this run finished the epoch: its repeats
            fresh = state is None or not ranks[0]._segments
            repeats += sum(r.num_padded for r in ranks) if fresh else ranks[0].resume_repeats
        state = ranks[0].state_dict(consumed_batches=done + take)
    assert sorted(set(seen)) == list(range(n))
    assert len(seen) == n + repeats


def test_a_remainder_smaller_than_the_ranks_repeats_counted_samples() -> None:
    left = torch.tensor([7, 9])
    layout, repeated = deal(left, 3, lambda p, s: list(p.split(4)), None, False)
    assert repeated == 1 and [len(r) for r in layout] == [1, 1, 1]
    assert sorted(int(b) for r in layout for b in r[0]) == [7, 7, 9]


def test_the_state_stays_small() -> None:
    sizes = []
    for n in (1_000, 1_000_000):
        sampler = IndexBatchSampler(n, 32, num_replicas=2, rank=0)
        sizes.append(len(json.dumps(sampler.state_dict(consumed_batches=7))))
    assert abs(sizes[0] - sizes[1]) <= 4  # the digits of num_samples, nothing per sample
    assert Segment.from_dict(Segment(2, 1, 32, 7).to_dict()) == Segment(2, 1, 32, 7)


def layouts(sampler_states: dict, make: Callable[[], list[IndexBatchSampler]]) -> list:
    out = []
    for exact_below in (0, 1 << 62):  # the way in O(share), then the exact one
        ranks = make()
        for rank in ranks:
            rank.exact_below = exact_below
            rank.load_state_dict(sampler_states)
        out.append(
            [
                ([p.tolist() for p in rank._elastic_layout()[1]], rank.resume_repeats)
                if rank._segments
                else None
                for rank in ranks
            ]
        )
    return out


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 300),
    worlds=st.lists(st.integers(1, 9), min_size=2, max_size=4),
    batch_sizes=st.lists(st.integers(1, 12), min_size=4, max_size=4),
    fractions=st.lists(st.floats(0, 1), min_size=3, max_size=3),
    drop_last=st.booleans(),
)
def test_the_layout_in_o_share_equals_the_exact_one(
    n: int, worlds: list[int], batch_sizes: list[int], fractions: list[float], drop_last: bool
) -> None:
    # Chains of resumes on other world and batch sizes, interrupted anywhere (at the start,
    # mid-epoch, at the last batches): every rank's batches and repeats agree.
    state = None
    for run, world in enumerate(worlds):

        def make(world: int = world, run: int = run) -> list[IndexBatchSampler]:
            return [
                IndexBatchSampler(
                    n, batch_sizes[run], num_replicas=world, rank=r, seed=7, drop_last=drop_last
                )  # fmt: skip
                for r in range(world)
            ]

        if state is not None:
            fast, exact = layouts(state, make)
            assert fast == exact
        ranks = make()
        for rank in ranks:
            if state is None:
                rank.set_epoch(0)
            else:
                rank.load_state_dict(state)
        if ranks[0].ended_length is not None or run == len(worlds) - 1:
            break
        length = ranks[0].epoch_length()
        done = 0 if state is None else state["batches_consumed"]
        take = round(fractions[run] * (length - done))
        state = ranks[0].state_dict(consumed_batches=done + take)


def test_a_100k_split_resumes_by_the_way_in_o_share() -> None:
    # 100,000 samples on 8 ranks, 1,000 batches per rank in: only the runs' edges are built.
    state = IndexBatchSampler(100_000, 10, num_replicas=8, rank=0).state_dict(consumed_batches=1000)
    ranks = [IndexBatchSampler(100_000, 7, num_replicas=5, rank=r) for r in range(5)]
    for rank in ranks:
        rank.load_state_dict(state)
    assert all(rank._fast_elastic_layout(rank.with_layout(rank._segments[0]), 100_000)
               is not None for rank in ranks)  # fmt: skip
    seen = [int(i) for rank in ranks for batch in rank for i in batch]
    first = IndexBatchSampler(100_000, 10, num_replicas=8, rank=0)
    consumed = [int(i) for r in range(8) for b in first.with_layout(Segment(8, 1, 10, 0))
                ._batches_from(first.permutation(0), r)[:1000] for i in b]  # fmt: skip
    assert sorted(seen + consumed) == list(range(100_000))
    assert len({len(rank) for rank in ranks}) == 1
