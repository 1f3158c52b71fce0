"""Invariants every packed batch holds, checked exactly (shared by the packing tests)."""

from __future__ import annotations

from typing import Any

import torch


def piece_starts(batch: dict[str, Any]) -> torch.Tensor:
    """Bool (R, L): the first token of every real piece (row starts and document changes)."""
    docs = batch["document_ids"]
    starts = torch.ones_like(docs, dtype=torch.bool)
    starts[:, 1:] = docs[:, 1:] != docs[:, :-1]
    return starts & (docs >= 0)


def assert_packed_invariants(batch: dict[str, Any], pad_id: int = 0) -> None:
    """Checks the keys' rules on one packed batch (raises AssertionError naming the rule)."""
    ids, pos, docs = batch["input_ids"], batch["position_ids"], batch["document_ids"]
    labels, mask = batch["labels"], batch["attention_mask"]
    rows, width = ids.shape
    for key in ("position_ids", "document_ids", "labels", "attention_mask"):
        assert batch[key].shape == (rows, width) and batch[key].dtype == torch.int64, key
    real = docs >= 0
    assert torch.equal(mask, real.long()), "attention_mask is 1 exactly at real tokens"
    assert bool((ids[~real] == pad_id).all()), "padding holds pad_id"
    # Padding only after a row's real tokens.
    assert bool((real[:, 1:] <= real[:, :-1]).all()), "padding sits at row ends"
    starts = piece_starts(batch)
    # Labels: input_ids, -100 exactly at padding and at every piece's first token.
    expected = torch.where(real & ~starts, ids, torch.full_like(ids, -100))
    assert torch.equal(labels, expected), "labels -100 exactly at piece starts and padding"
    # position_ids count up by one within a piece; a piece that does not start its row is a
    # new document and starts at 0.
    inside = real[:, 1:] & ~starts[:, 1:]
    assert bool((pos[:, 1:][inside] == pos[:, :-1][inside] + 1).all()), "positions count up"
    assert bool((pos[:, 1:][starts[:, 1:]] == 0).all()), "a document starts at position 0"
    # cu_seqlens: every piece (and each row's padding run) in the flattened (R * L,) batch.
    bounds = starts.clone()
    bounds[:, 0] = True
    bounds[:, 1:] |= real[:, :-1] & ~real[:, 1:]  # where padding starts
    flat = torch.nonzero(bounds.flatten()).flatten()
    cu = batch["cu_seqlens"]
    assert cu.dtype == torch.int32
    assert cu.tolist() == [*flat.tolist(), rows * width], "cu_seqlens: the piece offsets"
    assert batch["max_seqlen"] == int((cu[1:] - cu[:-1]).max()), "max_seqlen: longest piece"
    # The position ids restart exactly at the cu_seqlens offsets (continued pieces aside).
    flat_pos = pos.flatten()
    starts_flat = cu[:-1].long()
    continued = (starts_flat % width == 0) & (flat_pos[starts_flat] > 0)
    assert bool((flat_pos[starts_flat][~continued] == 0).all()), "positions restart at cu"
    assert bool((docs.flatten()[starts_flat][continued] >= 0).all())
