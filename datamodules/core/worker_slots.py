"""A DataLoader worker's side of :class:`~datamodules.core.shared_batches.SharedBatchPool`.

:class:`WorkerSlots` owns the worker's reused shared-memory slots and exports each batch
through them (the large private tensors of a batch copied together into one slot);
:class:`PooledTensor` is how a tensor in a slot crosses the queue (a few integers once the
main process has mapped the slot), and :func:`rebuild_pooled` turns it back into a tensor on
the main process's mapping. The pool itself and the public entry points are in
:mod:`datamodules.core.shared_batches`.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from datamodules.core.tensor_memory import (
    InlineTensor,
    SubclassTensor,
    dense_strides,
    is_plain_subclass,
    nbytes_of,
    tensor_on,
    use_count,
)

__all__ = ["MAIN_POOLS", "PooledTensor", "WorkerSlots", "rebuild_pooled", "rebuilt_mapping"]

FREE, FILLING, SENT = 0, 1, 2
# Columns of SharedBatchPool.counts, one row per worker.
POOLED, FALLBACK, MAPPED = 0, 1, 2

#: The main process's pools by id (what an arriving tensor is rebuilt against).
MAIN_POOLS: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()


def rebuild_pooled(
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
    pool = MAIN_POOLS.get(pool_id)
    if pool is None:
        if storage is None:
            raise RuntimeError(
                "a batch from a DataLoader worker arrived after its loader was deleted"
            )
        return tensor_on(storage, dtype, size, stride, offset)
    storage = pool.receive(worker, slot, token, ticket, storage)
    return tensor_on(storage, dtype, size, stride, offset)


class PooledTensor:
    """A worker's batch tensor in a slot, as it crosses the queue (pickles to a few ints)."""

    __slots__ = ("args",)

    def __init__(self, *args: Any) -> None:
        self.args = args

    def __reduce__(self):
        return rebuild_pooled, self.args


class _Slot:
    __slots__ = ("storage", "nbytes", "state", "ticket", "announced")

    def __init__(self, nbytes: int) -> None:
        self.storage = torch.UntypedStorage._new_shared(nbytes)
        self.nbytes = nbytes
        self.state = FREE
        self.ticket = -1
        self.announced = False


