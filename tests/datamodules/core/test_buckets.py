"""BucketBatchSampler: exactly once, budget respected, even across ranks, seeded, resumable."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler

from datamodules.core.buckets import BucketBatchSampler, pack_by_tokens, split_into_pieces
from datamodules.core.samplers import IndexBatchSampler

lengths_strategy = st.lists(st.integers(min_value=0, max_value=60), min_size=1, max_size=250)


def per_rank(lengths: list[int], world: int, epoch: int = 0, **kw: object) -> list[list[list[int]]]:
    out = []
    for rank in range(world):
        sampler = BucketBatchSampler(lengths, num_replicas=world, rank=rank, **kw)
        sampler.set_epoch(epoch)
        batches = [b.tolist() for b in sampler]
        assert len(batches) == len(sampler)
        assert all(b.dtype == torch.int64 for b in sampler)
        out.append(batches)
    return out


def padded_total(lengths: list[int], world: int, **kw: object) -> int:
    return sum(
        BucketBatchSampler(lengths, num_replicas=world, rank=r, **kw).num_padded
        for r in range(world)
    )


def check_exactly_once(ranks: list[list[list[int]]], n: int, padded: int) -> None:
    assert len({len(batches) for batches in ranks}) == 1, "every rank needs the same count"
    assert all(len(b) >= 1 for batches in ranks for b in batches), "no empty batch"
    flat = [i for batches in ranks for b in batches for i in b]
    assert len(flat) == n + padded
    assert set(flat) == set(range(n))
    if padded == 0:
        assert sorted(flat) == list(range(n))


@settings(max_examples=150, deadline=None)
@given(
    lengths=lengths_strategy,
    batch=st.integers(min_value=1, max_value=24),
    world=st.integers(min_value=1, max_value=6),
    shuffle=st.booleans(),
    bucket=st.booleans(),
    pool=st.integers(min_value=1, max_value=5),
    epoch=st.integers(min_value=0, max_value=3),
)
@example(lengths=[1, 0], batch=1, world=1, shuffle=False, bucket=True, pool=1, epoch=0)
def test_by_samples_every_sample_once_and_even(
    lengths: list[int], batch: int, world: int, shuffle: bool, bucket: bool, pool: int, epoch: int
) -> None:
    kw = {"batch_size": batch, "shuffle": shuffle, "bucket": bucket, "pool_batches": pool}
    ranks = per_rank(lengths, world, epoch, **kw)
    n = len(lengths)
    check_exactly_once(ranks, n, padded_total(lengths, world, **kw))
    assert all(len(b) <= batch for batches in ranks for b in batches)
    # The same count per rank as IndexBatchSampler: ceil(ceil(N / W) / B).
    assert len(ranks[0]) == len(IndexBatchSampler(n, batch, num_replicas=world))
    if n >= world * len(ranks[0]):
        assert padded_total(lengths, world, **kw) == 0
    if world == 1 and bucket and not shuffle:  # evaluation buckets: sorted by length
        # A sample costs its length, at least 1 (an empty one takes a row too), so lengths 0
        # and 1 sort as equals and keep their order.
        order = [max(lengths[i], 1) for b in ranks[0] for i in b]
        assert order == sorted(max(length, 1) for length in lengths)


@settings(max_examples=150, deadline=None)
@given(
    lengths=lengths_strategy,
    budget=st.integers(min_value=60, max_value=400),
    cap=st.one_of(st.none(), st.integers(min_value=1, max_value=30)),
    world=st.integers(min_value=1, max_value=6),
    shuffle=st.booleans(),
    pool=st.integers(min_value=1, max_value=5),
    multiple=st.sampled_from([None, 4]),
    epoch=st.integers(min_value=0, max_value=3),
)
def test_by_tokens_budget_respected_every_sample_once_and_even(
    lengths: list[int],
    budget: int,
    cap: int | None,
    world: int,
    shuffle: bool,
    pool: int,
    multiple: int | None,
    epoch: int,
) -> None:
    kw = {
        "batch_size": cap,
        "batch_by": "tokens",
        "max_tokens": budget,
        "shuffle": shuffle,
        "pool_batches": pool,
        "pad_to_multiple_of": multiple,
    }
    ranks = per_rank(lengths, world, epoch, **kw)
    check_exactly_once(ranks, len(lengths), padded_total(lengths, world, **kw))
    for batches in ranks:
        for b in batches:
            longest = max(max(lengths[i] for i in b), 1)
            if multiple:
                longest = -(-longest // multiple) * multiple
            assert len(b) * longest <= budget
            assert cap is None or len(b) <= cap


def lognormal(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.exp(rng.normal(3.2, 0.8, n)), 1, 512).astype(np.int64)


def test_bucketing_pads_little_and_changes_composition_between_epochs() -> None:
    lengths = lognormal(4000)
    bucketed = BucketBatchSampler(lengths, 32, seed=1)
    plain = BucketBatchSampler(lengths, 32, bucket=False, seed=1)
    assert bucketed.padding_efficiency(0) > 0.93
    assert plain.padding_efficiency(0) < 0.4
    epochs = [{tuple(sorted(b.tolist())) for b in bucketed.epoch_batches(e)} for e in (0, 1)]
    assert len(epochs[0] & epochs[1]) < 0.05 * len(epochs[0])


def test_epoch_is_a_function_of_seed_and_epoch() -> None:
    lengths = lognormal(500)
    a, b = BucketBatchSampler(lengths, 8, seed=3), BucketBatchSampler(lengths, 8, seed=3)
    a.set_epoch(2)
    b.set_epoch(2)
    assert [x.tolist() for x in a] == [x.tolist() for x in b]
    a.set_epoch(2)
    b.set_epoch(3)
    assert [x.tolist() for x in a] != [x.tolist() for x in b]
    a.set_epoch(2)
    c = BucketBatchSampler(lengths, 8, seed=4)
    c.set_epoch(2)
    assert [x.tolist() for x in a] != [x.tolist() for x in c]


def test_without_shuffle_buckets_sort_by_length_and_plain_keeps_order() -> None:
    lengths = [5, 1, 4, 1, 3, 2]
    sampler = BucketBatchSampler(lengths, 2, shuffle=False)
    assert [b.tolist() for b in sampler] == [[1, 3], [5, 4], [2, 0]]
    plain = BucketBatchSampler(lengths, 4, shuffle=False, bucket=False)
    assert [b.tolist() for b in plain] == [[0, 1, 2, 3], [4, 5]]


def test_token_budget_packing_is_greedy() -> None:
    assert pack_by_tokens(np.array([1, 1, 2, 2, 5, 5]), 6) == [3, 1, 1, 1]
    assert pack_by_tokens(np.array([1, 1, 1, 1]), 100, max_size=3) == [3, 1]
    sampler = BucketBatchSampler([1, 1, 2, 2, 5, 5], None, batch_by="tokens", max_tokens=10)
    assert sorted(len(b) for b in sampler) == [2, 4]


def test_split_into_pieces_halves_the_largest_batches_first() -> None:
    batches = [torch.arange(0, 4), torch.arange(4, 6), torch.arange(6, 7)]
    pieces = split_into_pieces(batches, 5)
    assert [p.tolist() for p in pieces] == [[0, 1], [2, 3], [4], [5], [6]]


def test_batches_are_split_so_that_every_rank_has_the_same_count() -> None:
    # 5 batches of 4 for 2 ranks: one batch is split in two, nothing repeated or dropped.
    ranks = per_rank(list(range(20)), 2, batch_size=4, shuffle=False)
    assert [len(r) for r in ranks] == [3, 3]
    assert sorted(len(b) for r in ranks for b in r) == [2, 2, 4, 4, 4, 4]
    check_exactly_once(ranks, 20, 0)


def test_fewer_samples_than_ranks_pads_and_counts() -> None:
    ranks = per_rank([3, 1, 2], 4, batch_size=8)
    assert [len(r) for r in ranks] == [1, 1, 1, 1]
    assert padded_total([3, 1, 2], 4, batch_size=8) == 1
    check_exactly_once(ranks, 3, 1)


def test_drop_last_gives_full_batches_and_counts_the_dropped() -> None:
    lengths = lognormal(103)
    ranks = per_rank(list(lengths), 2, batch_size=10, drop_last=True)
    assert [len(r) for r in ranks] == [5, 5]
    assert all(len(b) == 10 for r in ranks for b in r)
    flat = [i for r in ranks for b in r for i in b]
    assert len(set(flat)) == len(flat) == 100
    assert BucketBatchSampler(lengths, 10, drop_last=True, num_replicas=2, rank=0).num_dropped == 3


@pytest.mark.parametrize("batch_by", ["samples", "tokens"])
def test_resume_skips_consumed_batches_of_the_saved_epoch(batch_by: str) -> None:
    lengths = lognormal(300)
    kw = (
        {"batch_size": 8}
        if batch_by == "samples"
        else {"batch_size": None, "batch_by": "tokens", "max_tokens": 600}
    )
    sampler = BucketBatchSampler(lengths, seed=5, num_replicas=2, rank=1, **kw)
    sampler.set_epoch(3)
    full = [b.tolist() for b in sampler]
    state = sampler.state_dict(consumed_batches=4)
    fresh = BucketBatchSampler(lengths, seed=5, num_replicas=2, rank=1, **kw)
    fresh.load_state_dict(state)
    assert [b.tolist() for b in fresh] == full[4:]
    fresh.set_epoch(4)
    assert len(list(fresh)) == len(full)


def test_resume_refuses_other_lengths_or_budget() -> None:
    lengths = lognormal(100)
    state = BucketBatchSampler(lengths, 8).state_dict(consumed_batches=1)
    with pytest.raises(ValueError, match="lengths differ"):
        BucketBatchSampler(lengths + 1, 8).load_state_dict(state)
    with pytest.raises(ValueError, match="pool_batches=1000"):
        BucketBatchSampler(lengths, 8, pool_batches=10).load_state_dict(state)


def test_is_a_distributed_sampler_so_lightning_keeps_it() -> None:
    assert isinstance(BucketBatchSampler([1, 2, 3], 2), DistributedSampler)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"batch_by": "tokens"}, ValueError, "needs max_tokens"),
        ({"batch_by": "words"}, ValueError, "batch_by='words'"),
        ({"max_tokens": 10}, ValueError, "no effect with batch_by='samples'"),
        ({"batch_by": "tokens", "max_tokens": 10, "drop_last": True}, ValueError, "drop_last"),
        ({"batch_by": "tokens", "max_tokens": 10, "bucket": False}, ValueError, "bucket=True"),
        ({"batch_size": 0}, ValueError, "batch_size=0"),
        ({"pool_batches": 0}, ValueError, "pool_batches=0"),
        ({"bucket": "yes"}, TypeError, "bucket='yes'"),
    ],
)
def test_bad_arguments(kwargs: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        BucketBatchSampler([1, 2, 3], **kwargs)


def test_a_sample_longer_than_the_budget_is_refused_early_naming_it() -> None:
    with pytest.raises(ValueError, match=r"sample 2 has length 30, more than max_tokens=20"):
        BucketBatchSampler([3, 4, 30], None, batch_by="tokens", max_tokens=20)
    with pytest.raises(ValueError, match=r"lengths\[1\]=-2 is negative"):
        BucketBatchSampler([3, -2], 2)
    with pytest.raises(TypeError, match="1-D sequence of ints"):
        BucketBatchSampler([1.5, 2.0], 2)


def test_an_epoch_needing_more_batches_than_the_fixed_count_is_repooled() -> None:
    """White-box: force the fixed count down to the fewest batches possible (a full sort)."""
    lengths = lognormal(2000, seed=3)
    kw = {"batch_by": "tokens", "max_tokens": 600, "pool_batches": 2}
    fewest = len(BucketBatchSampler(lengths, None, shuffle=False, **kw))
    sampler = BucketBatchSampler(lengths, None, seed=0, **kw)
    assert len(sampler._global_batches(0, probe=True)) > fewest  # small pools need more
    sampler._num_batches = sampler._total = fewest
    batches = sampler.epoch_batches(0)
    assert len(batches) == fewest
    assert sorted(torch.cat(batches).tolist()) == list(range(2000))
    assert all(len(b) * int(lengths[b.numpy()].max()) <= 600 for b in batches)
