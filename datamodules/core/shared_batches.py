"""Reused shared-memory buffers for the batches DataLoader workers send to the main process.

A worker cannot hand the main process a tensor in its own memory: PyTorch moves every
tensor it sends into a fresh shared-memory segment (``share_memory_()``, or the shared batch
``default_collate`` allocates), passes the segment's file descriptor through a socket, and
the main process maps it; both sides unmap it again when the batch dies. The fresh pages
are zero-filled on first touch, and a 64 x 224 x 224 x 3 ``uint8`` batch (9.6 MB) costs
about 5.7 ms that way on the 2-core machine of the README against 0.3 ms for writing into
memory already mapped (``benchmarks/bench_image_folder.py``): a third of the time it takes
to decode the batch's JPEGs.

:class:`SharedBatchPool` keeps those segments instead. Each worker owns a few *slots*
(segments it allocated once) and writes a batch into a free one; the first time a slot is
sent, the segment travels the normal way and the main process keeps it mapped; every later
batch in that slot travels as a few integers. A slot is free again once nothing in the main
process refers to its batch any more (the storage's reference count, checked each time a
batch arrives), which the main process signals through a small shared table of *tickets*:
the worker reuses slot ``s`` only if the main process has written back the ticket of the
last batch sent in it. Batches the user keeps (a list of batches, a tensor stored in a
callback) simply keep their slot, and the worker takes another one or, past
``slots_per_worker``, falls back to PyTorch's normal path; a batch is never overwritten
while the main process can still see it.

Workers use the pool through :func:`empty_batch` (allocate the batch in a slot and fill it
in place: no copy at all) or implicitly: whatever their ``collate_fn`` returns is exported
by :class:`ExportingCollate`, which copies private tensors of at least ``inline_below``
bytes into a slot, sends smaller ones by value (cheaper than a segment and a socket round
trip for a few hundred bytes), and leaves tensors already in shared memory to PyTorch.

Limits: tensors that alias each other in a worker's batch arrive as separate copies, and a
batch tensor handed to another process by the user (a multiprocessing queue) must be
cloned first, because the main process cannot see the other process's references.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import get_worker_info

from datamodules.core.tensor_memory import (
    contiguous_strides,
    local_buffers,
    nbytes_of,
    tensor_on,
    use_count,
)
from datamodules.core.worker_slots import (
    FALLBACK,
    MAIN_POOLS,
    MAPPED,
    POOLED,
    WorkerSlots,
)

__all__ = [
    "ExportingCollate",
    "PoolWorkerInit",
    "SharedBatchPool",
    "attach_pool",
    "empty_batch",
    "iterate_with_pool",
]

#: Tensors smaller than this (bytes) are pickled by value instead of through a slot.
INLINE_BELOW = 128 * 1024

_worker_slots: WorkerSlots | None = None


class SharedBatchPool:
    """The main process's side of the slot pool of one DataLoader's workers.

    Args:
        num_workers: The loader's number of worker processes.
        slots_per_worker: Slots each worker may own; beyond, batches take PyTorch's
            normal path. Each slot is as large as the largest batch written into it.
        inline_below: Tensors smaller than this many bytes are sent by value.
    """

    def __init__(
        self, num_workers: int, slots_per_worker: int, inline_below: int = INLINE_BELOW
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1 for a batch pool, got {num_workers}")
        if slots_per_worker < 1:
            raise ValueError(f"slots_per_worker must be >= 1, got {slots_per_worker}")
        self.pool_id = uuid.uuid4().hex
        self.num_workers = num_workers
        self.slots_per_worker = slots_per_worker
        self.inline_below = inline_below
        #: Ticket of the last batch of each slot that the main process no longer uses.
        self.tickets = torch.zeros((num_workers, slots_per_worker), dtype=torch.int64)
        self.tickets.share_memory_()
        #: Per worker: batches sent in a slot, batches sent the normal way, slots mapped.
        self.counts = torch.zeros((num_workers, 3), dtype=torch.int64).share_memory_()
        self._init_main()

    def _init_main(self) -> None:
        self._lock = threading.Lock()
        self._storages: dict[tuple[int, int], torch.UntypedStorage] = {}
        self._held: dict[tuple[int, int], int] = {}
        self._tokens: dict[int, int] = {}
        self._token_epochs: dict[int, int] = {}
        self._epoch = 0
        self._tickets = self.tickets.numpy()
        MAIN_POOLS[self.pool_id] = self

    def __getstate__(self) -> dict[str, Any]:
        # What a worker started with "spawn" or "forkserver" needs; the registry stays here.
        return {
            "pool_id": self.pool_id,
            "num_workers": self.num_workers,
            "slots_per_worker": self.slots_per_worker,
            "inline_below": self.inline_below,
            "tickets": self.tickets,
            "counts": self.counts,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # ------------------------------------------------------------------ main process
    def receive(
        self, worker: int, slot: int, token: int, ticket: int, storage: Any
    ) -> torch.UntypedStorage:
        """Records that a batch arrived in ``slot`` of ``worker``; returns the slot's storage.

        Called while unpickling a batch (in the main thread, or the pin-memory thread).
        """
        key = (worker, slot)
        with self._lock:
            if self._tokens.get(worker) != token:  # a new process for this worker id
                self._forget_worker(worker)
                self._tokens[worker] = token
                self._token_epochs[worker] = self._epoch
            if storage is not None:
                self._storages[key] = storage
            self._release_unused()
            self._held[key] = ticket
            return self._storages[key]

    def _release_unused(self) -> None:
        """Gives back to the workers every slot whose batch nothing here refers to."""
        for key, ticket in list(self._held.items()):
            if use_count(self._storages[key]) == 1:
                self._tickets[key] = ticket
                del self._held[key]

    def _forget_worker(self, worker: int) -> None:
        for key in [k for k in self._storages if k[0] == worker]:
            del self._storages[key]
            self._held.pop(key, None)

    def start_iteration(self) -> int:
        """Marks the start of an iteration over the loader; returns its number."""
        with self._lock:
            self._epoch += 1
            return self._epoch

    def forget(self, iteration: int) -> None:
        """Drops the mappings of the workers that served ``iteration`` (they have stopped).

        Batches still in use keep their memory until they die; nothing is given back.
        """
        with self._lock:
            for worker in [w for w, e in self._token_epochs.items() if e == iteration]:
                self._forget_worker(worker)
                del self._tokens[worker], self._token_epochs[worker]

    @property
    def mapped_bytes(self) -> int:
        """Bytes of worker slots the main process currently keeps mapped."""
        with self._lock:
            return sum(s.nbytes() for s in self._storages.values())

    def stats(self) -> dict[str, int]:
        """Totals over all workers so far: ``pooled`` and ``fallback`` batches, ``slots``."""
        totals = self.counts.sum(0).tolist()
        return {"pooled": totals[POOLED], "fallback": totals[FALLBACK], "slots": totals[MAPPED]}


def empty_batch(
    size: Sequence[int], dtype: torch.dtype, *, channels_last: bool = False
) -> torch.Tensor:
    """An uninitialised batch tensor to fill in place, in the cheapest memory to send.

    In a worker of a loader with a :class:`SharedBatchPool` it lives in one of the worker's
    reused slots; in any other DataLoader worker in a fresh shared-memory segment (as
    ``default_collate`` allocates); in the main process in ordinary memory.

    In a worker, return the tensor (or a view of it) as part of the batch and keep no other
    reference to it there: once the main process is done with the batch the worker writes
    the next batch into the same memory.

    Args:
        size: The shape; ``channels_last`` needs 4 dimensions ``(B, C, H, W)``.
        dtype: The element type.
        channels_last: Lay it out as ``torch.channels_last`` (NHWC in memory).
    """
    size = tuple(int(s) for s in size)
    if channels_last:
        stride = torch.empty(size, device="meta", memory_format=torch.channels_last).stride()
    else:
        stride = contiguous_strides(size)
    if _worker_slots is not None:
        return _worker_slots.empty(size, dtype, stride)
    nbytes = nbytes_of(size, dtype)
    if get_worker_info() is not None:
        return tensor_on(torch.UntypedStorage._new_shared(nbytes), dtype, size, stride)
    return local_buffers.take(nbytes, dtype, size, stride)


class PoolWorkerInit:
    """``worker_init_fn`` that gives the worker its slots, then runs the user's own.

    Args:
        pool: The loader's pool.
        user_init: The ``worker_init_fn`` the user passed, if any.
    """

    def __init__(self, pool: SharedBatchPool, user_init: Callable[[int], None] | None) -> None:
        self.pool = pool
        self.user_init = user_init

    def __call__(self, worker_id: int) -> None:
        global _worker_slots
        _worker_slots = WorkerSlots(self.pool, worker_id)
        if self.user_init is not None:
            self.user_init(worker_id)


class ExportingCollate:
    """Wraps a ``collate_fn``; in a pooled worker, exports its output through the slots.

    Args:
        collate: The collate function to run first.
    """

    def __init__(self, collate: Callable[[Any], Any]) -> None:
        self.collate = collate

    def __call__(self, batch: Any) -> Any:
        out = self.collate(batch)
        if _worker_slots is None:
            return out
        return _worker_slots.export(out)


def attach_pool(
    kwargs: dict[str, Any], reuse: bool = True, extra_slots: int = 0
) -> SharedBatchPool | None:
    """Sets up DataLoader keyword arguments for a pool; returns it (None without workers).

    Wraps ``collate_fn`` in :class:`ExportingCollate` and ``worker_init_fn`` in
    :class:`PoolWorkerInit` (unwrapping earlier wrappers: Lightning re-instantiates loaders
    from their attributes). ``collate_fn`` must be set.

    Args:
        kwargs: The keyword arguments, changed in place.
        reuse: False: only unwrap, attach nothing.
        extra_slots: Slots per worker beyond the usual (for a loader whose main process
            holds more than one batch a worker at a time).
    """
    collate = kwargs["collate_fn"]
    if isinstance(collate, ExportingCollate):
        kwargs["collate_fn"] = collate = collate.collate
    init = kwargs.get("worker_init_fn")
    if isinstance(init, PoolWorkerInit):
        kwargs["worker_init_fn"] = init = init.user_init
    workers = kwargs.get("num_workers", 0)
    if not reuse or workers <= 0:
        return None
    prefetch = kwargs.get("prefetch_factor") or 2
    # In flight per worker: `prefetch` batches, plus about two the main process still
    # holds (the one in the training step and the one fetched ahead).
    pool = SharedBatchPool(workers, slots_per_worker=prefetch + 3 + extra_slots)
    kwargs["collate_fn"] = ExportingCollate(collate)
    kwargs["worker_init_fn"] = PoolWorkerInit(pool, init)
    return pool


def iterate_with_pool(
    batches: Iterator[Any], pool: SharedBatchPool | None, persistent_workers: bool
) -> Iterator[Any]:
    """Yields ``batches``; afterwards drops the pool's mappings of workers that stopped."""
    if pool is None:
        yield from batches
        return
    iteration = pool.start_iteration()
    try:
        yield from batches
    finally:
        if not persistent_workers:
            pool.forget(iteration)  # this iteration's workers stop with it
