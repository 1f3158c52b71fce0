"""ChatDataModule's documents and batch views: rendered conversations with their loss mask.

* :class:`ChatDocuments`: the conversations of a token store that a split uses, after
  ``overlong`` (dropped, or cut to the limit), as two flat buffers read in place: the ids
  (:attr:`ChatDocuments.encoded`) and the per-token mask (:attr:`ChatDocuments.trained`),
  sharing offsets and lengths. Nothing per token is copied.
* :class:`ChatPaddedView`: padded batches ``{"input_ids", "labels", "attention_mask"}``,
  ``labels`` -100 where a token is not trained and at padding.
* :class:`ChatPackedView`: packed rows (:mod:`datamodules.tokens.packing`, ``"whole"``: each
  conversation in one row), with the packed keys of TextDataModule; ``labels`` -100 where a
  token is not trained, at each conversation's first token and at padding.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from collates.pack_rows import IGNORE_INDEX
from datamodules.conversations.batching import StorePackedView, StorePaddedView
from datamodules.core.overlong import OVERLONG
from datamodules.tokens.encoding import EncodedTexts
from datamodules.tokens.store import StoredDocuments

__all__ = ["ChatDocuments", "ChatPackedView", "ChatPaddedView", "OVERLONG"]


class ChatDocuments:
    """The conversations of a store after ``overlong`` (see the module docstring).

    Args:
        store: The mapped store (with its ``trained`` mask).
        limit: The most tokens a conversation may have (None: no limit).
        overlong: ``"drop"``, ``"truncate"`` or ``"error"``.
        limit_name: The argument that set ``limit`` (for messages).

    Raises:
        ValueError: Under ``overlong="error"``, the first conversation over ``limit``, named
            by its file and line.
    """

    labels = None

    def __init__(
        self, store: StoredDocuments, limit: int | None, overlong: str, limit_name: str
    ) -> None:
        self.store = store
        self.path = store.path
        self.name = store.path
        lengths = store.encoded.lengths_np
        starts = store.encoded.offsets_np[:-1]
        self.keep: np.ndarray | None = None
        over = np.flatnonzero(lengths > limit) if limit is not None else np.zeros(0, np.int64)
        #: Conversations over the limit (dropped or cut, as ``overlong`` says).
        self.overlong = len(over)
        self.cut_tokens = int((lengths[over] - limit).sum()) if len(over) else 0
        if len(over) and overlong == "error":
            i = int(over[0])
            raise ValueError(
                f"{store.where(i)}: the conversation has {int(lengths[i])} tokens, over "
                f"{limit_name}={limit}, and overlong='error' ({len(over)} such "
                "conversations): raise the limit, or use overlong='drop' or 'truncate'."
            )
        #: Trained tokens of the conversations kept (the store's count, less what overlong
        #: took away).
        self.trained_tokens = int(store.meta.get("trained_tokens", 0))
        for i in over.tolist():
            start, n = int(starts[i]), int(lengths[i])
            cut = start if overlong == "drop" else start + limit
            self.trained_tokens -= int(store.trained[cut : start + n].sum())
        if not len(over):
            self.encoded = store.encoded
            self.trained = EncodedTexts(
                store.trained, lengths, None, offsets=store.encoded.offsets_np
            )
            return
        if overlong == "drop":
            self.keep = np.flatnonzero(lengths <= limit)
            lengths, starts = lengths[self.keep], starts[self.keep]
        else:
            lengths = np.minimum(lengths, limit)
        offsets = np.append(starts, store.num_tokens).astype(np.int64)
        self.encoded = EncodedTexts(store.encoded.tokens_np, lengths, None, offsets=offsets)
        self.trained = EncodedTexts(store.trained, lengths, None, offsets=offsets)

    def __len__(self) -> int:
        return len(self.encoded.lengths_np)

    def where(self, index: int) -> str:
        """Names a conversation: its file and line (or row)."""
        return self.store.where(int(self.keep[index]) if self.keep is not None else index)

    @property
    def num_tokens(self) -> int:
        """Tokens of the conversations kept (after any cut)."""
        return int(self.encoded.lengths_np.sum())

    def __getitem__(self, index: int) -> dict[str, Any]:
        start = int(self.encoded.offsets_np[index])
        stop = start + int(self.encoded.lengths_np[index])
        ids = torch.from_numpy(self.encoded.tokens_np[start:stop].astype(np.int64))
        trained = torch.from_numpy(self.trained.tokens_np[start:stop].astype(bool))
        return {"input_ids": ids, "labels": ids.masked_fill(~trained, IGNORE_INDEX)}


class ChatPaddedView(StorePaddedView):
    """Padded batches of conversations with their labels (see the module docstring).

    Args:
        docs: The split's source.
        indices: Positions of the split's conversations in ``docs``.
        transform: Applied to each whole batch dict.
        pad_id: Id written at padding.
        pad_to_multiple_of: Round each batch's padded length up to a multiple of this.
    """

    def batch(
        self, ids: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor, flags: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """``input_ids``, ``labels`` (-100 where not trained) and ``attention_mask``."""
        labels = ids.masked_fill(flags == 0, IGNORE_INDEX)
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}


class ChatPackedView(StorePackedView):
    """Packed rows of whole conversations with their labels (see the module docstring).

    Args:
        docs: The split's source.
        indices: Positions of the split's conversations in ``docs``.
        transform: Applied to each whole batch dict.
        planner: The split's pack planner (``"whole"``).
        pad_id: Id written at padding.
    """

    def batch(self, out: dict[str, Any], flags: torch.Tensor) -> dict[str, Any]:
        """The packed keys, ``labels`` -100 also where a token is not trained."""
        out["labels"].masked_fill_(flags == 0, IGNORE_INDEX)
        return out
