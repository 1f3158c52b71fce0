"""PackCollate / pack_collate: a batch of token sequences packed into full rows, with boundaries.

For causal language models: instead of padding each sequence to the longest, the sequences
are laid end to end in rows of ``seq_length`` tokens (or one flattened row), and the batch
says where each sequence starts, so attention can stay within it::

    {"input_ids":      LongTensor (R, L),  # pad_id at padding
     "position_ids":   LongTensor (R, L),  # 0, 1, ... within each sequence (piece)
     "document_ids":   LongTensor (R, L),  # the sample's index in the batch; -1 at padding
     "labels":         LongTensor (R, L),  # input_ids; -100 at padding and at each piece's start
     "attention_mask": LongTensor (R, L),  # 1 at real tokens
     "cu_seqlens":     IntTensor (S + 1,), # piece offsets in the flattened (R * L,) batch
     "max_seqlen":     int}                # the longest piece

``cu_seqlens`` and ``max_seqlen`` are what ``flash_attn_varlen_func`` takes. Padding at the
end of a row is a piece of its own in ``cu_seqlens`` (its position ids count 0, 1, ...), so
the offsets cover all ``R * L`` tokens. Labels are not shifted (the model shifts, as Hugging
Face's causal-LM convention does); the -100 at every piece's first token means no token is
predicted from another sequence.

A plan (:mod:`collates.pack_plan`) becomes a segment table once (:func:`segment_table`);
a batch of its rows is then one vectorised gather (:func:`batch_from_segments`).
``TextDataModule``'s packing builds its batches with the same two functions. This module
imports nothing from ``datamodules``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from collates.pack_plan import PackPlan, best_fit_plan, split_plan

PACK_MODES = ("split", "whole")
IGNORE_INDEX = -100


_ARANGES: dict[int, np.ndarray] = {}


def _arange(n: int) -> np.ndarray:
    """A read-only ``np.arange(n)`` (int64), made once per size."""
    out = _ARANGES.get(n)
    if out is None:
        if len(_ARANGES) > 64:
            _ARANGES.clear()
        out = _ARANGES[n] = np.arange(n, dtype=np.int64)
        out.flags.writeable = False
    return out


def segment_table(
    plan: PackPlan,
    offsets: np.ndarray,
    width: int,
    document_ids: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """A plan as segments: each row's pieces, then its padding run (if any), row after row.

    Built once per plan, so that a batch of rows is one gather of this table plus a few
    passes over its tokens (:func:`batch_from_segments`).

    Args:
        plan: The pack plan (its ``doc`` are positions into ``offsets``).
        offsets: Per document of the plan, the index of its first token in the flat buffer.
        width: Tokens per row.
        document_ids: Per document of the plan, the id written to ``document_ids`` (default:
            the plan's own document positions).

    Returns:
        ``(table, seg_ptr)``: int64 ``(S, 4)`` rows ``[source, document, position, length]``
        (padding: document -1, source 0), and the CSR offsets of each row's segments.

    Raises:
        ValueError: If a row of the plan holds more than ``width`` tokens.
    """
    rows = plan.num_rows
    counts = np.diff(plan.row_ptr)
    row_of_piece = np.repeat(np.arange(rows, dtype=np.int64), counts)
    row_tokens = np.bincount(row_of_piece, weights=plan.length, minlength=rows).astype(np.int64)
    if rows and int(row_tokens.max()) > width:
        raise ValueError(f"a row holds {int(row_tokens.max())} tokens, more than {width}.")
    padding = width - row_tokens
    has_pad = padding > 0
    pads_before = np.cumsum(has_pad) - has_pad
    table = np.empty((len(plan.doc) + int(has_pad.sum()), 4), dtype=np.int64)
    at = np.arange(len(plan.doc), dtype=np.int64) + pads_before[row_of_piece]
    table[at, 0] = offsets[plan.doc] + plan.start
    table[at, 1] = plan.doc if document_ids is None else document_ids[plan.doc]
    table[at, 2] = plan.start
    table[at, 3] = plan.length
    pad_at = (plan.row_ptr[1:] + pads_before)[has_pad]
    table[pad_at, :3] = (0, -1, 0)
    table[pad_at, 3] = padding[has_pad]
    seg_ptr = plan.row_ptr.copy()
    seg_ptr[1:] += np.cumsum(has_pad)
    return table, seg_ptr


def batch_from_segments(
    tokens: np.ndarray,
    table: np.ndarray,
    seg_ptr: np.ndarray,
    rows: np.ndarray,
    width: int,
    pad_id: int = 0,
) -> dict[str, Any]:
    """The packed batch of some rows, read from the flat token buffer in one vectorised pass.

    Args:
        tokens: The flat token buffer.
        table: The segment table of :func:`segment_table`.
        seg_ptr: Its row offsets.
        rows: The rows that make the batch, in batch order.
        width: Tokens per row.
        pad_id: Id written at padding.

    Returns:
        The batch dict described in the module docstring.
    """
    rows = np.asarray(rows, dtype=np.int64)
    # Array methods (take, repeat, cumsum) rather than fancy indexing and np.* functions:
    # this runs once per batch, and their dispatch costs about as much as their work on a
    # few thousand tokens.
    lo = seg_ptr.take(rows)
    counts = seg_ptr.take(rows + 1) - lo
    n = int(counts.sum())
    index = (lo - counts.cumsum() + counts).repeat(counts) + _arange(n)
    seg = table.take(index, axis=0).T.copy()  # (4, n): each field contiguous
    source, document, position, length = seg
    ends = length.cumsum()
    starts = ends - length
    size = len(rows) * width
    # Token t of segment j sits at starts[j] + k and reads source[j] + k: one repeat of
    # (source - starts) plus t itself, with no per-token index of the segment.
    slots = _arange(size)
    if len(tokens):
        ids = tokens.take((source - starts).repeat(length) + slots, mode="clip")
        ids = ids.astype(np.int64)
    else:
        ids = np.full(size, pad_id, dtype=np.int64)
    documents = document.repeat(length)
    positions = (position - starts).repeat(length) + slots
    real_segment = document >= 0
    if n == 0 or real_segment.all():
        mask = np.empty(size, dtype=np.int64)
        mask.fill(1)
        labels = ids.copy()
    else:
        padding = documents < 0
        ids[padding] = pad_id
        mask = (~padding).astype(np.int64)
        labels = np.where(padding, IGNORE_INDEX, ids)
    labels[starts[real_segment]] = IGNORE_INDEX
    cu_seqlens = np.zeros(n + 1, dtype=np.int32)
    cu_seqlens[1:] = ends
    shape = (len(rows), width)
    return {
        "input_ids": torch.from_numpy(ids.reshape(shape)),
        "position_ids": torch.from_numpy(positions.reshape(shape)),
        "document_ids": torch.from_numpy(documents.reshape(shape)),
        "labels": torch.from_numpy(labels.reshape(shape)),
        "attention_mask": torch.from_numpy(mask.reshape(shape)),
        "cu_seqlens": torch.from_numpy(cu_seqlens),
        "max_seqlen": int(np.maximum.reduce(length)) if n else 0,
    }


def _as_ids(sample: Any, index: int, key: str) -> np.ndarray:
    value = sample[key] if isinstance(sample, Mapping) and key in sample else sample
    if isinstance(sample, Mapping) and key not in sample:
        raise KeyError(f"pack_collate: sample {index} is a dict without {key!r}: {sorted(sample)}")
    if isinstance(value, torch.Tensor):
        if value.dim() != 1 or value.is_floating_point() or value.is_complex():
            raise TypeError(
                f"pack_collate: sample {index} is a {value.dtype} tensor of shape "
                f"{tuple(value.shape)}: use 1-D integer token ids."
            )
        return value.cpu().numpy().astype(np.int64, copy=False)
    if isinstance(value, np.ndarray | Sequence) and not isinstance(value, str | bytes):
        array = np.asarray(value)
        if array.ndim == 1 and (array.size == 0 or np.issubdtype(array.dtype, np.integer)):
            return array.astype(np.int64, copy=False)
    raise TypeError(
        f"pack_collate: sample {index} is {type(value).__name__} {str(value)[:40]!r}: use "
        f"1-D integer token ids (a tensor, a list or an array), or a dict with {key!r}."
    )


def pack_collate(
    samples: Sequence[Any],
    seq_length: int | None = None,
    pack_mode: str = "split",
    pad_id: int = 0,
    key: str = "input_ids",
) -> dict[str, Any]:
    """Packs one batch of token sequences into rows (see the module docstring for the keys).

    Args:
        samples: Token id sequences: 1-D integer tensors, lists or arrays, or dicts with
            ``key`` (other fields are not used).
        seq_length: Tokens per row; None packs everything into one row ``(1, total)``, the
            layout of transformers' ``DataCollatorWithFlattening``.
        pack_mode: With ``seq_length``: ``"split"`` lays the samples end to end in order and
            cuts every ``seq_length`` tokens (a sample continues in the next row, its
            position ids going on counting); ``"whole"`` never splits a sample (best-fit
            decreasing over the batch).
        pad_id: Id written at padding (the last row, or row ends with ``"whole"``).
        key: The field holding the token ids in dict samples.

    Returns:
        The packed batch; ``document_ids`` are the samples' positions in ``samples``.

    Raises:
        ValueError: On an empty batch, a bad ``seq_length`` or ``pack_mode``, or (``"whole"``)
            a sample longer than ``seq_length``.
        TypeError: On a sample that is not a sequence of integer ids.

    Example:
        >>> batch = pack_collate([[5, 6, 7], [8, 9]], seq_length=4)
        >>> batch["input_ids"].tolist(), batch["position_ids"].tolist()
        ([[5, 6, 7, 8], [9, 0, 0, 0]], [[0, 1, 2, 0], [1, 0, 1, 2]])
        >>> batch["labels"].tolist(), batch["cu_seqlens"].tolist()
        ([[-100, 6, 7, -100], [-100, -100, -100, -100]], [0, 3, 4, 5, 8])
    """
    check_pack_options(seq_length, pack_mode, pad_id)
    if not len(samples):
        raise ValueError("pack_collate: the batch is empty: nothing to pack.")
    arrays = [_as_ids(s, i, key) for i, s in enumerate(samples)]
    lengths = np.array([len(a) for a in arrays], dtype=np.int64)
    tokens = np.concatenate(arrays)
    offsets = np.cumsum(lengths) - lengths
    if seq_length is None:
        plan = PackPlan(
            np.flatnonzero(lengths > 0),
            np.zeros(int(np.count_nonzero(lengths)), np.int64),
            lengths[lengths > 0],
            np.array([0, int(np.count_nonzero(lengths))], dtype=np.int64),
        )
        width = max(int(lengths.sum()), 1)
    elif pack_mode == "split":
        plan, width = split_plan(lengths, seq_length), seq_length
    else:
        if int(lengths.max()) > seq_length:
            i = int(np.argmax(lengths))
            raise ValueError(
                f"pack_collate: sample {i} has {int(lengths[i])} tokens, more than "
                f"seq_length={seq_length}, and pack_mode='whole' never splits a sample: "
                "truncate it or use pack_mode='split'."
            )
        plan, width = best_fit_plan(lengths, seq_length, pool=None), seq_length
    if plan.num_rows == 0:  # only empty samples: one row of padding
        plan = PackPlan(plan.doc, plan.start, plan.length, np.zeros(2, np.int64))
    table, seg_ptr = segment_table(plan, offsets, width)
    rows = np.arange(plan.num_rows, dtype=np.int64)
    return batch_from_segments(tokens, table, seg_ptr, rows, width, pad_id)


def check_pack_options(seq_length: Any, pack_mode: Any, pad_id: Any) -> None:
    """Raises a ValueError naming a bad ``seq_length``, ``pack_mode`` or ``pad_id``."""
    if seq_length is not None and (
        isinstance(seq_length, bool) or not isinstance(seq_length, int) or seq_length < 1
    ):
        raise ValueError(f"seq_length={seq_length!r} is not accepted: use None or an int >= 1.")
    if pack_mode not in PACK_MODES:
        raise ValueError(f"pack_mode={pack_mode!r} is not accepted: use 'split' or 'whole'.")
    if isinstance(pad_id, bool) or not isinstance(pad_id, int):
        raise ValueError(f"pad_id={pad_id!r} is not accepted: use an int.")


class PackCollate:
    """A ``collate_fn`` that packs each batch of token sequences into rows.

    ``DataLoader(dataset, batch_size=8, collate_fn=PackCollate(seq_length=1024))`` gives
    batches of ``ceil(tokens / 1024)`` rows (a varying count: the batch is 8 *samples*);
    ``PackCollate()`` gives one flattened row ``(1, total)`` per batch, as transformers'
    ``DataCollatorWithFlattening`` does. See :func:`pack_collate` for the arguments and the
    module docstring for the keys.

    Args:
        seq_length: Tokens per row, or None for one flattened row.
        pack_mode: ``"split"`` or ``"whole"`` (with ``seq_length``).
        pad_id: Id written at padding.
        key: The field holding the token ids in dict samples.

    Example:
        >>> PackCollate()([[1, 2, 3], [4, 5]])["position_ids"].tolist()
        [[0, 1, 2, 0, 1]]
    """

    def __init__(
        self,
        seq_length: int | None = None,
        pack_mode: str = "split",
        pad_id: int = 0,
        key: str = "input_ids",
    ) -> None:
        check_pack_options(seq_length, pack_mode, pad_id)
        self.seq_length, self.pack_mode, self.pad_id, self.key = seq_length, pack_mode, pad_id, key

    def __call__(self, samples: Sequence[Any]) -> dict[str, Any]:
        return pack_collate(samples, self.seq_length, self.pack_mode, self.pad_id, self.key)

    def __repr__(self) -> str:
        return (
            f"PackCollate(seq_length={self.seq_length}, pack_mode={self.pack_mode!r}, "
            f"pad_id={self.pad_id})"
        )
