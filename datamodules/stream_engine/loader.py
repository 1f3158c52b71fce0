"""StreamLoader: the DataLoader for a ShardedStream (epochs, resumable position, pooled batches)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DataLoader

from datamodules.core.hardware import AUTO, LoaderSettings
from datamodules.core.loaders import passthrough
from datamodules.core.quiet import quiet, release_held_filters
from datamodules.core.shared_batches import SharedBatchPool, attach_pool, iterate_with_pool
from datamodules.stream_engine.messages import MESSAGE_BATCHES, MESSAGE_INLINE_BELOW, interleave
from datamodules.stream_engine.stream import ShardedStream

__all__ = ["GATHERED_PREFETCH", "StreamLoader", "gathered_prefetch"]

#: Messages each worker of a stream whose batches are gathered from columns keeps in flight
#: with ``prefetch_factor="auto"``. A message is up to 128 small batches (about 4 MiB); with
#: more than two in flight a worker that is ahead keeps working while the loader waits for
#: the other: measured with 2 workers on the Parquet records of
#: ``benchmarks/bench_streaming.py``, 557k records/s at 2, 599k at 3, 573k at 6 (and, with
#: messages of 32 batches, 440k at 2, 463k at 4, 505k at 6).
GATHERED_PREFETCH = 3


def gathered_prefetch(settings: LoaderSettings, stream: ShardedStream, dm: Any) -> LoaderSettings:
    """``settings`` with :data:`GATHERED_PREFETCH` messages in flight for a stream gathered
    from columns whose ``prefetch_factor`` is ``"auto"`` (others unchanged)."""
    if dm.prefetch_factor != AUTO or not settings.num_workers or not stream.columnar:
        return settings
    reasons = dict(settings.reasons)
    reasons["prefetch_factor"] = (
        f"auto: {GATHERED_PREFETCH} messages (up to {MESSAGE_BATCHES} batches each) per worker "
        "of a stream gathered from columns"
    )
    return dataclasses.replace(settings, prefetch_factor=GATHERED_PREFETCH, reasons=reasons)


class StreamLoader(DataLoader):
    """The DataLoader for a :class:`ShardedStream`: epochs, resumable position, no re-batching.

    Each iteration starts a new epoch (the first one the stream's ``epoch``), reshuffled as
    ``RandomSampler`` would; :meth:`set_epoch` chooses the next one explicitly. After
    :meth:`load_state_dict` the next iteration resumes the saved epoch instead, also when it
    was saved with another world size, worker count or batch size. Lightning saves
    :meth:`state_dict` in checkpoints and restores it before the resumed epoch.

    With worker processes, batches travel through a
    :class:`~datamodules.core.shared_batches.SharedBatchPool`: tensors under 128 KB by value through
    the result pipe, larger ones in shared-memory buffers each worker reuses. The
    DataLoader's one-new-segment-per-tensor transfer is what limits a stream of small batches
    otherwise (measured: about 5x fewer batches/s for 64 x 128 int64 batches).

    Args:
        dataset: The stream (it batches, so ``batch_size`` is None here).
        reuse_batch_memory: Send batches through the pool described above (default True).
        **kwargs: Other DataLoader arguments (``num_workers``, ``pin_memory``,
            ``persistent_workers``, ``prefetch_factor``, ...). ``collate_fn`` defaults to
            leaving batches as the stream made them; ``in_order=False`` is refused.

    Attributes:
        consumed_batches: Optional callable returning how many batches of the current epoch
            the training loop has used (e.g. from the Trainer's progress); when set and not
            None it is what :meth:`state_dict` saves, else the batches this loader yielded.
    """

    def __init__(
        self, dataset: ShardedStream, reuse_batch_memory: bool = True, **kwargs: Any
    ) -> None:
        if not isinstance(dataset, ShardedStream):
            raise TypeError(f"StreamLoader needs a ShardedStream, got {type(dataset).__name__}.")
        for key in ("batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"):
            if kwargs.pop(key, None) not in (None, False):
                raise ValueError(f"{key} is set on the ShardedStream, not on StreamLoader.")
        if not kwargs.get("in_order", True):
            raise ValueError("in_order=False is not accepted: resuming relies on the order.")
        kwargs["collate_fn"] = kwargs.get("collate_fn") or passthrough
        #: The workers' reused batch buffers (None without workers or if disabled).
        # A worker's message is dealt out over many batches, and its slot is free only at
        # the next message after its last batch: two more slots than one batch a message.
        self.batch_pool: SharedBatchPool | None = attach_pool(
            kwargs, reuse_batch_memory, extra_slots=2
        )
        if self.batch_pool is not None:  # a message's tensors share one slot: worth it sooner
            self.batch_pool.inline_below = MESSAGE_INLINE_BELOW
        self.reuse_batch_memory = reuse_batch_memory
        super().__init__(dataset, batch_size=None, **kwargs)
        dataset.attach_loader(self.num_workers)
        self.consumed_batches: Callable[[], int | None] | None = None
        #: Optional callable run just before the last batch of an epoch is yielded (a
        #: consumer that stops after it never asks for the end of the iteration).
        self.on_last_batch: Callable[[], None] | None = None
        #: Optional callable run once, when the consumer asks for the second batch of the
        #: next iteration (or for the end of a one-batch one); then set back to None.
        self.on_second_batch: Callable[[], None] | None = None
        #: Warnings ignored while an iteration starts (``(message regex, category)`` pairs).
        self.quiet_while_starting: list[tuple[str, type[Warning]]] = []

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration run ``epoch`` from its start (see
        :meth:`ShardedStream.set_epoch`)."""
        self.dataset.set_epoch(epoch)  # type: ignore[attr-defined]

    def __iter__(self) -> Iterator[Any]:
        release_held_filters(self)  # Lightning has checked this loader by now
        stream: ShardedStream = self.dataset  # type: ignore[assignment]
        stream.begin_epoch(max(self.num_workers, 1))
        if self._IterableDataset_len_called is not None:  # torch warns past the length it saw
            # (a resumed epoch's differs; with workers it counts messages: at most one a
            # batch, plus each worker's last, empty one)
            self._IterableDataset_len_called = len(stream) + self.num_workers
        if self.num_workers:  # workers may start now: their imports here, once, before the fork
            stream.prepare_workers()
        with quiet(self.quiet_while_starting):  # torch checks the worker count here
            started = super().__iter__()
        batches = iterate_with_pool(started, self.batch_pool, self.persistent_workers)
        if self.num_workers:  # each worker sends its batches in messages: deal them out
            batches = interleave(batches, self.num_workers)
        first = True
        for batch in batches:
            if self.num_workers:  # in-process, the stream counts its own
                stream.count_delivered()
            if self.on_last_batch is not None and stream.delivered == len(stream):
                self.on_last_batch()
            yield batch
            if first:
                first = False
                self._second_batch()
        if first:
            self._second_batch()

    def _second_batch(self) -> None:
        hook, self.on_second_batch = self.on_second_batch, None
        if hook is not None:
            hook()

    def state_dict(self) -> dict[str, Any]:
        """The stream's position (see :meth:`ShardedStream.state_dict`)."""
        consumed = self.consumed_batches() if self.consumed_batches is not None else None
        return self.dataset.state_dict(consumed)  # type: ignore[attr-defined]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores the position; the next iteration resumes the saved epoch."""
        self.dataset.load_state_dict(state)  # type: ignore[attr-defined]
