"""PreferenceDataModule's documents and views: a pair is one store document, split per batch.

* :class:`PreferenceDocuments`: the records of one token store (a pair, or one unpaired
  sequence, per document) with their mask codes, read in place; what the renderer counted
  (pairs, unpaired records, overlong ones dropped or cut) from the store's metadata.
* :class:`PairPaddedView` / :class:`PairPackedView`: the tokens layer's padded and packed
  gathers (:func:`~datamodules.tokens.encoding.gather_padded`,
  :class:`~datamodules.tokens.packing.PackedTextView`) of ids and codes, turned into
  preference batches by :mod:`datamodules.preference.batches`. Packing plans whole documents,
  so a pair's two sequences share a row, and a batch.
* :class:`PairMixedPackedView` / :class:`PairMixedDocView`: the same over a blend of Sources
  (the views :class:`~datamodules.tokens.blends.TokenBlends` builds for this kind).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from collates.pack_rows import gather_rows
from datamodules.conversations.batching import StorePackedView, StorePaddedView
from datamodules.preference.batches import packed_sequences, preference_batch
from datamodules.tokens.blend_views import MaskDocs, MaskedDocView, MaskedPackedView
from datamodules.tokens.encoding import EncodedTexts, gather_padded
from datamodules.tokens.store import StoredDocuments

__all__ = [
    "PairMixedDocView",
    "PairMixedPackedView",
    "PairPackedView",
    "PairPaddedView",
    "PreferenceDocuments",
]


class PreferenceDocuments:
    """The records of a store (see the module docstring).

    Args:
        store: The mapped store (its mask holds the codes).
    """

    labels = None

    def __init__(self, store: StoredDocuments) -> None:
        self.store, self.path, self.name = store, store.path, store.path
        self.encoded = store.encoded
        self.trained = EncodedTexts(
            store.trained, store.encoded.lengths_np, None, offsets=store.encoded.offsets_np
        )
        notes: dict[str, int] = store.meta.get("notes", {})
        #: Records kept by kind (``"pair"``, ``"unpaired"``), and over the limit by what
        #: was done (``"dropped"``, ``"truncated"``).
        self.kinds = {
            k: notes.get(k, 0) + notes.get(f"{k}:truncated", 0) for k in ("pair", "unpaired")
        }
        self.dropped = sum(n for k, n in notes.items() if k.endswith(":dropped"))
        self.truncated = sum(n for k, n in notes.items() if k.endswith(":truncated"))
        #: Trained (completion) tokens.
        self.trained_tokens = int(store.meta.get("trained_tokens", 0))

    @property
    def overlong(self) -> int:
        """Records over the limit (dropped or cut)."""
        return self.dropped + self.truncated

    def __len__(self) -> int:
        return len(self.store)

    def where(self, index: int) -> str:
        """Names a record: its file and line (or row)."""
        return self.store.where(index)

    @property
    def num_tokens(self) -> int:
        """Tokens of every sequence kept."""
        return self.store.num_tokens

    def __getitem__(self, index: int) -> dict[str, Any]:
        start = int(self.encoded.offsets_np[index])
        stop = start + int(self.encoded.lengths_np[index])
        ids = torch.from_numpy(self.encoded.tokens_np[start:stop].astype(np.int64))
        codes = torch.from_numpy(self.trained.tokens_np[start:stop].astype(np.int64))
        return {"input_ids": ids, "codes": codes}


class PairPaddedView(StorePaddedView):
    """Padded preference batches of a split (see :mod:`datamodules.preference.batches`).

    Args:
        docs: The split's source.
        indices: Positions of the split's records in ``docs``.
        transform: Applied to each whole batch dict.
        pad_id: Id written at padding.
    """

    def __init__(
        self,
        docs: PreferenceDocuments,
        indices: torch.Tensor,
        transform: Callable[[Any], Any] | None,
        pad_id: int,
    ) -> None:
        super().__init__(docs, indices, transform, pad_id)

    def batch(
        self, ids: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor, flags: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """The preference batch of the padded sequences and their codes."""
        return preference_batch(ids, flags, mask, lengths, self.pad_id)


class PairPackedView(StorePackedView):
    """Packed rows of whole records, pairs split into their sequences.

    Args:
        docs: The split's source.
        indices: Positions of the split's records in ``docs``.
        transform: Applied to each whole batch dict.
        planner: The split's pack planner (``"whole"``).
        pad_id: Id written at padding.
    """

    def batch(self, out: dict[str, Any], flags: torch.Tensor) -> dict[str, Any]:
        """The packed keys, each row's pairs split into their sequences."""
        return packed_sequences(out, flags)


class PairMixedPackedView(MaskedPackedView):
    """A blend's packed rows, pairs split into their sequences."""

    def __getitem__(self, batch: torch.Tensor | list[torch.Tensor]) -> Any:
        if isinstance(batch, list):  # several batches for one worker message
            return [self[b] for b in batch]
        (table, _), rows = self._grouped(batch)
        out = gather_rows(self.tokens, table, rows, self.pad_id)  # type: ignore[arg-type]
        codes = gather_rows(self.masks, table, rows, 0)["input_ids"]  # type: ignore[arg-type]
        out = packed_sequences(out, codes)
        return self.transform(out) if self.transform is not None else out


class PairMixedDocView(MaskedDocView):
    """A blend's padded preference batches."""

    def __getitem__(self, batch: torch.Tensor) -> dict[str, torch.Tensor]:
        (docs, _, _), rows = self._grouped(batch)
        index = torch.tensor(rows, dtype=torch.int64)
        ids, mask, lengths = gather_padded(docs, index, self.pad_id, "right")  # type: ignore[arg-type]
        codes, _, _ = gather_padded(MaskDocs(self.masks, docs), index, 0, "right")  # type: ignore[arg-type]
        out = preference_batch(ids, codes, mask, lengths, self.pad_id)
        return self.transform(out) if self.transform is not None else out
