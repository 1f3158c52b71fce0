"""MixedBudgetSampler alone: each epoch's units once under the budget on any world size, ids
that carry the epoch, per-epoch batch counts, top-ups when units are fewer than batches,
elastic resume, a unit over the budget named."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datamodules.core.mixture import MixEntry, Mixture
from datamodules.tokens.mixed_budget import MixedBudgetSampler
from datamodules.tokens.mixture import EPOCH_SHIFT, UNIT_MASK

BUDGET = 200


def lengths(epoch: int) -> np.ndarray:
    """Each epoch's 20 units, of lengths 10 .. 99 that differ by epoch."""
    return (np.arange(20) * 37 + epoch * 11) % 90 + 10


def sampler(rank: int, world: int, **kwargs) -> MixedBudgetSampler:
    mixture = Mixture([MixEntry("a", 3, None, 30), MixEntry("b", 1, None, 10)], epoch_size=20)
    options = {"seed": 5, "num_replicas": world, "rank": rank, **kwargs}
    return MixedBudgetSampler(mixture, options.pop("lengths", lengths), BUDGET, True, **options)


def cost(batch: torch.Tensor, epoch: int) -> int:
    return len(batch) * int(lengths(epoch)[(batch & UNIT_MASK).numpy()].max())


@pytest.mark.parametrize("world", [1, 2, 3])
def test_every_unit_once_per_epoch_under_the_budget_and_even(world: int) -> None:
    counts = []
    for epoch in range(3):
        shares = [sampler(r, world).batches(epoch) for r in range(world)]
        assert len({len(s) for s in shares}) == 1
        ids = torch.cat([b for s in shares for b in s])
        assert sorted((ids & UNIT_MASK).tolist()) == list(range(20))
        assert set((ids >> EPOCH_SHIFT).tolist()) == {epoch}
        assert all(cost(b, epoch) <= BUDGET for s in shares for b in s)
        counts.append(len(shares[0]))
    one = sampler(0, 1)
    assert [one.count(e) for e in range(3)] == [len(one.batches(e)) for e in range(3)]
    assert counts == [-(-one.count(e) // world) for e in range(3)]


def test_fewer_units_than_batches_top_up_and_a_unit_over_the_budget_is_named() -> None:
    few = [sampler(r, 3, lengths=lambda e: np.full(20, 190)) for r in range(3)]
    assert [len(s.batches(0)) for s in few] == [7, 7, 7]  # one unit a batch: 20 batches
    assert [s.num_padded for s in few] == [0, 0, 1]  # 21 slots for 20 units: one repeated
    ids = torch.cat([b for s in few for b in s.batches(0)]) & UNIT_MASK
    assert len(ids) == 21 and set(ids.tolist()) == set(range(20))
    with pytest.raises(ValueError, match=r"unit 3 of epoch 0 has length 201, more than "):
        sampler(0, 1, lengths=lambda e: np.where(np.arange(20) == 3, 201, 10))


def test_elastic_resume_on_another_world_size_delivers_the_rest_once() -> None:
    first = [sampler(r, 2) for r in range(2)]
    head = [next(iter(s)) for s in first]
    state = first[0].state_dict()
    rest = []
    for rank in range(3):
        resumed = sampler(rank, 3)
        resumed.load_state_dict(state)
        rest.append(list(resumed))
    assert len({len(r) for r in rest}) == 1
    ids = torch.cat(head + [b for r in rest for b in r])
    assert sorted((ids & UNIT_MASK).tolist()) == list(range(20))
    assert all(cost(b, 0) <= BUDGET for r in rest for b in r)
    again = sampler(0, 3)
    again.load_state_dict(state)
    assert [b.tolist() for b in again] == [b.tolist() for b in rest[0]]  # the same plan
