"""Preference batches from gathered store documents: pairs split back into their two sequences.

The tokens layer gathers a batch of documents (padded, or packed into rows) with their mask
codes (:mod:`datamodules.preference.render`); these functions turn it into what a preference
loss reads:

* :func:`padded_pairs`: TRL's ``DataCollatorForPreference`` layout, ``input_ids``,
  ``attention_mask``, ``completion_mask`` (2P, L), the P chosen rows then the P rejected rows
  in the same pair order, right-padded to the longest of the 2P;
* :func:`padded_unpaired`: ``input_ids``, ``attention_mask``, ``completion_mask`` (P, L) and
  ``label`` (bool, P);
* :func:`packed_sequences`: packed rows with each pair's chosen and rejected as two sequences
  (``cu_seqlens`` split where the rejected one starts, ``position_ids`` restarting there,
  ``document_ids`` one per sequence: ``2 x pair + 1`` for a rejected one, -1 at padding),
  ``labels`` (-100 off the completion and at each sequence's first token),
  ``completion_mask``, and ``chosen_index`` / ``rejected_index`` (int64, P): the sequence
  numbers of each pair's two, in ``cu_seqlens`` order (padding runs are sequences there too);
  unpaired feedback gives ``sequence_index`` and ``label`` instead.

A batch is pairs when any of its tokens carries the :data:`REJECTED` code (every pair has a
rejected token; unpaired records have none).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from collates.pack_rows import IGNORE_INDEX
from datamodules.preference.render import COMPLETION, DESIRABLE, REJECTED

__all__ = ["packed_sequences", "padded_pairs", "padded_unpaired", "preference_batch"]


def padded_pairs(
    ids: torch.Tensor, codes: torch.Tensor, lengths: torch.Tensor, pad_id: int
) -> dict[str, torch.Tensor]:
    """DataCollatorForPreference's batch from padded pair documents (chosen then rejected)."""
    real = torch.arange(ids.shape[1]) < lengths[:, None]
    chosen = ((codes & REJECTED) == 0).logical_and(real).sum(1)
    rejected = lengths - chosen
    width = int(torch.maximum(chosen, rejected).max()) if len(lengths) else 0
    slot = torch.arange(width)
    starts = torch.cat([torch.zeros_like(chosen), chosen])
    counts = torch.cat([chosen, rejected])
    both_ids = torch.cat([ids, ids])
    both_codes = torch.cat([codes, codes])
    mask = slot < counts[:, None]
    source = (starts[:, None] + slot).clamp_(max=max(ids.shape[1] - 1, 0))
    out_ids = both_ids.gather(1, source).masked_fill_(~mask, pad_id)
    completion = (both_codes.gather(1, source) & COMPLETION).masked_fill_(~mask, 0)
    return {
        "input_ids": out_ids,
        "attention_mask": mask.long(),
        "completion_mask": completion.long(),
    }


def padded_unpaired(
    ids: torch.Tensor, codes: torch.Tensor, attention_mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Padded unpaired feedback: the sequences as gathered, their completion mask and label."""
    return {
        "input_ids": ids,
        "attention_mask": attention_mask,
        "completion_mask": (codes & COMPLETION).long(),
        "label": (codes[:, 0] & DESIRABLE) != 0 if len(ids) else torch.zeros(0, dtype=torch.bool),
    }


def preference_batch(
    ids: torch.Tensor,
    codes: torch.Tensor,
    attention_mask: torch.Tensor,
    lengths: torch.Tensor,
    pad_id: int,
) -> dict[str, torch.Tensor]:
    """The padded batch of pairs or of unpaired feedback, whichever the codes say."""
    if bool(((codes & REJECTED) != 0).any()):
        return padded_pairs(ids, codes, lengths, pad_id)
    return padded_unpaired(ids, codes, attention_mask)


def packed_sequences(out: dict[str, Any], codes: torch.Tensor) -> dict[str, Any]:
    """Packed rows of pair (or unpaired) documents, each pair split into its two sequences
    (see the module docstring); ``out`` is :func:`collates.pack_rows.gather_rows`'s batch."""
    shape = out["input_ids"].shape
    ids = out["input_ids"].reshape(-1).numpy()
    code = codes.reshape(-1).numpy()
    docs = out["document_ids"].reshape(-1).numpy()
    size = len(ids)
    starts = np.zeros(size, dtype=bool)
    cu = out["cu_seqlens"].numpy()
    starts[cu[:-1][cu[:-1] < size]] = True
    rejected = (code & REJECTED) != 0
    paired = bool(rejected.any())
    if paired:
        rise = rejected[1:] & ~rejected[:-1] & (docs[1:] == docs[:-1]) & (docs[1:] >= 0)
        starts[1:] |= rise
    first = np.flatnonzero(starts)
    seglen = np.diff(np.append(first, size))
    positions = np.arange(size, dtype=np.int64) - np.repeat(first, seglen)
    segment_doc = docs[first]
    real = segment_doc >= 0
    completion = (code & COMPLETION).astype(np.int64)
    labels = np.where(completion == 1, ids, IGNORE_INDEX)
    labels[first] = IGNORE_INDEX
    batch: dict[str, Any] = {
        "input_ids": out["input_ids"],
        "position_ids": torch.from_numpy(positions.reshape(shape)),
    }
    if paired:
        document = np.where(docs >= 0, docs * 2 + rejected, -1)
        batch["document_ids"] = torch.from_numpy(document.reshape(shape))
    else:
        batch["document_ids"] = out["document_ids"]
    batch["labels"] = torch.from_numpy(labels.reshape(shape))
    batch["attention_mask"] = out["attention_mask"]
    batch["completion_mask"] = torch.from_numpy(completion.reshape(shape))
    cu_seqlens = np.zeros(len(first) + 1, dtype=np.int32)
    cu_seqlens[1:] = np.cumsum(seglen)
    batch["cu_seqlens"] = torch.from_numpy(cu_seqlens)
    batch["max_seqlen"] = int(seglen.max()) if len(seglen) else 0
    if paired:
        segment_rejected = rejected[first]
        batch["chosen_index"] = torch.from_numpy(np.flatnonzero(real & ~segment_rejected))
        batch["rejected_index"] = torch.from_numpy(np.flatnonzero(real & segment_rejected))
    else:
        batch["sequence_index"] = torch.from_numpy(np.flatnonzero(real))
        batch["label"] = torch.from_numpy((code[first[real]] & DESIRABLE) != 0)
    return batch
