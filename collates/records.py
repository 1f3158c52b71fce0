"""collate_records: dict records collated field by field, for record streams.

Numbers and equal-shape arrays are stacked, variable-length sequences padded with
:class:`~collates.PadCollate`'s rules, strings and other objects kept as lists. A field of
Python lists of numbers (what JSON and Parquet readers give) is converted once per batch.

This module never imports the ``datamodules`` package.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from itertools import chain
from typing import Any

import numpy as np
import torch
from torch import Tensor

from collates.fields import (
    ARRAY,
    NUMERIC_KINDS,
    PLAIN,
    Number,
    Side,
    check_keys,
    column_kind,
    describe_value,
    record_keys,
)
from collates.padding import PadCollate

__all__ = ["collate_field", "collate_records", "field_pad", "pad_flat_values"]


def collate_records(
    records: Sequence[Mapping[Hashable, Any]],
    *,
    pad_value: Number | Mapping[Hashable, Number] = 0,
    label_pad_value: Number | None = None,
    padding_side: Side = "right",
) -> dict[Hashable, Any]:
    """Collate dict records field by field, without adding masks or lengths.

    Meant for record streams: numbers and equal-shape arrays are stacked, variable-length
    sequences (tensors, arrays, lists of ints or floats) are padded along the first dimension
    (equal lengths give the same result as stacking), strings and other objects are kept as
    lists. Every record must have the same keys. Padding follows `PadCollate` (label fields use
    ``label_pad_value``, keys ending in ``"attention_mask"`` pad with 0).

    The result is what ``PadCollate(...)`` makes of the records' fields, but a field whose
    values are all Python lists of numbers (what JSON and Parquet readers give) is converted
    once per batch: the lists are flattened into one NumPy array and scattered into the
    padded batch in one step, instead of one tensor per record. Likewise a field of 1-D
    NumPy arrays of one dtype is concatenated once.

    Args:
        records: The records of one batch.
        pad_value: A number, or a mapping from key to number (unnamed keys pad with 0).
        label_pad_value: Pad value for the ``"labels"`` / ``"label"`` keys; None pads them
            with ``pad_value``.
        padding_side: ``"right"`` or ``"left"``.

    Returns:
        A dict with the records' keys, in order.

    Raises:
        ValueError: If ``records`` is empty or records disagree in keys or trailing shapes.
        TypeError: If a record is not a mapping or a field mixes kinds of values.
    """
    if not records:
        raise ValueError("collate_records got an empty batch; a batch needs at least one record")
    if not isinstance(records[0], Mapping):
        raise TypeError(f"record 0 is {describe_value(records[0])}; collate_records takes dicts")
    collate = PadCollate(pad_value, label_pad_value=label_pad_value, padding_side=padding_side)
    keys = record_keys(records)
    if isinstance(collate.pad_value, dict):
        check_keys(collate.pad_value, keys, "pad_value")
    return {key: collate_field(collate, key, [record[key] for record in records]) for key in keys}


def collate_field(collate: PadCollate, key: Hashable, column: list[Any]) -> Any:
    """One field of a batch, as :func:`collate_records` collates it: ``column`` holds the
    field's value in every record, in order, and ``collate`` gives the padding rules.

    A column-oriented reader (a stream that gathers a batch from decoded columns) calls it
    for the fields it does not convert itself, so the two give the same batch.
    """
    name = f"field {key!r}"
    first = type(column[0])
    if first in PLAIN and all(type(v) in PLAIN for v in column):
        return torch.tensor(column)  # numbers (PadCollate._stack's first case)
    if first is str and all(type(v) is str for v in column):
        return column
    label = key in collate.label_fields
    mask = isinstance(key, str) and key.endswith("attention_mask")
    pad = collate._field_pad(key, label, mask)
    fast = (
        _pad_flat(column, pad, collate.padding_side == "right")
        if first in (list, np.ndarray)
        else None
    )
    if fast is not None:
        return fast
    kind = column_kind(column, name)
    if kind == ARRAY:
        return collate._pad_field(column, name, pad)[0]
    return collate._stack(column, kind, name)


def field_pad(collate: PadCollate, key: Hashable) -> Number:
    """The pad value of a field under ``collate``'s rules (labels, attention masks)."""
    label = key in collate.label_fields
    mask = isinstance(key, str) and key.endswith("attention_mask")
    return collate._field_pad(key, label, mask)


def _flat_values(column: list[Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """A field's values flattened into one numeric array, and each value's length.

    Handles a column of Python lists of plain numbers (or of equal-length lists of them), or
    of 1-D NumPy arrays of one numeric dtype. Returns None for anything else (strings, numpy
    scalars, ragged nesting, empty columns, overflowing ints), which the general path then
    collates, or rejects with its message.
    """
    if type(column[0]) is np.ndarray:
        dtype = column[0].dtype
        if dtype.kind not in NUMERIC_KINDS or not all(
            type(v) is np.ndarray and v.ndim == 1 and v.dtype == dtype for v in column
        ):
            return None
        lengths = np.fromiter(map(len, column), dtype=np.int64, count=len(column))
        return np.concatenate(column), lengths
    if not all(type(v) is list for v in column):
        return None
    lengths = np.fromiter(map(len, column), dtype=np.int64, count=len(column))
    total = int(lengths.sum())
    if not total:
        return None
    probe = next(v for v in column if v)
    item = probe[0]
    if type(item) is list:  # one level of nesting: equal-length rows of numbers
        if not item or type(item[0]) not in PLAIN:
            return None
    elif type(item) not in PLAIN or type(probe[-1]) not in PLAIN:
        return None
    flat = list(chain.from_iterable(column))
    try:
        values = np.array(flat)
    except (ValueError, TypeError, OverflowError):
        return None
    kind = values.dtype.kind
    if kind not in "bif" or values.ndim > 2 or len(values) != total:
        return None
    if kind == "i" and values.dtype != np.int64:
        values = values.astype(np.int64)
    return values, lengths


def _pad_flat(column: list[Any], pad_value: Number, right: bool) -> Tensor | None:
    """Pads a field from its flattened values in one scatter; None if the fast path does not
    apply (see :func:`_flat_values`)."""
    found = _flat_values(column)
    if found is None:
        return None
    values, lengths = found
    if values.dtype.kind == "f" and type(column[0]) is list:
        values = values.astype(_numpy_dtype(torch.get_default_dtype()))
    return pad_flat_values(values, lengths, pad_value, right)


def pad_flat_values(
    values: np.ndarray, lengths: np.ndarray, pad_value: Number, right: bool
) -> Tensor:
    """A padded ``(len(lengths), max length, ...)`` batch from the rows' values laid end to
    end: row ``i`` holds the next ``lengths[i]`` of ``values``, padded with ``pad_value``."""
    tensor = torch.from_numpy(values)
    width = int(lengths.max())
    out = torch.full((len(lengths), width, *tensor.shape[1:]), pad_value, dtype=tensor.dtype)
    positions = np.arange(width)
    mask = positions < lengths[:, None] if right else positions >= (width - lengths)[:, None]
    out.numpy()[mask] = values
    return out


def _numpy_dtype(dtype: torch.dtype) -> Any:
    return torch.empty(0, dtype=dtype).numpy().dtype
