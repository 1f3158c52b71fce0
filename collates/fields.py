"""One field of a batch: what it holds (numbers, sequences, objects) and how sequences pad.

The building blocks of :class:`~collates.PadCollate` and
:func:`~collates.records.collate_records`: :func:`column_kind` classifies a field's values,
:func:`as_sequences` turns them into tensors, and :func:`pad_sequences` pads them along the
first dimension (left or right) with a mask and lengths.

This module never imports the ``datamodules`` package.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

__all__ = [
    "EXACT_FLOAT_INT",
    "HAS_SIDE",
    "NUMERIC_KINDS",
    "Number",
    "PLAIN",
    "SCALARS",
    "SCATTER_MAX_ROW",
    "Side",
    "as_sequences",
    "check_keys",
    "column_kind",
    "describe_value",
    "pad_sequences",
    "record_keys",
    "to_tensor",
    "value_kind",
]

Number = int | float | bool
Side = Literal["left", "right"]

NUMBER, ARRAY, OBJECT, EMPTY = "a number", "a sequence", "an object", "an empty list"
SCALARS = (bool, int, float, np.bool_, np.number)
NUMERIC_KINDS = frozenset("biuf")
PLAIN = frozenset((int, float, bool))
# torch < 2.6 has no `padding_side` in pad_sequence; left padding then takes the copy path.
HAS_SIDE = "padding_side" in inspect.signature(pad_sequence).parameters
EXACT_FLOAT_INT = 2**53  # pad_sequence takes its pad value as a double
# Up to this many padded elements per row, torch.cat + masked_scatter_ (a fixed number of ops)
# beats pad_sequence (one copy per sample, about 1.5 us each); above it pad_sequence wins.
SCATTER_MAX_ROW = 1024


def value_kind(value: Any) -> str:
    """Classify one field value as a number, a sequence, an empty list or an opaque object."""
    if isinstance(value, Tensor):
        return ARRAY if value.ndim else NUMBER
    if isinstance(value, SCALARS):
        return NUMBER
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in NUMERIC_KINDS:
            return OBJECT
        return ARRAY if value.ndim else NUMBER
    if isinstance(value, (list, tuple)):
        if not value:
            return EMPTY
        return ARRAY if isinstance(value[0], (*SCALARS, list, tuple)) else OBJECT
    return OBJECT


def describe_value(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array of shape {value.shape}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of length {len(value)}"
    return f"a {type(value).__name__}"


def column_kind(values: Sequence[Any], name: str) -> str:
    """The kind shared by every value of a field (empty lists fit sequences and objects)."""
    first = type(values[0])
    if first is Tensor and all(type(v) is Tensor for v in values):
        if len({v.ndim == 0 for v in values}) == 1:
            return NUMBER if values[0].ndim == 0 else ARRAY
    elif first in PLAIN and all(type(v) in PLAIN for v in values):
        return NUMBER
    elif first is str and all(type(v) is str for v in values):
        return OBJECT
    kind, ref = EMPTY, 0
    for i, value in enumerate(values):
        k = value_kind(value)
        if k == kind or (k == EMPTY and kind != NUMBER):
            continue
        if kind == EMPTY and not (k == NUMBER and i > 0):
            kind, ref = k, i
            continue
        raise TypeError(
            f"{name}: sample {i} holds {describe_value(value)} but sample {ref} holds "
            f"{describe_value(values[ref])}; every sample must hold the same kind of value in a "
            "field"
        )
    return ARRAY if kind == EMPTY else kind


def to_tensor(value: Any, name: str, index: int) -> Tensor | None:
    """One sequence value as a tensor with at least one dimension; None for an empty list."""
    if isinstance(value, Tensor):
        tensor = value
    elif isinstance(value, np.ndarray):
        tensor = torch.from_numpy(value)
    elif isinstance(value, (list, tuple)) and not value:
        return None  # length 0, any trailing shape and dtype
    else:
        try:
            tensor = torch.tensor(value)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(
                f"{name}: sample {index} holds {describe_value(value)} that is not a rectangular "
                f"list of numbers ({err})"
            ) from err
    if tensor.ndim == 0:
        raise TypeError(
            f"{name}: sample {index} holds {describe_value(value)}; a padded value needs at least "
            "one dimension"
        )
    return tensor


def as_sequences(values: Sequence[Any], name: str) -> tuple[list[Tensor], list[int]]:
    """A padded field's values as tensors of one trailing shape and dtype, and their lengths."""
    if all(type(v) is Tensor for v in values):  # fast path: already uniform tensors
        shapes = [v.shape for v in values]
        ndims = set(map(len, shapes))
        if (
            len(ndims) == 1
            and shapes[0]
            and (len(shapes[0]) == 1 or len({s[1:] for s in shapes}) == 1)
            and len({v.dtype for v in values}) == 1
        ):
            return list(values), [s[0] for s in shapes]
    tensors = [to_tensor(value, name, i) for i, value in enumerate(values)]
    ref = next((i for i, t in enumerate(tensors) if t is not None), None)
    if ref is None:
        return [torch.zeros(0, dtype=torch.int64) for _ in tensors], [0] * len(tensors)
    trailing, dtype = tensors[ref].shape[1:], tensors[ref].dtype
    for i, t in enumerate(tensors):
        if t is not None and t.shape[1:] != trailing:
            raise ValueError(
                f"{name}: sample {i} has shape {tuple(t.shape)} but sample {ref} has shape "
                f"{tuple(tensors[ref].shape)}; a padded field may differ only in its first "
                "dimension"
            )
        if t is not None and t.dtype != dtype:
            dtype = torch.promote_types(dtype, t.dtype)
    out = [torch.zeros((0, *trailing), dtype=dtype) if t is None else t.to(dtype) for t in tensors]
    return out, [t.shape[0] for t in out]


