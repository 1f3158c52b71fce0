"""Batch samplers that yield whole batches of indices; DDP-aware and stateful.

A loader built on these samplers uses ``DataLoader(dataset, sampler=batch_sampler,
batch_size=None)``: each item the sampler yields is an int64 index tensor for one batch, and
the dataset turns it into a batch in one call (one fancy-indexing call for tensors, one
``collate`` over the decoded samples for files).

The samplers subclass :class:`torch.utils.data.DistributedSampler` on purpose: Lightning
leaves a loader's sampler alone only when it is an instance of that class. Any other sampler
is replaced or wrapped under DDP, and a wrapped random sampler draws a different permutation
on each rank, so the ranks' shares overlap. These samplers split the data across ranks
themselves (disjoint shares, the same number of batches on every rank) and draw the same
permutation on every rank from ``seed + epoch``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler, SequentialSampler

from datamodules.core.checks import check_int
from datamodules.core.elastic import (
    Segment,
    deal,
    even_batch_sizes,
    fast_rank_layout,
    first_remainder,
    remaining_positions,
)

__all__ = [
    "IndexBatchSampler",
    "OverfitBatchSampler",
    "check_positive_int",
    "current_rank_and_world",
]


def current_rank_and_world() -> tuple[int, int]:
    """Returns (global rank, world size) of the initialised process group, else (0, 1)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def check_positive_int(value: Any, name: str, minimum: int = 1) -> None:
    """:func:`~datamodules.core.checks.check_int` with a minimum of 1 unless told otherwise."""
    check_int(value, name, minimum)


