"""Budgeted batches over a mixture: each epoch's units cut into length-bucketed batches of at
most ``max_tokens`` (``size x longest``, padding counted), DDP-even, exact and elastic resume.

:class:`MixedBudgetSampler` is :class:`~datamodules.tokens.mixture.MixedSampler` (each epoch
its own units, ids ``epoch << 32 | unit``, the mix saved with the position) whose epochs are
cut by the length plan of :class:`~datamodules.core.buckets.BucketBatchSampler`
(:class:`~datamodules.core.length_plan.LengthPlan`) over the epoch's unit lengths, which the
view gives (for audio: the samples of each of the epoch's clips). Since every epoch holds
other units, the batch count is fixed per epoch, not for the run: epoch ``e`` has
``K(e) = ceil(B(e) / W)`` batches on each of ``W`` ranks for its ``B(e)`` planned batches,
the largest split in two until there are ``W x K(e)``;
:meth:`~MixedBudgetSampler.next_length_differs` says when the Trainer must measure the next
epoch's length anew (:class:`MeasureNextEpoch`).
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from datamodules.core.checks import check_int
from datamodules.core.elastic import Segment, split_into_pieces
from datamodules.core.length_plan import LengthPlan, pack_by_tokens
from datamodules.core.mixture import Mixture
from datamodules.core.trainer_length import remeasure_train_loader
from datamodules.tokens.mixture import EPOCH_SHIFT, UNIT_MASK, MixedSampler, interrupted

__all__ = ["MeasureNextEpoch", "MixedBudgetSampler"]


class MixedBudgetSampler(MixedSampler):
    """A mixture's units in batches under a budget (see the module's docstring).

    Args:
        mixture: The mixture (each epoch's quotas).
        lengths: ``epoch -> lengths`` of that epoch's units, in unit order (ints >= 0).
        max_tokens: The budget per batch: ``size x longest length``.
        shuffle: A new order every epoch (from ``seed + epoch``), pooled buckets of similar
            lengths, batches shuffled; else one pool sorted by length.
        batch_size: The most units a batch may hold, or None (the budget alone).
        pool_batches: Batches per pool when shuffling.
        **kwargs: ``seed``, ``num_replicas``, ``rank``.

    Raises:
        ValueError: A unit longer than the budget (named by its epoch and position).
    """

    def __init__(
        self,
        mixture: Mixture,
        lengths: Callable[[int], np.ndarray],
        max_tokens: int,
        shuffle: bool,
        *,
        batch_size: int | None = None,
        pool_batches: int = 1000,
        **kwargs: Any,
    ) -> None:
        check_int(max_tokens, "max_tokens", 1)
        check_int(batch_size, "batch_size", 1, allow_none=True)
        check_int(pool_batches, "pool_batches", 1)
        self.lengths_of, self.max_tokens, self.pool_batches = lengths, max_tokens, pool_batches
        self._costs: OrderedDict[tuple[int, Mixture], np.ndarray] = OrderedDict()
        super().__init__(mixture, batch_size or 1, shuffle, drop_last=False, **kwargs)
        self.batch_size = batch_size  # type: ignore[assignment]  # a cap, or None
        self._key: tuple[Any, ...] | None = None
        self._global: list[torch.Tensor] = []
        self._dealt: tuple[int, list[torch.Tensor]] | None = None
        self.fit_epoch(0)

    # ------------------------------------------------------------------ planning
    def plan(self) -> LengthPlan:
        """How an epoch's units become batches, for this layout's budget and cap."""
        return LengthPlan(
            "tokens", self.batch_size, self.max_tokens, True, self.pool_batches, self.shuffle
        )

    def costs(self, epoch: int) -> np.ndarray:
        """The lengths of ``epoch``'s units (at least 1), checked against the budget."""
        key = (epoch, self.mixture)  # the object: a resumed mix never reads stale lengths
        cached = self._costs.get(key)
        if cached is None:
            lengths = np.asarray(self.lengths_of(epoch), dtype=np.int64)
            n = self.mixture.total(epoch)
            if lengths.shape != (n,):
                raise ValueError(f"epoch {epoch} has {n} units, but {lengths.shape} lengths.")
            cached = np.maximum(lengths, 1)
            if n and int(cached.max()) > self.max_tokens:
                unit = int(np.argmax(cached))
                raise ValueError(
                    f"unit {unit} of epoch {epoch} has length {int(cached[unit])}, more than "
                    f"max_tokens={self.max_tokens}: no batch can hold it."
                )
            self._costs[key] = cached
            while len(self._costs) > 3:
                self._costs.popitem(last=False)
        return cached

    def planned(self, epoch: int) -> list[torch.Tensor]:
        """All ranks' batches of ``epoch`` as unit positions, before dealing."""
        return self.plan().batches(self.costs(epoch), self.seed + epoch)

    def count(self, epoch: int) -> int:
        """Batches per rank in ``epoch`` on this layout (without a pending resume)."""
        return math.ceil(len(self.planned(epoch)) / self.num_replicas)

    def next_length_differs(self) -> bool:
        """Whether the epoch after the one last dealt has another batch count per rank."""
        return self.count(self.epoch + 1) != self.count(self.epoch)

    def fit_epoch(self, epoch: int) -> None:
        """Lays the sampler out for ``epoch``: its units, its batches, its count per rank."""
        key = (epoch, self.mixture, self.shuffle, self.num_replicas, self.max_tokens,
               self.batch_size)  # fmt: skip
        if getattr(self, "_key", None) != key:
            self._key = key
            self.dataset_size = self.mixture.total(epoch)
            self._configure_layout()

    def _configure_layout(self) -> None:
        if getattr(self, "_key", None) is None:  # the base's __init__: the plan comes next
            return
        epoch, n, world = self._key[0], self.dataset_size, self.num_replicas
        self._dealt = None
        self._global = self.planned(epoch)
        self._num_batches = math.ceil(len(self._global) / world)
        self._total = self._num_batches * world
        self._padded_total = max(0, self._total - n)
        self.num_samples = math.ceil(n / world)
        self.total_size = self.num_samples * world

    @property
    def num_padded(self) -> int:
        """Units repeated on this rank in the laid-out epoch (only when units are fewer than
        the batches its ranks need)."""
        first = self._total - self._padded_total
        return sum(1 for j in range(first, self._total) if j % self.num_replicas == self.rank)

    def epoch_batches(self, epoch: int) -> list[torch.Tensor]:
        """Every rank's batches of ``epoch`` as ids; rank ``r`` takes items ``r, r + W, ...``."""
        self.fit_epoch(epoch)
        if self._dealt is not None and self._dealt[0] == epoch:
            return self._dealt[1]
        batches, n = self._global, self.dataset_size
        if len(batches) < self._total:
            batches = split_into_pieces(batches, min(self._total, n))
            if self._padded_total:
                order = torch.cat(batches) if batches else torch.zeros(0, dtype=torch.int64)
                repeat = torch.arange(self._padded_total) % max(1, n)
                batches = batches + list(order[repeat].split(1))
        batches = [b.to(torch.int64) + (epoch << EPOCH_SHIFT) for b in batches]
        self._dealt = (epoch, batches)
        return batches

    def batches(self, epoch: int) -> list[torch.Tensor]:
        """This rank's batches of ``epoch``."""
        return self.epoch_batches(epoch)[self.rank :: self.num_replicas]

    # ------------------------------------------------------------------ elastic resume
    def with_layout(self, segment: Segment) -> MixedBudgetSampler:
        """A copy laid out for ``segment``'s world size, cap and budget."""
        twin = copy.copy(self)
        twin.num_replicas, twin.rank = segment.world, 0
        twin.batch_size = segment.batch_size  # type: ignore[assignment]
        if segment.max_tokens is not None:
            twin.max_tokens = segment.max_tokens
        twin._segments, twin._elastic, twin._key = [], None, None
        epoch = self._key[0] if self._key is not None else 0
        twin.fit_epoch(epoch)
        return twin

    def epoch_order(self, epoch: int) -> torch.Tensor:
        """The epoch's planned batches laid end to end, as ids (before dealing)."""
        self.fit_epoch(epoch)
        if not self._global:
            return torch.zeros(0, dtype=torch.int64)
        return torch.cat(self._global).to(torch.int64) + (epoch << EPOCH_SHIFT)

    def position_layout(self, epoch: int) -> list[list[torch.Tensor]]:
        """Per rank, its batches of ``epoch`` as positions into :meth:`epoch_order`."""
        order = self.epoch_order(epoch) & UNIT_MASK
        position = torch.full((self.dataset_size,), -1, dtype=torch.int64)
        position[order] = torch.arange(len(order))
        dealt = self.epoch_batches(epoch)
        world = self.num_replicas
        return [[position[b & UNIT_MASK] for b in dealt[r::world]] for r in range(world)]

    def cut_positions(self, positions: torch.Tensor, segment: Segment | None) -> list[torch.Tensor]:
        """Cuts positions of the resumed epoch's order into batches under a layout's budget."""
        if not len(positions):
            return []
        cap = segment.batch_size if segment is not None else self.batch_size
        budget = segment.max_tokens if segment is not None else None
        units = (self._elastic_order[positions] & UNIT_MASK).numpy()
        costs = self.costs(self._resume_epoch_of_segments)[units]
        return list(positions.split(pack_by_tokens(costs, budget or self.max_tokens, cap)))

    def _max_tokens(self) -> int | None:
        return self.max_tokens

    # ------------------------------------------------------------------ state
    def state_dict(self, consumed_batches: int | None = None) -> dict[str, Any]:
        """:class:`MixedSampler`'s state plus the budget and pool size."""
        state = super().state_dict(consumed_batches)
        state.update(batch_by="tokens", max_tokens=self.max_tokens, pool_batches=self.pool_batches)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a position (see :class:`MixedSampler`); after a checkpoint taken at an
        epoch's end, reports that epoch's length until the loader tells the Trainer the next
        one's, when it differs.

        Raises:
            ValueError: Another budget or pool size than the checkpoint's (or batches of a
                count), or what :class:`MixedSampler` refuses.
        """
        if "max_tokens" not in state:
            raise ValueError(
                "cannot resume the batch order exactly: the checkpoint was saved with batches "
                f"of batch_size={state.get('batch_size')!r} units, this run has "
                f"max_tokens={self.max_tokens!r}; resume with the checkpoint's batching."
            )
        for key in ("batch_by", "max_tokens", "pool_batches"):
            mine = {"batch_by": "tokens", "max_tokens": self.max_tokens,
                    "pool_batches": self.pool_batches}[key]  # fmt: skip
            if state.get(key, mine) != mine:
                raise ValueError(
                    f"cannot resume the batch order exactly: the checkpoint was saved with "
                    f"{key}={state[key]!r}, this run has {key}={mine!r}."
                )
        super().load_state_dict(state)
        epoch = int(state["epoch"])
        ended = interrupted(state) and self._resume_batch >= self._num_batches
        held = self.ended_length is None and not self._segments and self.epoch == epoch
        if ended and held and self.count(epoch + 1) != self._num_batches:
            self.ended_length = self._num_batches
            self.epoch, self._resume_epoch = epoch + 1, None


class MeasureNextEpoch:
    """Run at the last batch of a train epoch: when the next epoch has another batch count,
    the Trainer measures the train loader again (it builds a new one for that epoch).

    Args:
        find_trainer: Returns the Trainer driving the loader, or None (or is None).
        sampler: The loader's sampler (duration batches, or batches of a size).
    """

    def __init__(self, find_trainer: Callable[[], Any] | None, sampler: MixedSampler) -> None:
        self.find_trainer, self.sampler = find_trainer, sampler

    def __call__(self) -> None:
        sampler = self.sampler
        if isinstance(sampler, MixedBudgetSampler):
            differs = sampler.next_length_differs()
        else:  # batches of a size: the unit count changes (the end of a held epoch)
            total = sampler.mixture.total
            differs = total(sampler.epoch + 1) != total(sampler.epoch)
        if self.find_trainer is not None and differs:
            remeasure_train_loader(self.find_trainer())
