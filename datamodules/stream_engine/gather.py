"""Batches gathered from a stream worker's :class:`~datamodules.stream_engine.columns.RowStore`.

:func:`gather` makes one batch, :func:`gather_group` several consecutive ones at once, laid
out in one flat byte tensor ready to travel as one message
(:mod:`~datamodules.stream_engine.messages`).

The batch is the one :func:`~collates.records.collate_records` makes of the same records
(what the record path gives): numbers become int64, the default float dtype or bool as
``torch.tensor`` would make them, lists of numbers are padded with the same values and on the
same side, other fields go through the very same per-field code
(:func:`~collates.records.collate_field`). A batch the columns cannot give exactly (blocks of
other fields, a block kept as records) returns None, and the stream collates its records.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import torch

from collates.padding import PadCollate
from collates.records import collate_field, field_pad
from datamodules.stream_engine.columns import INT_KINDS, LISTS, NUMBERS, Field, RowStore

__all__ = ["gather", "gather_group"]


def gather(store: RowStore, positions: Sequence[int], collate: PadCollate) -> dict | None:
    """The batch of the records at ``positions`` (in that order), from their columns; None
    when only their records can give it exactly (see the module docstring)."""
    rows = store._index(positions)
    schema = store._schema[rows]
    sid = int(schema[0])
    if sid < 0 or (schema != sid).any():
        return None  # records, or other fields: the record path says which record and why
    out: dict[Hashable, Any] = {}
    for key in store._keys[sid]:
        field = store._fields[key]
        if field.kind == NUMBERS:
            out[key] = _tensor(field.data[rows])
        elif field.kind == LISTS:
            padded = _lists(key, field, rows, collate)
            out[key] = padded if padded is not None else _values(key, field, rows, collate)
        else:
            out[key] = _values(key, field, rows, collate)
    return out


def _tensor(array: np.ndarray) -> torch.Tensor:
    """As ``torch.tensor`` makes Python numbers of these kinds: int64, default float, bool."""
    if array.dtype.kind in INT_KINDS:
        return torch.from_numpy(array.astype(np.int64, copy=False))
    if array.dtype.kind == "f":
        default = torch.empty(0).numpy().dtype
        return torch.from_numpy(array.astype(default, copy=False))
    return torch.from_numpy(array)


def _lists(key: Hashable, field: Field, rows: np.ndarray, collate: PadCollate) -> Any:
    """A field of lists of numbers, padded in one scatter (None: only empty lists, which the
    general path gives a dtype)."""
    lengths = field.lengths.take(rows)
    ends = np.cumsum(lengths)
    total = int(ends[-1])
    if not total:
        return None
    before = ends - lengths  # where each row's values start in the batch's flat values
    width = int(lengths.max())
    within = np.arange(total)
    source = within + np.repeat(field.starts.take(rows) - before, lengths)
    row_start = np.arange(0, len(rows) * width, width)
    if collate.padding_side != "right":
        row_start += width - lengths
    target = within + np.repeat(row_start - before, lengths)
    kind = field.values.dtype.kind
    if kind == "f":
        dtype = torch.empty(0).numpy().dtype
    elif kind in INT_KINDS:
        dtype = np.dtype(np.int64)
    else:
        dtype = field.values.dtype
    # As pad_flat_values pads (torch.full with the field's pad value, then the rows' values).
    pad = field_pad(collate, key)
    if (
        isinstance(pad, bool)
        or not isinstance(pad, int | float)
        or (kind != "f" and isinstance(pad, float))
    ):
        out = torch.full(
            (len(rows) * width,), pad, dtype=torch.from_numpy(np.zeros(0, dtype)).dtype
        )
        flat = out.numpy()
    else:
        flat = np.full(len(rows) * width, pad, dtype=dtype)
        out = torch.from_numpy(flat)
    flat[target] = field.values.take(source)
    return out.view(len(rows), width)


def _values(key: Hashable, field: Field, rows: np.ndarray, collate: PadCollate) -> Any:
    return collate_field(collate, key, [field.python(row) for row in rows.tolist()])


def _out_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a batch gets for a column of ``dtype`` (as :func:`_tensor` makes it)."""
    if dtype.kind in INT_KINDS:
        return np.dtype(np.int64)
    if dtype.kind == "f":
        return torch.empty(0).numpy().dtype
    return dtype


