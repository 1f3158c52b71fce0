"""Aspect-ratio batches: one group a batch, each image once an epoch, the same count on every
rank, exact resume; evaluation shares give every image once with no repeats."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datamodules.detection.grouping import (
    ExactEvalSampler,
    GroupedBatchSampler,
    aspect_ratio_groups,
)

#: 23 images in 3 groups of uneven sizes.
GROUPS = torch.tensor([i % 3 if i < 15 else 0 for i in range(23)])


def test_groups_are_torchvisions_bins() -> None:
    ratios = np.array([0.4, 0.99, 1.0, 1.7, 3.0])
    assert aspect_ratio_groups(ratios).tolist() == [0, 0, 1, 1, 1]
    # factor 1: edges 0.5, 1, 2 -> four groups
    assert aspect_ratio_groups(ratios, 1).tolist() == [0, 1, 2, 2, 3]


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("batch_size", [2, 4])
def test_batches_hold_one_group_cover_the_epoch_and_are_even(world: int, batch_size: int) -> None:
    for epoch in range(3):
        per_rank, counts = [], []
        for rank in range(world):
            sampler = GroupedBatchSampler(GROUPS, batch_size, seed=7, num_replicas=world, rank=rank)
            sampler.set_epoch(epoch)
            batches = list(sampler)
            assert len(batches) == len(sampler)
            for batch in batches:
                assert len(set(GROUPS[batch].tolist())) == 1 and 0 < len(batch) <= batch_size
            per_rank.append([i for b in batches for i in b.tolist()])
            counts.append(len(batches))
        assert len(set(counts)) == 1
        everything = sorted(i for share in per_rank for i in share)
        assert everything == list(range(len(GROUPS)))


def test_drop_last_keeps_full_batches_and_equal_counts() -> None:
    counts = []
    for rank in range(2):
        sampler = GroupedBatchSampler(GROUPS, 3, drop_last=True, num_replicas=2, rank=rank)
        batches = list(sampler)
        assert all(len(b) == 3 and len(set(GROUPS[b].tolist())) == 1 for b in batches)
        counts.append(len(batches))
    assert counts[0] == counts[1] == len(sampler) == 11 // 3 - 2


def test_resume_yields_exactly_the_rest_of_the_epoch() -> None:
    full = GroupedBatchSampler(GROUPS, 2, seed=3)
    full.set_epoch(1)
    expected = [b.tolist() for b in full]
    sampler = GroupedBatchSampler(GROUPS, 2, seed=3)
    sampler.set_epoch(1)
    seen = []
    for batch in sampler:
        seen.append(batch.tolist())
        if len(seen) == 4:
            break
    state = sampler.state_dict()
    resumed = GroupedBatchSampler(GROUPS, 2, seed=3)
    resumed.load_state_dict(state)
    assert seen + [b.tolist() for b in resumed] == expected


def test_elastic_resume_on_another_world_size_covers_the_rest_once() -> None:
    first = [GroupedBatchSampler(GROUPS, 2, seed=5, num_replicas=2, rank=r) for r in range(2)]
    seen = []
    for sampler in first:
        batches = list(sampler)[:3]
        seen += [i for b in batches for i in b.tolist()]
    state = first[0].state_dict(consumed_batches=3)
    rest = []
    for rank in range(3):
        resumed = GroupedBatchSampler(GROUPS, 2, seed=5, num_replicas=3, rank=rank)
        resumed.load_state_dict(state)
        rest += [i for b in resumed for i in b.tolist()]
    assert sorted(seen + rest) == list(range(len(GROUPS)))


@pytest.mark.parametrize(("n", "world", "batch_size"), [(5, 2, 2), (7, 3, 2), (1, 2, 4), (9, 4, 1)])
def test_eval_gives_every_image_once_across_ranks(n: int, world: int, batch_size: int) -> None:
    seen = []
    for rank in range(world):
        sampler = ExactEvalSampler(n, batch_size, shuffle=False, num_replicas=world, rank=rank)
        batches = list(sampler)
        assert len(batches) == len(sampler)
        seen += [i for b in batches for i in b.tolist()]
    assert sorted(seen) == list(range(n))