class WorkerSlots:
    """One worker process's slots (module-global in that process, set by
    :class:`~datamodules.core.shared_batches.PoolWorkerInit`).

    Args:
        pool: The loader's :class:`~datamodules.core.shared_batches.SharedBatchPool`.
        worker: This worker's id.
    """

    def __init__(self, pool: Any, worker: int) -> None:
        self.pool = pool
        self.worker = worker
        self.token = int.from_bytes(os.urandom(4), "little")
        self.sent = 0
        self.slots: list[_Slot] = []
        self.tickets = pool.tickets.numpy()[worker]
        self.counts = pool.counts.numpy()[worker]
        #: During one export: where each private tensor goes (slot, byte offset), the
        #: ticket of each slot already sent in this batch, and the plain tensor of each
        #: tensor subclass (by the subclass object's id).
        self._placed: dict[int, tuple[int, int]] = {}
        self._sent_now: dict[int, int] = {}
        self._plain: dict[int, torch.Tensor] = {}

    def _next_ticket(self) -> int:
        self.sent += 1
        return (self.token << 31) | (self.sent & 0x7FFFFFFF)

    def allocate(self, nbytes: int) -> tuple[int, torch.UntypedStorage] | None:
        """A free slot of at least ``nbytes``, now filling; None if every slot is busy."""
        best: int | None = None
        spare: int | None = None
        for i, slot in enumerate(self.slots):
            if slot.state == SENT and self.tickets[i] == slot.ticket:
                slot.state = FREE
            elif slot.state == FILLING and use_count(slot.storage) == 1:
                slot.state = FREE  # filled for a batch that failed and was never sent
            if slot.state != FREE:
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
        slot.state = FILLING
        return best, slot.storage

    def empty(self, size: Sequence[int], dtype: torch.dtype, stride: Sequence[int]) -> torch.Tensor:
        nbytes = nbytes_of(size, dtype)
        found = self.allocate(nbytes)
        storage = torch.UntypedStorage._new_shared(nbytes) if found is None else found[1]
        return tensor_on(storage, dtype, tuple(size), tuple(stride))

    def export(self, value: Any) -> Any:
        """``value`` with its tensors replaced by what crosses the queue cheapest.

        The private tensors of at least ``inline_below`` bytes are copied together into
        one slot (64-byte aligned, one after the other), so a batch of several tensors, a
        packed text batch's five, takes one slot rather than one each.
        """
        private: list[torch.Tensor] = []
        self._plain = {}
        self._collect(value, private)
        self._placed = {}
        self._sent_now = {}
        if private:
            offsets, total = [], 0
            for tensor in private:
                offsets.append(total)
                total += -(-(tensor.numel() * tensor.element_size()) // 64) * 64
            found = self.allocate(total)
            if found is not None:
                index, _ = found
                for tensor, offset in zip(private, offsets, strict=True):
                    self._placed[id(tensor)] = (index, offset)
        try:
            return self._export(value)
        finally:
            self._placed = {}
            self._sent_now = {}
            self._plain = {}

    def _collect(self, value: Any, private: list[torch.Tensor]) -> None:
        """Appends the tensors of ``value`` that need copying into a slot."""
        if type(value) is torch.Tensor:
            if self.exportable(value) and self._slot_of(value) is None:
                nbytes = value.numel() * value.element_size()
                if nbytes >= self.pool.inline_below and not value.is_shared():
                    private.append(value)
        elif is_plain_subclass(value):  # its plain tensor, kept to be exported the same
            plain = self._plain[id(value)] = value.as_subclass(torch.Tensor)
            self._collect(plain, private)
        elif isinstance(value, list | tuple):
            for item in value:
                self._collect(item, private)
        elif isinstance(value, Mapping):
            for item in value.values():
                self._collect(item, private)

    def _export(self, value: Any) -> Any:
        if type(value) is torch.Tensor:
            return self._export_tensor(value)
        plain = self._plain.get(id(value))
        if plain is not None:  # a tv_tensor: its plain tensor, rewrapped on arrival
            return SubclassTensor(self._export_tensor(plain), type(value), dict(value.__dict__))
        if isinstance(value, tuple):
            items = [self._export(v) for v in value]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        if isinstance(value, list):
            return [self._export(v) for v in value]
        if isinstance(value, Mapping):
            exported = {k: self._export(v) for k, v in value.items()}
            return exported if type(value) is dict else rebuilt_mapping(value, exported)
        return value

    @staticmethod
    def exportable(tensor: torch.Tensor) -> bool:
        """A CPU, strided tensor without autograd or lazy conjugation: one a slot can hold."""
        if tensor.device.type != "cpu" or tensor.requires_grad or tensor.layout != torch.strided:
            return False
        return not (tensor.is_quantized or tensor.is_conj() or tensor.is_neg())

    def _slot_of(self, tensor: torch.Tensor) -> int | None:
        """The slot whose memory ``tensor`` is on, if it is one being filled or sent now."""
        pointer = tensor.untyped_storage().data_ptr()
        for i, slot in enumerate(self.slots):
            if (
                slot.state == FILLING or i in self._sent_now
            ) and slot.storage.data_ptr() == pointer:
                return i
        return None

    def _export_tensor(self, tensor: torch.Tensor) -> Any:
        if not self.exportable(tensor):
            return tensor
        index = self._slot_of(tensor)
        if index is not None:
            return self._send(index, tensor, tensor.stride(), tensor.storage_offset())
        placed = self._placed.get(id(tensor))
        if placed is not None:
            index, offset = placed
            stride = dense_strides(tensor)
            elements = offset // tensor.element_size()
            slot_storage = self.slots[index].storage
            tensor_on(slot_storage, tensor.dtype, tuple(tensor.shape), stride, elements).copy_(
                tensor
            )
            return self._send(index, tensor, stride, elements)
        if tensor.numel() * tensor.element_size() < self.pool.inline_below:
            return InlineTensor(tensor)
        self.counts[FALLBACK] += 1
        return tensor  # shared already (PyTorch sends its descriptor), or no slot was free

    def _send(self, index: int, tensor: torch.Tensor, stride, offset: int) -> PooledTensor:
        slot = self.slots[index]
        storage = None
        ticket = self._sent_now.get(index)
        if ticket is None:  # the first tensor of this batch in the slot
            slot.state = SENT
            slot.ticket = ticket = self._sent_now[index] = self._next_ticket()
            if not slot.announced:
                slot.announced = True
                storage = slot.storage
                self.counts[MAPPED] += 1
            self.counts[POOLED] += 1
        return PooledTensor(
            self.pool.pool_id,
            self.worker,
            index,
            self.token,
            ticket,
            storage,
            tensor.dtype,
            tuple(tensor.shape),
            tuple(stride),
            offset,
        )


def rebuilt_mapping(original: Mapping, exported: dict) -> Any:
    try:
        return type(original)(exported)
    except TypeError:
        return exported