def pad_sequences(
    tensors: list[Tensor],
    lengths: list[int],
    pad_value: Number,
    padding_side: str,
    max_length: int | None,
    truncation_side: str,
    multiple: int | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Pad validated tensors along dim 0: ``(padded (B, L, ...), bool mask (B, L), lengths)``."""
    if max_length is not None and max(lengths) > max_length:
        keep_first = truncation_side == "right"
        tensors = [
            t if n <= max_length else (t[:max_length] if keep_first else t[n - max_length :])
            for t, n in zip(tensors, lengths, strict=True)
        ]
        lengths = [min(n, max_length) for n in lengths]
    longest = max(lengths)
    width = longest if multiple is None else -(-longest // multiple) * multiple
    ref, batch = tensors[0], len(tensors)
    trailing = ref.shape[1:]
    lens = torch.from_numpy(np.array(lengths, dtype=np.int64))
    if ref.device.type != "cpu":
        lens = lens.to(ref.device)
    right = padding_side == "right"
    positions = torch.arange(width, device=ref.device)
    mask = positions < lens.unsqueeze(1) if right else positions >= (width - lens).unsqueeze(1)
    per_item = math.prod(trailing)
    if width * per_item <= SCATTER_MAX_ROW:
        # Small rows: one cat and one masked_scatter beat pad_sequence's copy per sample.
        out = torch.full((batch, width, *trailing), pad_value, dtype=ref.dtype, device=ref.device)
        flat = torch.cat(tensors)
        if not trailing:
            out.masked_scatter_(mask, flat)
        elif per_item:
            cells = torch.arange(width * per_item, device=ref.device)
            start = lens * per_item if right else (width - lens) * per_item
            row_mask = cells < start.unsqueeze(1) if right else cells >= start.unsqueeze(1)
            out.view(batch, -1).masked_scatter_(row_mask, flat.reshape(-1))
        return out, mask, lens
    exact = not (isinstance(pad_value, int) and abs(pad_value) > EXACT_FLOAT_INT)
    if width == longest and exact and (right or HAS_SIDE):
        kwargs = {"padding_side": padding_side} if HAS_SIDE else {}
        out = pad_sequence(tensors, batch_first=True, padding_value=pad_value, **kwargs)
        return out, mask, lens
    out = torch.full((batch, width, *trailing), pad_value, dtype=ref.dtype, device=ref.device)
    for i, (t, n) in enumerate(zip(tensors, lengths, strict=True)):
        if n and right:
            out[i, :n] = t
        elif n:
            out[i, width - n :] = t
    return out, mask, lens


def check_keys(keys: Collection[Hashable] | None, fields: Sequence[Hashable], what: str) -> None:
    if keys:
        unknown = [k for k in keys if k not in fields]
        if unknown:
            raise ValueError(
                f"{what} names {unknown!r}, which the samples do not have "
                f"(their fields are {list(fields)!r})"
            )


def record_keys(records: Sequence[Any]) -> list[Hashable]:
    """The keys shared by every record (the order of record 0), with PadCollate's messages."""
    keys = list(records[0])
    key_set = records[0].keys()
    for i, sample in enumerate(records):
        if type(sample) is not dict and not isinstance(sample, Mapping):
            raise TypeError(
                f"sample {i} is {describe_value(sample)} but sample 0 is a dict; every sample "
                "must have the same structure"
            )
        if sample.keys() != key_set:
            missing = [k for k in keys if k not in sample]
            extra = [k for k in sample if k not in key_set]
            raise ValueError(
                f"sample {i} has keys {list(sample)!r} but sample 0 has {keys!r} "
                f"(missing: {missing!r}, extra: {extra!r}); every sample must have the "
                "same keys"
            )
    return keys
