"""IndexBatchSampler: exactly-once, disjoint and even across ranks, seeded, resumable."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler

from datamodules.core.samplers import IndexBatchSampler, even_batch_sizes


def rank_batches(n: int, batch: int, world: int, **kw: object) -> list[list[list[int]]]:
    return [
        [b.tolist() for b in IndexBatchSampler(n, batch, num_replicas=world, rank=r, **kw)]
        for r in range(world)
    ]


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=300),
    batch=st.integers(min_value=1, max_value=40),
    world=st.integers(min_value=1, max_value=8),
    shuffle=st.booleans(),
)
def test_every_sample_once_disjoint_and_even(n: int, batch: int, world: int, shuffle: bool) -> None:
    per_rank = rank_batches(n, batch, world, shuffle=shuffle, seed=5)
    counts = {len(batches) for batches in per_rank}
    assert len(counts) == 1, "every rank must yield the same number of batches"
    assert all(len(b) >= 1 for batches in per_rank for b in batches), "no empty batch"
    assert all(len(b) <= batch for batches in per_rank for b in batches)
    flat = [i for batches in per_rank for b in batches for i in b]
    assert set(flat) == set(range(n))
    padded = sum(
        IndexBatchSampler(n, batch, num_replicas=world, rank=r).num_padded for r in range(world)
    )
    assert len(flat) == n + padded
    if n >= world and (batch > 1 or n % world == 0):
        assert padded == 0 and sorted(flat) == list(range(n)), "disjoint when possible"


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=300),
    batch=st.integers(min_value=1, max_value=40),
    world=st.integers(min_value=1, max_value=8),
)
def test_drop_last_gives_full_batches_and_equal_counts(n: int, batch: int, world: int) -> None:
    per_rank = rank_batches(n, batch, world, drop_last=True)
    assert len({len(b) for b in per_rank}) == 1
    assert all(len(b) == batch for batches in per_rank for b in batches)
    flat = [i for batches in per_rank for b in batches for i in b]
    assert len(flat) == len(set(flat))
    assert len(flat) == (n // world // batch) * batch * world


def test_permutation_is_seeded_by_seed_plus_epoch_and_same_on_every_rank() -> None:
    a = IndexBatchSampler(100, 10, seed=3, num_replicas=2, rank=0)
    b = IndexBatchSampler(100, 10, seed=3, num_replicas=2, rank=1)
    assert torch.equal(a.permutation(4), b.permutation(4))
    assert torch.equal(
        a.permutation(4), torch.randperm(100, generator=torch.Generator().manual_seed(7))
    )
    assert not torch.equal(a.permutation(0), a.permutation(1))


def test_no_shuffle_keeps_order() -> None:
    assert [b.tolist() for b in IndexBatchSampler(7, 3, shuffle=False)] == [
        [0, 1, 2],
        [3, 4, 5],
        [6],
    ]


def test_is_a_distributed_sampler_so_lightning_keeps_it() -> None:
    assert isinstance(IndexBatchSampler(10, 2), DistributedSampler)


def test_resume_skips_consumed_batches_of_the_saved_epoch_only() -> None:
    sampler = IndexBatchSampler(50, 4, seed=1)
    sampler.set_epoch(2)
    full = [b.tolist() for b in sampler]
    state = sampler.state_dict(consumed_batches=5)
    fresh = IndexBatchSampler(50, 4, seed=1)
    fresh.load_state_dict(state)
    assert [b.tolist() for b in fresh] == full[5:]
    fresh.set_epoch(3)
    assert len([b for b in fresh]) == len(full)  # the next epoch is whole


def test_resume_refuses_another_seed_naming_it() -> None:
    state = IndexBatchSampler(50, 4, num_replicas=2, rank=0, seed=1).state_dict(consumed_batches=1)
    with pytest.raises(ValueError, match="seed=1, this run has seed=2; keep seed"):
        IndexBatchSampler(50, 4, num_replicas=4, rank=0, seed=2).load_state_dict(state)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_samples": 10, "batch_size": 0}, "batch_size=0"),
        ({"num_samples": -1, "batch_size": 2}, "num_samples=-1"),
        ({"num_samples": 10, "batch_size": 2, "num_replicas": 2, "rank": 2}, "rank=2"),
    ],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        IndexBatchSampler(**kwargs)


def test_even_batch_sizes() -> None:
    assert even_batch_sizes(9, 3, 4) == [4, 4, 1]
    assert even_batch_sizes(8, 3, 4) == [4, 2, 2]
    assert even_batch_sizes(4, 2, 4) == [2, 2]
    with pytest.raises(ValueError):
        even_batch_sizes(2, 3, 4)
