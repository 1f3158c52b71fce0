"""Tensors on raw storage: views of a given buffer, small tensors sent by value, and the
main process's reused batch buffers.

The low-level half of :mod:`datamodules.core.shared_batches`:

* :func:`tensor_on`: a tensor of any dtype, shape and strides on an existing storage;
* :class:`InlineTensor`: a small tensor pickled by value (as a NumPy array when it is
  contiguous), cheaper than a shared-memory segment and a socket round trip;
* :class:`LocalBuffers`: batch buffers of the main process, reused once nothing refers to
  them (a fresh 9.6 MB buffer costs about 2,400 page faults the first time it is written).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "NUMPY_DTYPES",
    "InlineTensor",
    "LocalBuffers",
    "SubclassTensor",
    "contiguous_strides",
    "dense_strides",
    "is_plain_subclass",
    "local_buffers",
    "nbytes_of",
    "rebuild_inline",
    "rebuild_subclass",
    "tensor_on",
    "use_count",
]


def use_count(storage: torch.UntypedStorage) -> int:
    return torch._C._storage_Use_Count(storage._cdata)


def dense_strides(tensor: torch.Tensor) -> tuple[int, ...]:
    """The strides ``empty_like(tensor)`` would get: the tensor's own if it is dense."""
    return torch.empty_like(tensor, device="meta").stride()


def tensor_on(storage: torch.UntypedStorage, dtype, size, stride, offset=0) -> torch.Tensor:
    return torch.empty(0, dtype=dtype).set_(storage, offset, size, stride)


def rebuild_inline(data: Any, dtype: torch.dtype | None = None, size=None, stride=None):
    if dtype is None:  # a contiguous tensor's NumPy array (writable: unpickled)
        return torch.from_numpy(data)
    if not data:
        return torch.empty_strided(size, stride, dtype=dtype)
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype)
    return flat.as_strided(size, stride)


class InlineTensor:
    """A small tensor sent by value (as a NumPy array when it is contiguous: the cheapest)."""

    __slots__ = ("args",)

    def __init__(self, tensor: torch.Tensor) -> None:
        if tensor.dtype in NUMPY_DTYPES and tensor.is_contiguous():
            self.args = (tensor.numpy(),)
            return
        dense = tensor
        if not (
            tensor.storage_offset() == 0
            and tensor.stride() == dense_strides(tensor)
            and tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
        ):
            dense = torch.empty_like(tensor)
            dense.copy_(tensor)
        storage = dense.untyped_storage()
        raw = tensor_on(storage, torch.uint8, (storage.nbytes(),), (1,))
        self.args = (raw.numpy().tobytes(), tensor.dtype, tuple(tensor.shape), dense.stride())

    def __reduce__(self):
        return rebuild_inline, self.args


class SubclassTensor:
    """A tensor subclass (torchvision's ``tv_tensors``: ``BoundingBoxes``, ``Mask``, ...)
    crossing the queue as its plain tensor, exported like any other, and its attributes;
    rebuilt with ``as_subclass``, as its own pickling would rebuild it."""

    __slots__ = ("args",)

    def __init__(self, plain: Any, kind: type, attributes: dict[str, Any]) -> None:
        self.args = (plain, kind, attributes)

    def __reduce__(self):
        return rebuild_subclass, self.args


def rebuild_subclass(plain: torch.Tensor, kind: type, attributes: dict[str, Any]) -> Any:
    """The :class:`SubclassTensor` on this side: ``plain`` as ``kind``, its attributes set."""
    tensor = plain.as_subclass(kind)
    tensor.__dict__.update(attributes)
    return tensor


def is_plain_subclass(tensor: Any) -> bool:
    """A tensor subclass that pickles as its plain tensor and its ``__dict__`` (no
    ``Parameter``, no pickling of its own): what :class:`SubclassTensor` can carry."""
    kind = type(tensor)
    return (
        isinstance(tensor, torch.Tensor)
        and kind is not torch.Tensor
        and not isinstance(tensor, torch.nn.Parameter)
        and kind.__reduce_ex__ is torch.Tensor.__reduce_ex__
        and getattr(kind, "__setstate__", None) is getattr(torch.Tensor, "__setstate__", None)
    )


NUMPY_DTYPES = frozenset(
    {
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    }
)


def nbytes_of(size: Sequence[int], dtype: torch.dtype) -> int:
    return max(1, math.prod(size) * dtype.itemsize)


def contiguous_strides(size: Sequence[int]) -> tuple[int, ...]:
    """The strides of a C-contiguous tensor of ``size``."""
    strides, step = [], 1
    for extent in reversed(size):
        strides.append(step)
        step *= max(int(extent), 1)
    return tuple(reversed(strides))


class LocalBuffers:
    """Batch buffers of the main process, reused once nothing refers to them.

    A fresh 9.6 MB buffer costs about 2,400 page faults (1-3 ms here) the first time it is
    written; reusing a dead batch's memory costs none.
    """

    def __init__(self, keep: int = 4) -> None:
        self.keep = keep
        self.lock = threading.Lock()
        self.buffers: list[torch.UntypedStorage] = []

    def take(self, nbytes: int, dtype: torch.dtype, size, stride) -> torch.Tensor:
        """A tensor on a free buffer of ``nbytes`` (a new one if none is free)."""
        with self.lock:  # the tensor is made under the lock: its buffer is then taken
            for storage in self.buffers:
                if storage.nbytes() == nbytes and use_count(storage) == 1:
                    return tensor_on(storage, dtype, size, stride)
            storage = torch.UntypedStorage(nbytes)
            if len(self.buffers) >= self.keep:
                self.buffers = [b for b in self.buffers if use_count(b) > 1]
            if len(self.buffers) < self.keep:
                self.buffers.append(storage)
            return tensor_on(storage, dtype, size, stride)


local_buffers = LocalBuffers()
