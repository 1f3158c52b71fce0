"""One epoch's length-bucketed batches: by sample count or under a token (sample) budget.

What a length-aware batch sampler decides once per epoch, given the epoch's items and their
costs (effective lengths) and the epoch's seed, shared by
:class:`~datamodules.core.buckets.BucketBatchSampler` (one split, the same items every epoch)
and :class:`~datamodules.tokens.mixed_budget.MixedBudgetSampler` (a mixture: each epoch its
own units). Dealing the batches to ranks, resuming and the batch count per rank stay the
samplers' own. Helpers: :func:`pack_by_tokens` (greedy batches under a budget) and
:func:`pool_bounds` (near-equal pools).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["LengthPlan", "pack_by_tokens", "pool_bounds"]


def pack_by_tokens(costs: np.ndarray, max_tokens: int, max_size: int | None = None) -> list[int]:
    """Cuts a sequence of sample costs greedily into consecutive batches under a token budget.

    A batch ``[i, j)`` is closed before the sample that would make ``size x longest`` exceed
    ``max_tokens`` (or the size exceed ``max_size``). On a length-sorted sequence this gives the
    fewest batches any grouping of these samples can have.

    Args:
        costs: Effective length of each sample, in order (every value in ``[1, max_tokens]``).
        max_tokens: The budget for ``batch size x longest effective length``.
        max_size: Largest batch, or None for no limit besides the budget.

    Returns:
        The batch sizes, in order, summing to ``len(costs)``.
    """
    sizes: list[int] = []
    i, n = 0, len(costs)
    while i < n:
        window = max_tokens // int(costs[i])
        if max_size is not None:
            window = min(window, max_size)
        part = costs[i : i + window]
        cost = np.maximum.accumulate(part) * np.arange(1, len(part) + 1)
        size = max(1, int(np.searchsorted(cost, max_tokens, side="right")))
        sizes.append(size)
        i += size
    return sizes


def pool_bounds(n: int, pool_samples: int, align: int) -> list[int]:
    """Near-equal pool boundaries over ``n`` items, each pool a multiple of ``align``."""
    units = math.ceil(n / align)
    pools = max(1, math.ceil(units / max(1, pool_samples // align)))
    per, extra = divmod(units, pools)
    bounds, start = [0], 0
    for p in range(pools):
        start += (per + (p < extra)) * align
        bounds.append(min(start, n))
    return bounds


@dataclass
class LengthPlan:
    """How an epoch's items become batches (see :meth:`batches`).

    Attributes:
        batch_by: ``"samples"`` (runs of ``batch_size``) or ``"tokens"`` (runs under
            ``max_tokens``, ``size x longest cost``).
        batch_size: Items per batch by samples; by tokens an optional cap (None: none).
        max_tokens: The budget by tokens, else None.
        bucket: Sort by cost (within pools when shuffling).
        pool_batches: Batches per pool when bucketing a shuffled epoch.
        shuffle: A random order from the epoch's seed; else the given order.
        drop_last: Drop a short last batch (by samples).
    """

    batch_by: str
    batch_size: int | None
    max_tokens: int | None
    bucket: bool
    pool_batches: int
    shuffle: bool
    drop_last: bool = False

    def pool_samples(self, costs: np.ndarray) -> int:
        """Items per pool: ``pool_batches`` batches of the expected size."""
        if self.batch_by == "samples":
            assert self.batch_size is not None
            return self.pool_batches * self.batch_size
        assert self.max_tokens is not None
        mean = float(costs.mean()) if len(costs) else 1.0
        expected = max(1, int(self.max_tokens // math.ceil(mean)))
        if self.batch_size is not None:
            expected = min(expected, self.batch_size)
        return self.pool_batches * expected

    def cut(self, order: torch.Tensor, costs: np.ndarray, bounds: list[int]) -> list[torch.Tensor]:
        """Cuts an ordered index tensor into batches, never across a pool boundary
        (``costs``: every item's, indexed by the order's values)."""
        if self.batch_by == "samples":
            return list(order.split(self.batch_size))  # type: ignore[arg-type]
        assert self.max_tokens is not None
        ordered = costs[order.numpy()]
        sizes: list[int] = []
        for start, stop in itertools.pairwise(bounds):
            sizes.extend(pack_by_tokens(ordered[start:stop], self.max_tokens, self.batch_size))
        return list(order.split(sizes))

    def batches(self, costs: np.ndarray, seed: int, limit: int | None = None) -> list[torch.Tensor]:
        """The epoch's batches of positions ``0 .. len(costs) - 1``, in order, from ``seed``.

        1. With ``shuffle``, a random permutation; else the given order.
        2. With ``bucket``, the order is cut into near-equal pools of about ``pool_batches``
           batches (one pool without ``shuffle``), each sorted by cost (stable).
        3. Consecutive runs of ``batch_size``, or under ``max_tokens``, within each pool.
        4. With ``shuffle`` and ``bucket``, the batches are shuffled.

        Args:
            costs: Each item's cost (effective length, at least 1 by tokens).
            seed: The epoch's seed.
            limit: By tokens, the most batches wanted: an epoch that needs more is re-pooled
                with pools twice as large until it fits (a single pool needs the fewest).
        """
        n = len(costs)
        if n == 0:
            return []
        generator = torch.Generator().manual_seed(seed)
        if self.shuffle:
            order = torch.randperm(n, generator=generator)
        else:
            order = torch.arange(n, dtype=torch.int64)
        align = self.batch_size if self.batch_by == "samples" else 1
        assert align is not None
        lengths = torch.from_numpy(costs)
        pool_samples = self.pool_samples(costs) if (self.shuffle and self.bucket) else n
        while True:
            pooled = self.bucket and pool_samples < n
            bounds = pool_bounds(n, pool_samples, align) if pooled else [0, n]
            if self.bucket:
                pool_id = torch.bucketize(torch.arange(n), torch.tensor(bounds[1:]), right=True)
                key = pool_id * (int(costs.max()) + 1) + lengths[order]
                order_sorted = order[torch.sort(key, stable=True).indices]
            else:
                order_sorted = order
            batches = self.cut(order_sorted, costs, bounds)
            fits = limit is None or self.batch_by == "samples" or len(batches) <= limit
            if fits or pool_samples >= n:
                break
            pool_samples *= 2  # too many batches for the fixed count: larger pools pad less
        if self.drop_last and batches and len(batches[-1]) < (self.batch_size or 1):
            batches = batches[:-1]
        if self.shuffle and self.bucket and len(batches) > 1:
            batch_order = torch.randperm(len(batches), generator=generator).tolist()
            batches = [batches[i] for i in batch_order]
        return batches
