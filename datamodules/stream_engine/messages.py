"""Several batches in one message from a stream worker, dealt out in the order of one a message.

A DataLoader worker sends each item it yields as one message: pickled, queued, unpickled by
the main process. On a small machine a message costs about 0.2 ms (2 workers: at most about
4,600 messages a second, however cheap the batch), so a stream of small batches, such as 64
parsed records, is bound by messages, not by reading. A worker of a
:class:`~datamodules.stream_engine.loader.StreamLoader` therefore groups its batches,
:data:`MESSAGE_BATCHES` at a time (fewer when they are large: a message carries at most about
:data:`MESSAGE_BYTES` of tensors, so image batches still travel one by one in their reused
shared-memory slots), and the main process deals them out again with :func:`interleave`.
Measured with 64 x 40 int64 batches that cost nothing to make: 4,600 batches a second one a
message, 19,000 at 32 a message. A message still costs the DataLoader about 0.4 ms on each
side, so even gathered batches pay for larger ones: 2 workers on the Parquet records of
``benchmarks/bench_streaming.py`` gave 430k records/s at 32 batches (1 MiB) a message, 475k
at 64 (2 MiB), 556-605k at 128 (4 MiB) and 633k at 256 (8 MiB), which would double the
shared memory again; 128 it is.

The tensors of a message's batches travel *packed* (:func:`pack`): laid end to end in one
flat byte tensor, allocated in one of the worker's reused shared-memory slots
(:func:`~datamodules.core.shared_batches.empty_batch`), with a small layout that says where
each lies. The main process turns them back into views of that one tensor (:func:`unpack`):
one slot and one rebuilt tensor a message instead of one of each per tensor. Tensors below
:data:`COPIED_BELOW` bytes are copied out of it (so that a kept ``batch["id"]`` does not keep
the whole message's slot from its worker); a kept large tensor keeps the slot, as it did
before packing. A group whose tensors are not
all plain, private and contiguous (an image batch already written into its slot, a tensor
that needs gradients) travels unpacked, each tensor the usual way.

The order is exactly the one of one batch a message: the DataLoader takes one batch from each
worker in turn, skipping workers that have run out; :func:`interleave` does the same over the
workers' queues of received batches. So everything that counts delivered batches (a
checkpoint's position, which batches each worker delivered, an elastic resume) is unchanged.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from datamodules.core.tensor_memory import NUMPY_DTYPES
from datamodules.core.worker_slots import WorkerSlots

__all__ = [
    "COPIED_BELOW",
    "Layout",
    "MESSAGE",
    "MESSAGE_BATCHES",
    "MESSAGE_BYTES",
    "MESSAGE_INLINE_BELOW",
    "PackedGroup",
    "Placed",
    "Views",
    "flat_bytes",
    "interleave",
    "messages",
    "pack",
    "tensor_bytes",
    "unpack",
]

#: Batches a worker groups in one message, at most.
MESSAGE_BATCHES = 128
#: Tensor bytes beyond which a message is sent without waiting for more batches.
MESSAGE_BYTES = 1 << 22
#: Tensors of a message below this many bytes are pickled by value; the others are copied
#: together into one reused shared-memory slot. A message holds many batches, so the slot
#: pays sooner than for one batch (core's ``INLINE_BELOW``): measured with 2 workers on
#: Parquet records of 64 ids and ~40 tokens, 230k records/s at 128 KB, 370-450k at 0.5-16 KB.
MESSAGE_INLINE_BELOW = 1024
#: Packed tensors below this many bytes are copied out of the message in the main process.
COPIED_BELOW = 4096
#: Marks a message (a tuple ``(MESSAGE, worker, last, batches)``).
MESSAGE = "datamodules.streaming.message"


def tensor_bytes(value: Any) -> int:
    """Bytes of the tensors in a batch (dicts, lists and tuples of them)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(tensor_bytes(v) for v in value)
    return 0


