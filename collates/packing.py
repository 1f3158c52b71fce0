"""PackCollate / pack_collate: a batch of token sequences packed into full rows, with boundaries.

For causal language models: instead of padding each sequence to the longest, the sequences
are laid end to end in rows of ``seq_length`` tokens (or one flattened row), and the batch
says where each sequence starts, so attention can stay within it::

    {"input_ids":      LongTensor (R, L),  # pad_id at padding
     "position_ids":   LongTensor (R, L),  # 0, 1, ... within each sequence (piece)
     "document_ids":   LongTensor (R, L),  # the sample's index in the batch; -1 at padding
     "labels":         LongTensor (R, L),  # the samples' labels, else input_ids; -100 at
                                           # padding and at each piece's start
     "attention_mask": LongTensor (R, L),  # 1 at real tokens
     "cu_seqlens":     IntTensor (S + 1,), # piece offsets in the flattened (R * L,) batch
     "max_seqlen":     int}                # the longest piece

``cu_seqlens`` and ``max_seqlen`` are what ``flash_attn_varlen_func`` takes. Padding at the
end of a row is a piece of its own in ``cu_seqlens`` (its position ids count 0, 1, ...), so
the offsets cover all ``R * L`` tokens. Labels are not shifted (the model shifts, as Hugging
Face's causal-LM convention does); the -100 at every piece's first token means no token is
predicted from another sequence.

Samples that are dicts with a ``labels`` field (a prompt-masked copy of their ids, -100 where
nothing is trained, as a chat's loss mask gives) keep those labels: they are packed as the ids
are, and get -100 at padding and at each piece's first token too, so a masked prompt stays
masked. Either every sample of a batch has ``labels`` or none has.

A plan (:mod:`collates.pack_plan`) is laid out once as a row table
(:class:`collates.pack_rows.RowTable`); a batch of its rows is then one vectorised gather
(:func:`collates.pack_rows.gather_rows`). ``TextDataModule``'s packing builds its batches
the same way. This module
imports nothing from ``datamodules``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from collates._checks import int_mistake
from collates.pack_plan import PackPlan, best_fit_plan, split_plan
from collates.pack_rows import IGNORE_INDEX, RowTable, gather_rows

__all__ = ["IGNORE_INDEX", "PACK_MODES", "PackCollate", "check_pack_options", "pack_collate"]

PACK_MODES = ("split", "whole")


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


def _given_labels(samples: Sequence[Any], arrays: list[np.ndarray]) -> np.ndarray | None:
    """The samples' own ``labels``, concatenated, or None when no sample has any."""
    has = [isinstance(s, Mapping) and "labels" in s for s in samples]
    if not any(has):
        return None
    if not all(has):
        i = has.index(False)
        raise ValueError(
            f"pack_collate: sample {i} has no 'labels' but sample {has.index(True)} has: give "
            "labels in every sample of a batch or in none."
        )
    out = []
    for i, (sample, ids) in enumerate(zip(samples, arrays, strict=True)):
        labels = _as_ids(sample, i, "labels")
        if len(labels) != len(ids):
            raise ValueError(
                f"pack_collate: sample {i} has {len(labels)} labels for {len(ids)} token ids: "
                "use one label per token (-100 where nothing is trained)."
            )
        out.append(labels)
    return np.concatenate(out)


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
            ``key`` and optionally ``labels`` (one per token, -100 where nothing is trained:
            kept, see the module docstring); other fields are not used.
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
        ValueError: On an empty batch, a bad ``seq_length`` or ``pack_mode``, (``"whole"``)
            a sample longer than ``seq_length``, or ``labels`` in some samples only or of
            another length than their ids.
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
    labels = _given_labels(samples, arrays)
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
    table = RowTable.from_plan(plan, offsets, width)
    return gather_rows(tokens, table, list(range(plan.num_rows)), pad_id, labels)


def check_pack_options(seq_length: Any, pack_mode: Any, pad_id: Any) -> None:
    """Raises naming a bad ``seq_length``, ``pack_mode`` or ``pad_id``: a TypeError for a value
    of the wrong kind (``seq_length=2.5``, ``pad_id=None``), else a ValueError."""
    mistake = int_mistake(seq_length, 1, allow_none=True)
    if mistake is not None:
        raise mistake(f"seq_length={seq_length!r} is not accepted: use an int >= 1 or None.")
    if pack_mode not in PACK_MODES:
        mistake = ValueError if isinstance(pack_mode, str) else TypeError
        raise mistake(f"pack_mode={pack_mode!r} is not accepted: use 'split' or 'whole'.")
    mistake = int_mistake(pad_id)
    if mistake is not None:
        raise mistake(f"pad_id={pad_id!r} is not accepted: use an int.")


class PackCollate:
    """A ``collate_fn`` that packs each batch of token sequences into rows.

    ``DataLoader(dataset, batch_size=8, collate_fn=PackCollate(seq_length=1024))`` gives
    batches of ``ceil(tokens / 1024)`` rows (a varying count: the batch is 8 *samples*);
    ``PackCollate()`` gives one flattened row ``(1, total)`` per batch, as transformers'
    ``DataCollatorWithFlattening`` does. See :func:`pack_collate` for the arguments and the
    module docstring for the keys. Dict samples with a ``labels`` field keep their labels
    (-100 added at padding and at each piece's first token) instead of labels made from
    their ids.

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