def gather_group(
    store: RowStore,
    positions: np.ndarray,
    sizes: Sequence[int],
    collate: PadCollate,
    allocate: Callable[[int], torch.Tensor],
) -> tuple[torch.Tensor, list[dict[Hashable, Any]]] | None:
    """Several consecutive batches at once (``sizes[k]`` records each, ``positions`` end to
    end), laid out in one flat byte tensor: ``(flat, layouts)``, each batch's layout mapping
    its fields to :class:`~datamodules.stream_engine.messages.Placed`; the tensors equal
    :func:`gather`'s, batch by batch. None unless every field of every record is numbers or
    lists of numbers (with a value in each batch), the batches then gathered one by one.

    A handful of NumPy operations per field for the whole group, instead of per batch:
    what a worker spends per batch, not per record, is what bounds a stream of small batches.
    ``allocate(nbytes)`` gives the flat tensor (a worker's reused shared-memory slot).
    """
    from datamodules.stream_engine.messages import Placed

    rows = store._index(positions)
    schema = store._schema[rows]
    sid = int(schema[0])
    if sid < 0 or (schema != sid).any():
        return None
    keys = store._keys[sid]
    fields = [store._fields[key] for key in keys]
    if any(field.kind not in (NUMBERS, LISTS) for field in fields):
        return None
    sizes = np.asarray(sizes, dtype=np.int64)
    starts = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    batch_of = np.repeat(np.arange(len(sizes)), sizes)
    plans = []  # per field: (kind, dtype, data) and its byte offset in the flat tensor
    total = 0
    for key, field in zip(keys, fields, strict=True):
        if field.kind == NUMBERS:
            dtype = _out_dtype(field.data.dtype)
            plans.append((key, NUMBERS, dtype, total, None))
            total += len(rows) * dtype.itemsize
        else:
            lengths = field.lengths.take(rows)
            widths = np.maximum.reduceat(lengths, starts)
            if not widths.all():
                return None  # a batch of only empty lists: the general path gives its dtype
            dtype = _out_dtype(field.values.dtype)
            pad = field_pad(collate, key)
            if isinstance(pad, bool) or not isinstance(pad, int | float):
                return None
            if dtype.kind != "f" and isinstance(pad, float):
                return None
            cells = sizes * widths
            plans.append((key, LISTS, dtype, total, (lengths, widths, cells, pad)))
            total += int(cells.sum()) * dtype.itemsize
        total = -(-total // 64) * 64
    flat = allocate(total)
    raw = flat.numpy()
    layouts: list[dict[Hashable, Any]] = [{} for _ in sizes]
    for (key, kind, dtype, base, extra), field in zip(plans, fields, strict=True):
        size = dtype.itemsize
        if kind == NUMBERS:
            region = raw[base : base + len(rows) * size].view(dtype)
            region[:] = field.data.take(rows)
            torch_dtype = torch.from_numpy(region[:0]).dtype
            for k, (start, n) in enumerate(zip(starts.tolist(), sizes.tolist(), strict=True)):
                layouts[k][key] = Placed(base + start * size, torch_dtype, (n,))
            continue
        lengths, widths, cells, pad = extra
        region = raw[base : base + int(cells.sum()) * size].view(dtype)
        region[:] = pad
        firsts = np.zeros(len(sizes), dtype=np.int64)  # where each batch's matrix starts
        np.cumsum(cells[:-1], out=firsts[1:])
        # Row r of batch k starts at firsts[k] + (r - starts[k]) * widths[k] (right padding).
        row_width = widths[batch_of]
        row_start = firsts[batch_of] + (np.arange(len(rows)) - starts[batch_of]) * row_width
        if collate.padding_side != "right":
            row_start += row_width - lengths
        ends = np.cumsum(lengths)
        before = ends - lengths
        within = np.arange(int(ends[-1]))
        source = within + np.repeat(field.starts.take(rows) - before, lengths)
        target = within + np.repeat(row_start - before, lengths)
        region[target] = field.values.take(source)
        torch_dtype = torch.from_numpy(region[:0]).dtype
        for k, (first, n, w) in enumerate(
            zip(firsts.tolist(), sizes.tolist(), widths.tolist(), strict=True)
        ):
            layouts[k][key] = Placed(base + first * size, torch_dtype, (n, w))
    return flat, layouts