class Placed:
    """Where a packed tensor lies in its message's flat bytes."""

    __slots__ = ("offset", "dtype", "shape")

    def __init__(self, offset: int, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
        self.offset, self.dtype, self.shape = offset, dtype, shape

    def __reduce__(self):
        return Placed, (self.offset, self.dtype, self.shape)


class Layout:
    """The batches of a packed message, their tensors replaced by :class:`Placed` (opaque to
    the worker's export, which then only sees the flat tensor)."""

    __slots__ = ("batches",)

    def __init__(self, batches: list[Any]) -> None:
        self.batches = batches

    def __reduce__(self):
        return Layout, (self.batches,)


class _Unpackable(Exception):
    pass


def _packable(tensor: torch.Tensor) -> bool:
    """A plain, private, contiguous CPU tensor (what a worker's export would copy too)."""
    return (
        type(tensor) is torch.Tensor
        and WorkerSlots.exportable(tensor)
        and not tensor.is_shared()
        and tensor.is_contiguous()
    )


def _skeleton(value: Any, tensors: list[torch.Tensor], places: list[Placed], at: list[int]):
    """``value`` with its tensors replaced by places (raises _Unpackable)."""
    if isinstance(value, torch.Tensor):
        if not _packable(value):
            raise _Unpackable
        place = Placed(at[0], value.dtype, tuple(value.shape))
        tensors.append(value)
        places.append(place)
        at[0] += -(-(value.numel() * value.element_size()) // 64) * 64
        return place
    if type(value) is dict:
        return {k: _skeleton(v, tensors, places, at) for k, v in value.items()}
    if type(value) is list:
        return [_skeleton(v, tensors, places, at) for v in value]
    if type(value) is tuple:
        return tuple(_skeleton(v, tensors, places, at) for v in value)
    if isinstance(value, str | bytes | int | float | bool | None):
        return value
    raise _Unpackable  # anything else (a namedtuple, a dataclass) travels as it is


def pack(batches: list[Any]) -> list[Any] | tuple[torch.Tensor, Layout]:
    """The batches with their tensors laid end to end in one flat byte tensor (in a reused
    shared-memory slot in a pooled worker): ``(flat, layout)``; the batches themselves when
    they hold a tensor that cannot travel so (see the module docstring) or none at all."""
    tensors: list[torch.Tensor] = []
    places: list[Placed] = []
    at = [0]
    try:
        skeleton = [_skeleton(batch, tensors, places, at) for batch in batches]
    except _Unpackable:
        return batches
    if not tensors:
        return batches
    flat = flat_bytes(at[0])
    target = flat.numpy()
    for tensor, place in zip(tensors, places, strict=True):
        nbytes = tensor.numel() * tensor.element_size()
        if not nbytes:
            continue
        if tensor.dtype in _NUMPY:
            target[place.offset : place.offset + nbytes] = tensor.numpy().reshape(-1).view("u1")
        else:
            part = flat[place.offset : place.offset + nbytes].view(tensor.dtype)
            part.view(tensor.shape).copy_(tensor)
    return flat, Layout(skeleton)


def unpack(batches: Any) -> list[Any]:
    """The batches of a message as :func:`pack` sent them (views of its flat tensor)."""
    if type(batches) is not tuple:
        return batches
    flat, layout = batches
    views = Views(flat)
    return [views.rebuilt(batch) for batch in layout.batches]


class Views:
    """The tensors of one packed message: views of its flat bytes (through NumPy where the
    dtype has one: ``as_strided`` on a shared-memory tensor cost about 18 us a call against
    3 us for ``torch.from_numpy`` of a NumPy view, which was half the main process's time).

    (A class, not a recursive closure over ``flat``: that would be a reference cycle, which
    keeps the message's slot from its worker until the garbage collector runs.)
    """

    def __init__(self, flat: torch.Tensor) -> None:
        self.flat = flat
        self.bytes = flat.numpy() if flat.device.type == "cpu" else None
        self.typed: dict[torch.dtype, torch.Tensor] = {}

    def rebuilt(self, value: Any) -> Any:
        if type(value) is Placed:
            return self.tensor(value)
        if type(value) is dict:
            return {k: self.rebuilt(v) for k, v in value.items()}
        if type(value) is list:
            return [self.rebuilt(v) for v in value]
        if type(value) is tuple:
            return tuple(self.rebuilt(v) for v in value)
        return value

    def tensor(self, place: Placed) -> torch.Tensor:
        dtype, shape = place.dtype, place.shape
        size = _itemsize(dtype)
        nbytes = math.prod(shape) * size
        if self.bytes is not None and dtype in _NUMPY:  # NumPy views: the cheapest to make
            part = self.bytes[place.offset : place.offset + nbytes].view(_NUMPY[dtype])
            part = part.reshape(shape)
            # A small tensor is copied out, so that keeping it (a batch's ids, say) does not
            # keep the whole message's slot from its worker.
            return torch.from_numpy(part.copy() if nbytes < COPIED_BELOW else part)
        typed = self.typed.get(dtype)
        if typed is None:
            typed = self.typed[dtype] = self.flat.view(dtype)
        view = typed.as_strided(shape, _strides(shape), place.offset // size)
        return view.clone() if nbytes < COPIED_BELOW else view


def _strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


#: The NumPy dtype of each torch dtype that has one.
_NUMPY: dict[torch.dtype, Any] = {d: torch.empty(0, dtype=d).numpy().dtype for d in NUMPY_DTYPES}
_ITEMSIZE: dict[torch.dtype, int] = {}


def _itemsize(dtype: torch.dtype) -> int:
    size = _ITEMSIZE.get(dtype)
    if size is None:
        size = _ITEMSIZE[dtype] = torch.empty(0, dtype=dtype).element_size()
    return size


class PackedGroup:
    """Batches a worker made packed already (a columnar group,
    :func:`~datamodules.stream_engine.gather.gather_group`): their flat tensor and each batch's
    layout. :func:`messages` sends it as one message, as it is."""

    __slots__ = ("flat", "layouts")

    def __init__(self, flat: torch.Tensor, layouts: list[Any]) -> None:
        self.flat, self.layouts = flat, layouts

    def __len__(self) -> int:
        return len(self.layouts)


def flat_bytes(nbytes: int) -> torch.Tensor:
    """A flat byte tensor for a packed message (a reused slot in a pooled worker). Its
    storage is rounded up to an eighth of the next power of two (at least 64 KiB): a slot is
    reused only by a message that fits in it, so messages of about one size share their
    slots, and at most an eighth of one is left over."""
    from datamodules.core.shared_batches import empty_batch

    step = max(1 << 16, (1 << max(nbytes - 1, 1).bit_length()) // 8)
    return empty_batch((-(-nbytes // step) * step,), torch.uint8)[:nbytes]


def messages(batches: Iterable[Any], worker: int) -> Iterator[tuple[str, int, bool, Any]]:
    """A worker's batches grouped into messages, packed (:func:`pack`; a
    :class:`PackedGroup` travels as it is); a last, empty message says the worker is done."""
    group: list[Any] = []
    size = 0
    for batch in batches:
        if type(batch) is PackedGroup:
            if group:
                yield (MESSAGE, worker, False, pack(group))
                group, size = [], 0
            yield (MESSAGE, worker, False, (batch.flat, Layout(batch.layouts)))
            continue
        if group and (len(group) >= MESSAGE_BATCHES or size >= MESSAGE_BYTES):
            yield (MESSAGE, worker, False, pack(group))
            group, size = [], 0
        group.append(batch)
        size += tensor_bytes(batch)
    if group:
        yield (MESSAGE, worker, False, pack(group))
    yield (MESSAGE, worker, True, [])


def interleave(received: Iterable[Any], workers: int) -> Iterator[Any]:
    """The batches of the workers' messages, one from each worker in turn (workers that ran
    out are skipped), as the DataLoader hands out batches sent one a message."""
    queues: list[deque[Any]] = [deque() for _ in range(workers)]
    done = [False] * workers
    source = iter(received)
    worker = 0
    while True:
        if queues[worker]:
            yield queues[worker].popleft()
        elif not done[worker]:
            while not queues[worker] and not done[worker]:
                message = next(source, None)
                if message is None:  # the loader stopped (its iteration was cut short)
                    return
                _, sender, last, batches = message
                queues[sender].extend(unpack(batches))
                # Held no longer, so that the message's slot is free once its batches are.
                message = batches = None
                done[sender] = done[sender] or last
            continue  # this worker's turn again, now with a batch (or done)
        elif all(d and not q for d, q in zip(done, queues, strict=True)):
            return
        worker = (worker + 1) % workers
