"""Packed batches from a pack plan: the plan laid out once as a row table, then one gather a batch.

A batch of packed rows is five ``(B, L)`` arrays built from the batch's *segments*: the
pieces of documents in its rows, and each row's padding run. Done segment by segment in
Python that is thousands of small operations; done per batch with index arithmetic over a
CSR plan it is a few dozen numpy calls, most of them on arrays of a hundred segments, whose
dispatch costs about as much as their work. :class:`RowTable` lays the plan out once so
that a batch needs as few calls as possible:

* each row's segments sit in one *line* of ``K`` cells (``K`` about twice the mean
  segments per row; unused cells have length 0), so a batch's segments are one ``take`` of
  its rows' lines, already in row order and field by field contiguous;
* a row with more than ``K`` segments continues in extra lines (appended after the rows'
  first lines), so ``K`` stays small however skewed the plan, and the table stays within
  a small multiple of the plan's own size;
* each cell stores its token offset and its position *minus its slot in the row*, so a
  token's id index and position are the segment's value repeated plus the token's slot,
  with no per-batch cumulative sums.

:func:`gather_rows` then builds the batch: three ``repeat``\\ s, two additions, one gather of
the token ids, and the labels, mask and ``cu_seqlens``. ``TextDataModule``'s packing and
:func:`collates.pack_collate` both go through it. This module imports nothing from
``datamodules``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from collates.pack_plan import PackPlan

__all__ = [
    "IGNORE_INDEX",
    "LINE_FACTOR",
    "LINE_SLACK",
    "PLANES",
    "RowTable",
    "gather_rows",
    "row_slots",
]

IGNORE_INDEX = -100

#: The batch tensors of :func:`gather_rows`, in the order they are built.
PLANES = ("input_ids", "position_ids", "document_ids", "labels", "attention_mask")

#: Line width: about this many times the mean segments per row (plus :data:`LINE_SLACK`).
LINE_FACTOR = 2
LINE_SLACK = 4

_SLOTS: dict[tuple[int, int], np.ndarray] = {}


def row_slots(rows: int, width: int) -> np.ndarray:
    """``0, 1, ..., width - 1`` repeated ``rows`` times (int64, read-only, made once per shape)."""
    key = (rows, width)
    out = _SLOTS.get(key)
    if out is None:
        if len(_SLOTS) > 64:
            _SLOTS.clear()
        out = _SLOTS[key] = np.tile(np.arange(width, dtype=np.int64), rows)
        out.flags.writeable = False
    return out


@dataclass(frozen=True)
class RowTable:
    """A pack plan as fixed-width lines of segments, ready for :func:`gather_rows`.

    Attributes:
        cells: int64 ``(4, lines, K)``: per cell, the token offset in the flat buffer minus
            the cell's slot in its row, the document id (-1 for padding), the position
            within the document minus the slot, and the token count (0: unused cell).
        extra_lines: For each row with more than ``K`` segments, its further lines in order.
        row_longest: Per row, its longest segment.
        row_padding: Per row, the padding tokens at its end.
        padded_rows: The rows that end in padding.
        width: Tokens per row.
    """

    cells: np.ndarray
    extra_lines: dict[int, list[int]]
    row_longest: list[int]
    row_padding: list[int]
    padded_rows: frozenset[int]
    width: int

    @property
    def num_rows(self) -> int:
        """Rows of the plan."""
        return len(self.row_longest)

    @classmethod
    def from_plan(cls, plan: PackPlan, offsets: np.ndarray, width: int) -> RowTable:
        """Lays out ``plan``: each row's pieces in order, then its padding run (if any).

        Args:
            plan: The pack plan (its ``doc`` are positions into ``offsets``, and the ids
                written to ``document_ids``).
            offsets: Per document of the plan, the index of its first token in the flat buffer.
            width: Tokens per row.

        Raises:
            ValueError: If a row of the plan holds more than ``width`` tokens.
        """
        rows = plan.num_rows
        pieces = np.diff(plan.row_ptr)
        if rows and int(pieces.min()) > 0:
            row_tokens = np.add.reduceat(plan.length, plan.row_ptr[:-1])
        else:  # a row without pieces (reduceat would read the next row's)
            row_of_piece = np.repeat(np.arange(rows, dtype=np.int64), pieces)
            row_tokens = np.bincount(row_of_piece, weights=plan.length, minlength=rows)
            row_tokens = row_tokens.astype(np.int64)
        if rows and int(row_tokens.max()) > width:
            raise ValueError(f"a row holds {int(row_tokens.max())} tokens, more than {width}.")
        padding = width - row_tokens
        padded = np.flatnonzero(padding > 0)
        # Segments in row order: each row's pieces, then its padding run.
        counts = pieces + (padding > 0)
        total = int(counts.sum())
        seg_ptr = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(counts, out=seg_ptr[1:])
        row_of = np.repeat(np.arange(rows, dtype=np.int64), counts)
        pad_at = seg_ptr[1:][padded] - 1
        if len(padded) == 0 or (len(padded) == 1 and padded[0] == rows - 1):
            real: Any = slice(0, len(plan.doc))  # pieces first, then the last row's padding
        else:
            real = np.ones(total, dtype=bool)
            real[pad_at] = False
        source = np.zeros(total, dtype=np.int64)
        document = np.full(total, -1, dtype=np.int64)
        position = np.zeros(total, dtype=np.int64)
        length = np.empty(total, dtype=np.int64)
        source[real] = offsets[plan.doc] + plan.start
        document[real] = plan.doc
        position[real] = plan.start
        length[real] = plan.length
        length[pad_at] = padding[padded]
        starts = np.cumsum(length) - length
        slot = starts - starts[seg_ptr[:-1]].repeat(counts) if total else starts
        # Lines of K cells: a row's k-th segment goes to line k // K of that row.
        k_line = max(int(counts.max()) if rows else 1, 1)
        k_line = min(k_line, LINE_FACTOR * -(-total // max(rows, 1)) + LINE_SLACK)
        index_in_row = np.arange(total, dtype=np.int64) - seg_ptr[:-1].repeat(counts)
        row_extra = np.maximum(-(-counts // k_line) - 1, 0)
        extra_base = rows + np.cumsum(row_extra) - row_extra
        num_lines = rows + int(row_extra.sum())
        if num_lines == rows:  # every row fits one line
            cell = row_of * k_line + index_in_row
        else:
            line_in_row, column = np.divmod(index_in_row, k_line)
            line = np.where(line_in_row == 0, row_of, extra_base[row_of] + line_in_row - 1)
            cell = line * k_line + column
        cells = np.zeros((4, num_lines * k_line), dtype=np.int64)
        cells[0].put(cell, source - slot)
        cells[1].put(cell, document)
        cells[2].put(cell, position - slot)
        cells[3].put(cell, length)
        longest = np.maximum.reduceat(length, seg_ptr[:-1]) if total else length
        extra = {
            int(r): list(range(int(extra_base[r]), int(extra_base[r] + row_extra[r])))
            for r in np.flatnonzero(row_extra)
        }
        cells = cells.reshape(4, num_lines, k_line)
        return cls(
            cells, extra, longest.tolist(), padding.tolist(), frozenset(padded.tolist()), width
        )


def gather_rows(
    tokens: np.ndarray,
    table: RowTable,
    rows: list[int],
    pad_id: int = 0,
    labels: np.ndarray | None = None,
) -> dict[str, Any]:
    """The packed batch of ``rows`` of ``table``, read from the flat token buffer.

    Args:
        tokens: The flat token buffer.
        table: The plan's :class:`RowTable`.
        rows: The rows that make the batch, in batch order (plain ints).
        pad_id: Id written at padding.
        labels: A flat buffer of labels parallel to ``tokens`` (-100 where nothing is
            trained), gathered as the ids are; None: the labels are the ids. Either way they
            are -100 at padding and at each piece's first token.

    Returns:
        ``{"input_ids", "position_ids", "document_ids", "labels", "attention_mask"}`` as
        LongTensors ``(len(rows), width)``, ``"cu_seqlens"`` (IntTensor) and ``"max_seqlen"``
        (int), as :mod:`collates.packing` describes them.
    """
    # Five arrays of their own rather than views of one (5, B, L) buffer: under glibc's
    # mmap threshold each stays in reused heap memory, and it saves the views' own cost.
    lines: list[int] = rows
    extra = table.extra_lines
    if extra and not extra.keys().isdisjoint(rows):
        lines = []
        for r in rows:
            lines.append(r)
            lines.extend(extra.get(r, ()))
    cells = table.cells.take(lines, axis=1).reshape(4, -1)
    source, document, position, length = cells[0], cells[1], cells[2], cells[3]
    width = table.width
    size = len(rows) * width
    slots = _SLOTS.get((len(rows), width))
    if slots is None:
        slots = row_slots(len(rows), width)
    positions = position.repeat(length)
    positions += slots
    documents = document.repeat(length)
    if len(tokens):
        index = source.repeat(length)
        index += slots
        ids = tokens.take(index, mode="clip").astype(np.int64)
        given = (
            None if labels is None else labels.take(index, mode="clip").astype(np.int64, copy=False)
        )
    else:
        ids = np.full(size, pad_id, dtype=np.int64)
        given = None if labels is None else np.full(size, IGNORE_INDEX, dtype=np.int64)
    in_use = length > 0
    used = length.compress(in_use)
    ends = used.cumsum()
    mask = np.empty(size, dtype=np.int64)
    mask.fill(1)
    labels = ids.copy() if given is None else given
    if table.padded_rows and not table.padded_rows.isdisjoint(rows):
        # Padding is each row's tail: a few slices, rather than passes over the whole batch.
        ids2, labels2, mask2 = (a.reshape(len(rows), width) for a in (ids, labels, mask))
        tails = table.row_padding
        for b, row in enumerate(rows):
            pad = tails[row]
            if pad:
                ids2[b, width - pad :] = pad_id
                labels2[b, width - pad :] = IGNORE_INDEX
                mask2[b, width - pad :] = 0
    labels.put(ends - used, IGNORE_INDEX)
    shape = (len(rows), width)
    planes = [torch.from_numpy(a.reshape(shape)) for a in (ids, positions, documents, labels, mask)]
    cu_seqlens = np.empty(len(used) + 1, dtype=np.int32)
    cu_seqlens[0] = 0
    cu_seqlens[1:] = ends
    batch: dict[str, Any] = dict(zip(PLANES, planes, strict=True))
    batch["cu_seqlens"] = torch.from_numpy(cu_seqlens)
    batch["max_seqlen"] = max(map(table.row_longest.__getitem__, rows)) if rows else 0
    return batch
