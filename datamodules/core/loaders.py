"""A DataLoader over whole-batch samplers whose position can be saved and restored.

:class:`ResumableDataLoader` is a plain :class:`torch.utils.data.DataLoader` (``batch_size=None``,
``sampler=`` an :class:`~datamodules.core.samplers.IndexBatchSampler`) with ``state_dict`` and
``load_state_dict``. Lightning saves those in every checkpoint and restores them before the
resumed epoch starts, so the resumed run yields exactly the batches not yet used.

What "used" means is the subtle part. Lightning fetches one batch ahead of the training step,
and worker processes run further ahead still, so neither the sampler's nor the loader's
count of handed-out batches is what the model consumed. A DataModule driven by a Trainer
therefore installs ``consumed_batches``: a callable returning how many batches the training
loop has processed in the current epoch. Without it (a hand-written loop), the loader counts
the batches its iterator has yielded.

With workers, each batch is one message from a worker to the main process, and on a small
machine a message costs about as much as building a small batch (0.6 ms here, even for a
ready tensor: ``benchmarks/bench_corpus.py``). A view whose batches are that cheap says so
with ``batches_per_message = k``: the workers then fetch ``k`` consecutive batches of the
sampler at a time and send them as one message (in one shared-memory slot), and the main
process hands them out one by one; the batches, their order and every count stay those of
the sampler.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DataLoader

from datamodules.core.fork_guard import install as install_fork_guard
from datamodules.core.quiet import release_held_filters
from datamodules.core.samplers import IndexBatchSampler
from datamodules.core.shared_batches import SharedBatchPool, attach_pool, iterate_with_pool
from datamodules.core.trainer_length import remeasure_train_loader, set_train_length

__all__ = ["GroupedBatches", "ResumableDataLoader", "WeakCall", "passthrough"]

install_fork_guard()  # workers are forked from these loaders: see datamodules.core.fork_guard


class WeakCall:
    """Calls a bound method through a weak reference; returns None once its object is gone
    (how a loader asks its DataModule for ``consumed_batches`` without keeping it alive)."""

    def __init__(self, method: Callable[[], Any]) -> None:
        self._method = weakref.WeakMethod(method)

    def __call__(self) -> Any:
        method = self._method()
        return None if method is None else method()


class GroupedBatches:
    """A batch sampler's batches, ``k`` at a time: what a worker fetches as one message."""

    def __init__(self, sampler: Any, k: int) -> None:
        self.sampler, self.k = sampler, k

    def __iter__(self) -> Iterator[list[Any]]:
        group: list[Any] = []
        for batch in self.sampler:
            group.append(batch)
            if len(group) == self.k:
                yield group
                group = []
        if group:
            yield group

    def __len__(self) -> int:
        return -(-len(self.sampler) // self.k)


def passthrough(batch: Any) -> Any:
    """Collate for datasets that already return whole batches: returns the batch unchanged."""
    return batch


class ResumableDataLoader(DataLoader):
    """A DataLoader whose sampler position is part of ``state_dict``.

    Args:
        dataset: A dataset whose ``__getitem__`` takes an index tensor and returns a batch.
        sampler: The batch sampler yielding index tensors.
        reuse_batch_memory: With workers, send batches through a
            :class:`~datamodules.core.shared_batches.SharedBatchPool` (default True): each worker
            reuses a few shared-memory buffers instead of PyTorch allocating, mapping and
            unmapping a fresh one per batch.
        batches_per_message: With workers, batches a worker sends as one message (see the
            module docstring); the dataset then also takes a list of index tensors.
        **kwargs: Other DataLoader arguments (``num_workers``, ``pin_memory``...).
            ``batch_size`` is forced to None and ``collate_fn`` defaults to a passthrough.
    """

    def __init__(
        self,
        dataset: Any,
        sampler: IndexBatchSampler,
        reuse_batch_memory: bool = True,
        batches_per_message: int = 1,
        **kwargs: Any,
    ) -> None:
        self.batches_per_message = int(batches_per_message)
        kwargs["collate_fn"] = kwargs.get("collate_fn") or passthrough
        kwargs["batch_size"] = None
        kwargs.pop("shuffle", None)
        kwargs.pop("drop_last", None)
        kwargs.pop("batch_sampler", None)
        #: The workers' reused batch buffers (None without workers or if disabled).
        self.batch_pool: SharedBatchPool | None = attach_pool(kwargs, reuse_batch_memory)
        self.reuse_batch_memory = reuse_batch_memory
        super().__init__(dataset, sampler=sampler, **kwargs)
        self.consumed_batches: Callable[[], int | None] | None = None
        #: Called once per epoch, in the main process, when the last batch is in hand
        #: (before it is yielded, so it runs even if the consumer stops at ``len(loader)``).
        self.on_epoch_end: Callable[[], None] | None = None
        #: Called once, in the main process, when the second batch of an iteration is in hand.
        self.on_second_batch: Callable[[], None] | None = None
        #: Returns the Trainer that drives this loader, if any (the DataModule sets it).
        self.find_trainer: Callable[[], Any] | None = None
        self._yielded = 0

    @property
    def _grouped(self) -> bool:
        return getattr(self, "batches_per_message", 1) > 1 and self.num_workers > 0

    @property
    def _index_sampler(self) -> Any:  # what DataLoader's iterators draw their indices from
        sampler = super()._index_sampler
        return GroupedBatches(sampler, self.batches_per_message) if self._grouped else sampler

    def __len__(self) -> int:
        return len(self.sampler) if self._grouped else super().__len__()

    def __iter__(self) -> Iterator[Any]:
        release_held_filters(self)  # Lightning has checked this loader by now
        sampler = self.sampler
        resuming = getattr(sampler, "_resume_epoch", None) == getattr(sampler, "epoch", None)
        self._yielded = first = sampler._resume_batch if resuming else 0
        # The batches this epoch counts (an epoch resumed on another layout has its own); read
        # before the workers start, which iterate the sampler at once.
        last = sampler.epoch_length() if hasattr(sampler, "epoch_length") else len(self)
        if self.num_workers == 0 and not self.pin_memory:
            # In-process fast path: the same fetch and collate as DataLoader's single-process
            # iterator, without its per-batch profiler record and bookkeeping (a third of the
            # time of a whole tensor batch; see benchmarks/bench_tensor.py).
            dataset, collate = self.dataset, self.collate_fn
            batches: Iterator[Any] = (collate(dataset[index]) for index in sampler)
        else:
            preload = getattr(self.dataset, "preload", None)
            if preload is not None:  # what the workers import: here, once, before the fork
                preload()
            batches = super().__iter__()
        stream = (b for group in batches for b in group) if self._grouped else batches
        try:
            for batch in iterate_with_pool(stream, self.batch_pool, self.persistent_workers):
                self._yielded += 1
                if self._yielded == last:
                    self._epoch_ends()
                if self.on_second_batch is not None and self._yielded - first == 2:
                    hook, self.on_second_batch = self.on_second_batch, None
                    hook()
                yield batch
        except Exception:
            # Stop the workers now, while they answer: left to the garbage collector (the
            # traceback keeps the iterator in a cycle), DataLoader waits 5 s per worker.
            shutdown = getattr(batches, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
                self._iterator = None  # a persistent iterator restarts its workers next time
            raise

    def _trainer(self) -> Any:
        return self.find_trainer() if self.find_trainer is not None else None

    def _epoch_ends(self) -> None:
        sampler = self.sampler
        if (
            getattr(sampler, "_segments", None)
            and sampler.epoch == sampler._resume_epoch_of_segments
        ):
            # An epoch resumed on another layout has its own length: the next is measured anew.
            remeasure_train_loader(self._trainer())
        if self.on_epoch_end is not None:
            self.on_epoch_end()

    def arm_length_correction(self) -> None:
        """After a checkpoint that saw an epoch resumed on another layout end, tells the
        Trainer the next epoch's true length at its second batch."""
        if getattr(self.sampler, "ended_length", None) is not None:
            self.on_second_batch = self._correct_length

    def _correct_length(self) -> None:
        self.sampler.ended_length = None
        trainer = self._trainer()
        if trainer is not None:
            set_train_length(trainer, len(self.sampler))

    def state_dict(self) -> dict[str, Any]:
        """Returns the sampler's position, counted in batches the training loop consumed."""
        consumed = self.consumed_batches() if self.consumed_batches is not None else None
        if consumed is None:
            consumed = self._yielded
        return {"sampler": self.sampler.state_dict(consumed_batches=consumed)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores the sampler's position; the next iteration resumes the saved epoch."""
        self.sampler.load_state_dict(state["sampler"])
        self.arm_length_correction()
