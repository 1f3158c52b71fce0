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

import os
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import get_worker_info

from datamodules.core.tensor_memory import (
    InlineTensor,
    dense_strides,
    local_buffers,
    nbytes_of,
    tensor_on,
    use_count,
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

_FREE, _FILLING, _SENT = 0, 1, 2
# Columns of SharedBatchPool.counts, one row per worker.
_POOLED, _FALLBACK, _MAPPED = 0, 1, 2

_MAIN_POOLS: weakref.WeakValueDictionary[str, SharedBatchPool] = weakref.WeakValueDictionary()
_worker_slots: _WorkerSlots | None = None


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
        _MAIN_POOLS[self.pool_id] = self

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
        return {"pooled": totals[_POOLED], "fallback": totals[_FALLBACK], "slots": totals[_MAPPED]}


def _rebuild_pooled(
    pool_id: str,
    worker: int,
    slot: int,
    token: int,
    ticket: int,
    storage: Any,
    dtype: torch.dtype,
    size: tuple[int, ...],
    stride: tuple[int, ...],
    offset: int,
) -> torch.Tensor:
    pool = _MAIN_POOLS.get(pool_id)
    if pool is None:
        if storage is None:
            raise RuntimeError(
                "a batch from a DataLoader worker arrived after its loader was deleted"
            )
        return tensor_on(storage, dtype, size, stride, offset)
    storage = pool.receive(worker, slot, token, ticket, storage)
    return tensor_on(storage, dtype, size, stride, offset)


class _PooledTensor:
    """A worker's batch tensor in a slot, as it crosses the queue (pickles to a few ints)."""

    __slots__ = ("args",)

    def __init__(self, *args: Any) -> None:
        self.args = args

    def __reduce__(self):
        return _rebuild_pooled, self.args


class _Slot:
    __slots__ = ("storage", "nbytes", "state", "ticket", "announced")

    def __init__(self, nbytes: int) -> None:
        self.storage = torch.UntypedStorage._new_shared(nbytes)
        self.nbytes = nbytes
        self.state = _FREE
        self.ticket = -1
        self.announced = False


class _WorkerSlots:
    """One worker process's slots (module-global in that process, see :class:`PoolWorkerInit`)."""

    def __init__(self, pool: SharedBatchPool, worker: int) -> None:
        self.pool = pool
        self.worker = worker
        self.token = int.from_bytes(os.urandom(4), "little")
        self.sent = 0
        self.slots: list[_Slot] = []
        self.tickets = pool.tickets.numpy()[worker]
        self.counts = pool.counts.numpy()[worker]

    def _next_ticket(self) -> int:
        self.sent += 1
        return (self.token << 31) | (self.sent & 0x7FFFFFFF)

    def allocate(self, nbytes: int) -> tuple[int, torch.UntypedStorage] | None:
        """A free slot of at least ``nbytes``, now filling; None if every slot is busy."""
        best: int | None = None
        spare: int | None = None
        for i, slot in enumerate(self.slots):
            if slot.state == _SENT and self.tickets[i] == slot.ticket:
                slot.state = _FREE
            elif slot.state == _FILLING and use_count(slot.storage) == 1:
                slot.state = _FREE  # filled for a batch that failed and was never sent
            if slot.state != _FREE:
                continue
            if slot.nbytes >= nbytes:
                if best is None or slot.nbytes < self.slots[best].nbytes:
                    best = i
            else:
                spare = i
        if best is None:
            if len(self.slots) < self.pool.slots_per_worker:
                best = len(self.slots)
                self.slots.append(_Slot(nbytes))
            elif spare is not None:  # too small: replace it by a larger one
                best = spare
                self.slots[spare] = _Slot(nbytes)
            else:
                return None
        slot = self.slots[best]
        slot.state = _FILLING
        return best, slot.storage

    def empty(self, size: Sequence[int], dtype: torch.dtype, stride: Sequence[int]) -> torch.Tensor:
        nbytes = nbytes_of(size, dtype)
        found = self.allocate(nbytes)
        storage = torch.UntypedStorage._new_shared(nbytes) if found is None else found[1]
        return tensor_on(storage, dtype, tuple(size), tuple(stride))

    def export(self, value: Any) -> Any:
        """``value`` with its tensors replaced by what crosses the queue cheapest."""
        if type(value) is torch.Tensor:
            return self._export_tensor(value)
        if isinstance(value, tuple):
            items = [self.export(v) for v in value]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        if isinstance(value, list):
            return [self.export(v) for v in value]
        if isinstance(value, Mapping):
            exported = {k: self.export(v) for k, v in value.items()}
            return exported if type(value) is dict else _rebuilt_mapping(value, exported)
        return value

    def _export_tensor(self, tensor: torch.Tensor) -> Any:
        if tensor.device.type != "cpu" or tensor.requires_grad or tensor.layout != torch.strided:
            return tensor
        if tensor.is_quantized or tensor.is_conj() or tensor.is_neg():
            return tensor
        storage = tensor.untyped_storage()
        for i, slot in enumerate(self.slots):
            if slot.state == _FILLING and slot.storage.data_ptr() == storage.data_ptr():
                return self._send(i, tensor, tensor.stride(), tensor.storage_offset())
        nbytes = tensor.numel() * tensor.element_size()
        if nbytes < self.pool.inline_below:
            return InlineTensor(tensor)
        if tensor.is_shared():
            self.counts[_FALLBACK] += 1
            return tensor  # already a segment: PyTorch sends its descriptor, no copy
        found = self.allocate(nbytes)
        if found is None:
            self.counts[_FALLBACK] += 1
            return tensor
        index, slot_storage = found
        stride = dense_strides(tensor)
        tensor_on(slot_storage, tensor.dtype, tuple(tensor.shape), stride).copy_(tensor)
        return self._send(index, tensor, stride, 0)

    def _send(self, index: int, tensor: torch.Tensor, stride, offset: int) -> _PooledTensor:
        slot = self.slots[index]
        slot.state = _SENT
        slot.ticket = self._next_ticket()
        storage = None
        if not slot.announced:
            slot.announced = True
            storage = slot.storage
            self.counts[_MAPPED] += 1
        self.counts[_POOLED] += 1
        return _PooledTensor(
            self.pool.pool_id,
            self.worker,
            index,
            self.token,
            slot.ticket,
            storage,
            tensor.dtype,
            tuple(tensor.shape),
            tuple(stride),
            offset,
        )


def _rebuilt_mapping(original: Mapping, exported: dict) -> Any:
    try:
        return type(original)(exported)
    except TypeError:
        return exported


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
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    stride = torch.empty(size, device="meta", memory_format=memory_format).stride()
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
        _worker_slots = _WorkerSlots(self.pool, worker_id)
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


def attach_pool(kwargs: dict[str, Any], reuse: bool = True) -> SharedBatchPool | None:
    """Sets up DataLoader keyword arguments for a pool; returns it (None without workers).

    Wraps ``collate_fn`` in :class:`ExportingCollate` and ``worker_init_fn`` in
    :class:`PoolWorkerInit` (unwrapping earlier wrappers: Lightning re-instantiates loaders
    from their attributes). ``collate_fn`` must be set.

    Args:
        kwargs: The keyword arguments, changed in place.
        reuse: False: only unwrap, attach nothing.
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
    pool = SharedBatchPool(workers, slots_per_worker=prefetch + 3)
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