class IndexBatchSampler(DistributedSampler):
    """Yields int64 index tensors, one per batch, for this rank's share of ``num_samples``.

    Every epoch, one permutation of ``range(num_samples)`` is drawn from ``seed + epoch``
    (identical on every rank); rank ``r`` of ``W`` takes positions ``r, r + W, r + 2W, ...``.
    Shares are disjoint and cover every sample once. Each rank yields the same number of
    batches: ``ceil(ceil(N / W) / batch_size)`` (``floor(floor(N / W) / batch_size)`` with
    ``drop_last``). When a rank holds one sample fewer at a batch boundary, its last two
    batches share the remainder. Only when a rank would hold fewer samples than batches
    (``N < W`` or ``batch_size == 1`` with ``N % W != 0``) is a rank topped up with samples
    from the start of the permutation; :attr:`num_padded` says how many.

    The sampler is stateful: :meth:`state_dict` records the epoch and how many batches were
    consumed, and after :meth:`load_state_dict` the next iteration of that epoch starts at the
    first batch not yet consumed.

    Epochs advance as ``RandomSampler``'s do: each new iteration starts the next epoch
    (reshuffled from ``seed + epoch``), unless :meth:`set_epoch` (Lightning, Fabric and
    ``DistributedSampler``-style loops call it) or :meth:`load_state_dict` named the epoch since
    the last iteration began; then that epoch is the one iterated.

    Args:
        num_samples: Length of the split being sampled.
        batch_size: Samples per batch on each rank.
        shuffle: Draw a new permutation every epoch; else keep the order.
        drop_last: Drop each rank's last incomplete batch (the same count on every rank).
        seed: Base seed; the permutation of epoch ``e`` comes from ``seed + e``.
        num_replicas: World size; defaults to the initialised process group's, else 1.
        rank: Global rank; defaults to the initialised process group's, else 0.
    """

    #: Whether a checkpoint of packed rows (a state with ``"packing"``) is this sampler's.
    resumes_packed_rows = False
    #: What the sampler deals out, as ``summary()`` names it (singular).
    unit = "sample"
    #: Below this many positions an elastic resume takes the exact, materialized way
    #: (:func:`~datamodules.core.elastic.remaining_positions`), above it the one in
    #: O(this rank's share); both give the same batches.
    exact_below = 1 << 16

    def __init__(
        self,
        num_samples: int,
        batch_size: int,
        *,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
    ) -> None:
        check_int(num_samples, "num_samples", 0)
        check_int(batch_size, "batch_size", 1)
        check_int(seed, "seed")
        default_rank, default_world = current_rank_and_world()
        world = default_world if num_replicas is None else num_replicas
        rank = default_rank if rank is None else rank
        check_int(world, "num_replicas", 1)
        check_int(rank, "rank", 0, world - 1)
        # DistributedSampler.__init__ needs a dataset and a process group; set its fields here.
        self.dataset_size = num_samples
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.num_replicas = world
        self.rank = rank
        self.epoch = 0
        self._epoch_given = False  # set_epoch / load_state_dict named the next epoch
        self._started_epoch: int | None = None  # the epoch the last iteration began
        self._resume_epoch: int | None = None
        self._resume_batch = 0
        self._consumed = 0
        self._consumed_epoch = 0
        #: The runs of an epoch resumed on another layout (world size, batch size), else [].
        self._segments: list[Segment] = []
        self._elastic: tuple[int, torch.Tensor, list[torch.Tensor]] | None = None
        self._resume_epoch_of_segments = 0
        #: Samples repeated in a resumed epoch whose remainder was too small for its ranks.
        self.resume_repeats = 0
        #: The length of an epoch resumed on another layout that a checkpoint saw end; this
        #: sampler reports it until its loader has told the Trainer the next epoch's length.
        self.ended_length: int | None = None
        self._configure_layout()

    def _configure_layout(self) -> None:
        """Sets what depends on the world size and batch size: the batch count per rank."""
        n, world, batch_size = self.dataset_size, self.num_replicas, self.batch_size
        if self.drop_last:
            per_rank = n // world
            self._num_batches = per_rank // batch_size
        else:
            per_rank = math.ceil(n / world)
            self._num_batches = math.ceil(per_rank / batch_size)
        self.num_samples = per_rank  # DistributedSampler's attribute: samples per rank (max)
        self.total_size = per_rank * world

    @property
    def num_padded(self) -> int:
        """Samples repeated on this rank per epoch to give it a non-empty batch per slot."""
        if self.drop_last:
            return 0
        return max(0, self._num_batches - self._share_size())

    def _share_size(self) -> int:
        n, w, r = self.dataset_size, self.num_replicas, self.rank
        return n // w + (1 if r < n % w else 0)

    def __len__(self) -> int:
        """Batches per epoch on this rank (the same on every rank).

        While an epoch resumed on another layout is pending, the batches that epoch counts
        (those consumed before plus its remainder); right after such an epoch ended in a
        checkpoint, its length (:attr:`ended_length`), until the loader corrects the Trainer
        (see :mod:`datamodules.core.trainer_length`).
        """
        if self.ended_length is not None:
            return self.ended_length
        if self._elastic_pending():
            return self.epoch_length()
        return self._num_batches

    # ------------------------------------------------------------------ elastic resume
    def with_layout(self, segment: Segment) -> IndexBatchSampler:
        """A copy of this sampler laid out for ``segment``'s world size and batch size."""
        twin = copy.copy(self)
        twin.num_replicas, twin.rank = segment.world, 0
        twin.batch_size = segment.batch_size or 1
        twin._segments, twin._elastic = [], None
        twin._configure_layout()
        return twin

    def epoch_order(self, epoch: int) -> torch.Tensor:
        """The epoch's order of sample indices, which no layout changes: the permutation."""
        return self.permutation(epoch)

    def position_layout(self, epoch: int) -> list[list[torch.Tensor]]:
        """Per rank, its batches of ``epoch`` as positions into :meth:`epoch_order`."""
        identity = torch.arange(len(self.epoch_order(epoch)), dtype=torch.int64)
        return [self._batches_from(identity, r) for r in range(self.num_replicas)]

    def cut_positions(self, positions: torch.Tensor, segment: Segment | None) -> list[torch.Tensor]:
        """Cuts positions of the epoch order into batches of a layout's batch size."""
        size = segment.batch_size if segment is not None else self.batch_size
        return list(positions.split(size or 1))

    def _elastic_pending(self) -> bool:
        return bool(self._segments) and self.next_epoch == self._resume_epoch_of_segments

    def _elastic_layout(self) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The resumed epoch's order and this rank's batches of positions (computed once)."""
        epoch = self._resume_epoch_of_segments
        if self._elastic is None or self._elastic[0] != epoch:
            first = self.with_layout(self._segments[0])
            order = first.epoch_order(epoch)
            self._elastic_order = order  # a cut by token budget reads the samples' costs
            fast = self._fast_elastic_layout(first, len(order))
            if fast is not None:
                mine, self.resume_repeats = fast
            else:
                left = remaining_positions(
                    first.position_layout(epoch), self._segments, len(order),
                    self.cut_positions, self.drop_last,
                )  # fmt: skip
                layout, self.resume_repeats = deal(
                    left, self.num_replicas, self.cut_positions, None, self.drop_last
                )
                mine = layout[self.rank]
            self._elastic = (epoch, order, mine)
        return self._elastic[1], self._elastic[2]

    def _fast_elastic_layout(
        self, first: IndexBatchSampler, size: int
    ) -> tuple[list[torch.Tensor], int] | None:
        """This rank's part of the resumed epoch in O(its share), for batches of samples
        (:func:`~datamodules.core.elastic.fast_rank_layout`); None where the layout is cut
        some other way (length buckets, token budgets) or the split is small."""
        plain = all(
            getattr(type(self), name) is getattr(IndexBatchSampler, name)
            for name in ("cut_positions", "position_layout", "_batches_from")
        )
        if not plain or size < self.exact_below:
            return None
        start = first_remainder(
            size, first.num_replicas, first.batch_size, first._num_batches,
            self._segments[0].batches, self.drop_last,
        )  # fmt: skip
        if start is None:
            return None
        return fast_rank_layout(
            start, self._segments, self.num_replicas, self.rank, self.batch_size, self.drop_last
        )

    def epoch_length(self) -> int:
        """Batches the next iteration's epoch counts on this rank, resumed batches included."""
        if self._elastic_pending():
            return sum(s.batches for s in self._segments) + len(self._elastic_layout()[1])
        return self._num_batches

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch of the next iteration, which seeds its permutation.

        Lightning calls this before every epoch; without it each iteration starts the next
        epoch by itself.
        """
        self.epoch = epoch
        self._epoch_given = True

    @property
    def next_epoch(self) -> int:
        """The epoch the next iteration will start."""
        if self._epoch_given or self._started_epoch is None:
            return self.epoch
        return self._started_epoch + 1

    def continue_from(self, previous: IndexBatchSampler) -> None:
        """Starts where ``previous`` (an earlier loader's sampler) would go on: its next epoch.

        A DataModule calls this when it builds a new train loader, so that a hand-written
        ``for epoch ...: for batch in dm.train_dataloader()`` loop reshuffles every epoch.
        """
        self.epoch = previous.next_epoch

    def permutation(self, epoch: int) -> torch.Tensor:
        """Returns the epoch's order of all sample indices (the same on every rank).

        int32 when the indices fit (half the memory of int64, and torch draws the very same
        permutation); batches are handed out as int64 all the same.
        """
        n = self.dataset_size
        dtype = torch.int32 if n < 2**31 else torch.int64
        if not self.shuffle:
            return torch.arange(n, dtype=dtype)
        generator = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(n, generator=generator, dtype=dtype)

    def batches(self, epoch: int) -> list[torch.Tensor]:
        """Returns this rank's batches of ``epoch`` as index tensors (views, no copies)."""
        return self._batches_from(self.permutation(epoch), self.rank)

    def _batches_from(self, perm: torch.Tensor, rank: int) -> list[torch.Tensor]:
        """Rank ``rank``'s batches of an epoch whose order is ``perm`` (int64 index tensors)."""
        share = perm[rank :: self.num_replicas].to(torch.int64)
        n_batches = self._num_batches
        if self.drop_last:
            share = share[: n_batches * self.batch_size]
            return list(share.split(self.batch_size)) if n_batches else []
        n, w = self.dataset_size, self.num_replicas
        padded = max(0, n_batches - (n // w + (1 if rank < n % w else 0)))
        if padded:
            share = torch.cat([share, perm[:padded].to(torch.int64)])
        sizes = even_batch_sizes(len(share), n_batches, self.batch_size)
        return list(share.split(sizes))

    def __iter__(self) -> Iterator[torch.Tensor]:
        epoch = self.epoch = self.next_epoch
        self._epoch_given = False
        self._started_epoch = epoch
        start = 0
        if self._resume_epoch is not None:
            if self._resume_epoch == epoch:
                start = self._resume_batch
            self._resume_epoch = None
        if self._segments and epoch == self._resume_epoch_of_segments:
            order, positions = self._elastic_layout()
            batches = [order[p].to(torch.int64) for p in positions]
            done = sum(s.batches for s in self._segments)
            self._consumed_epoch = epoch
            for i, batch in enumerate(batches):
                self._consumed = done + i + 1
                yield batch
            return
        self._segments, self._elastic = [], None  # an elastic epoch is over
        batches = self.batches(epoch)
        self._consumed_epoch = epoch
        for i in range(start, len(batches)):
            self._consumed = i + 1
            yield batches[i]

    def state_dict(self, consumed_batches: int | None = None) -> dict[str, Any]:
        """Returns the position to resume from.

        Args:
            consumed_batches: Batches of the current epoch that were used; defaults to the
                number this sampler has yielded (which, with worker processes prefetching, can
                be ahead of what the training loop has used).
        """
        epoch = self._consumed_epoch if consumed_batches is None else self.epoch
        consumed = self._consumed if consumed_batches is None else consumed_batches
        earlier: list[Segment] = []
        if self._segments and epoch == self._resume_epoch_of_segments:
            earlier = self._segments
        done = sum(s.batches for s in earlier)
        current = self._segment(consumed - done)
        return {
            "epoch": epoch,
            "batches_consumed": consumed,
            "segments": [s.to_dict() for s in (*earlier, current)],
            "num_samples": self.dataset_size,
            "batch_size": self.batch_size,
            "num_replicas": self.num_replicas,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
        }

    def drop_pending_resume(self) -> None:
        """Forgets a restored position not yet used: the next epoch starts from its first
        batch (a sampler whose batches do not depend on the position, as under
        ``overfit_batches``)."""
        self._resume_epoch = None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a position saved by :meth:`state_dict`; the next epoch-matching iteration
        starts at the first batch not yet consumed.

        Raises:
            ValueError: If the saved sampler differs in a way that changes the batches
                (dataset length, seed, shuffle, drop_last, batches under a budget), or was
                packed rows.
        """
        if "packing" in state and not self.resumes_packed_rows:
            packing = state["packing"]
            raise ValueError(
                "cannot resume the batch order: the checkpoint was saved with packing=True "
                f"(seq_length={packing.get('seq_length')!r}, "
                f"pack_mode={packing.get('pack_mode')!r}: its positions count packed rows), "
                "and this run batches samples; resume with the same packing=True, seq_length "
                "and pack_mode."
            )
        if state.get("max_tokens") is not None and self._max_tokens() is None:
            raise ValueError(
                f"cannot resume the batch order: the checkpoint was saved with batches under "
                f"max_tokens={state['max_tokens']!r} (a duration or token budget), and this run "
                f"batches batch_size={self.batch_size!r}; resume with the checkpoint's budget."
            )
        mine = self.state_dict()
        for key in ("num_samples", "seed", "shuffle", "drop_last"):
            if key in state and state[key] != mine[key]:
                raise ValueError(
                    f"cannot resume the batch order exactly: the checkpoint was saved with "
                    f"{key}={state[key]!r}, this run has {key}={mine[key]!r}; keep {key} as it "
                    "was to resume (world size and batch size may change)."
                )
        saved = state.get("segments") or [
            {
                "world": state["num_replicas"],
                "batch_size": state["batch_size"],
                "batches": state["batches_consumed"],
            }
        ]
        segments = [Segment.from_dict(s) for s in saved]
        self._resume_epoch = int(state["epoch"])
        self._resume_batch = int(state["batches_consumed"])
        self.epoch = self._resume_epoch
        self._epoch_given = True
        here = self._segment(segments[-1].batches)
        same_layout = len(segments) == 1 and segments[0] == here
        # The same layout resumes by skipping the consumed batches (the very same batches as
        # an uninterrupted run); another one re-splits the rest of the epoch (core/elastic.py).
        self._segments = [] if same_layout else segments
        self._resume_epoch_of_segments = self._resume_epoch
        self._elastic = None
        self.ended_length = None
        if self._segments and not self._elastic_layout()[1]:
            # The checkpoint saw that epoch end: the next iteration is a fresh next epoch,
            # and a restoring Trainer must first see the ended epoch's length to agree.
            self.ended_length = self.epoch_length()
            self._segments, self._elastic = [], None
            self.epoch = self._resume_epoch + 1
            self._resume_epoch = None

    def _max_tokens(self) -> int | None:
        return None

    def _segment(self, batches: int) -> Segment:
        """This layout's segment with ``batches`` delivered per rank (one worker: the batch
        sampler runs in the main process)."""
        return Segment(self.num_replicas, 1, self.batch_size, batches, self._max_tokens())


class OverfitBatchSampler(DistributedSampler, SequentialSampler):
    """The sampler of every loader under ``Trainer(overfit_batches=n)``: the same batches,
    in order, every epoch.

    Lightning replaces a loader's sampler under ``overfit_batches`` unless it is a
    ``SequentialSampler`` (and under DDP unless it is a ``DistributedSampler``), by
    re-instantiating the loader around a ``SequentialSampler`` of single indices, which a
    whole-batch loader cannot use. This wrapper is both, so Lightning keeps it; it yields the
    wrapped sampler's batches of epoch 0 with shuffling off, whatever the epoch, so the first
    ``n`` batches repeat exactly, disjoint across ranks.

    Args:
        sampler: The split's batch sampler (its ``shuffle`` is turned off).
    """

    def __init__(self, sampler: IndexBatchSampler) -> None:
        # Neither base class's __init__: the wrapped sampler holds the state.
        sampler.shuffle = False
        self.sampler = sampler
        self.epoch = 0

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(self.sampler.batches(0))

    def __len__(self) -> int:
        return len(self.sampler)

    def set_epoch(self, epoch: int) -> None:
        """Notes the epoch; the batches stay those of epoch 0."""
        self.epoch = epoch

    def state_dict(self, consumed_batches: int | None = None) -> dict[str, Any]:
        """The wrapped sampler's state (see :meth:`IndexBatchSampler.state_dict`)."""
        return self.sampler.state_dict(consumed_batches)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Checks the state against the wrapped sampler; the batches do not depend on it."""
        self.sampler.load_state_dict(state)
        self.sampler.drop_pending_resume()

    def __getattr__(self, name: str) -> Any:
        if name == "sampler":  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.sampler, name)
