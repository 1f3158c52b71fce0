"""A blend's views with a per-token loss mask gathered beside the ids.

The tokens layer's mixed views (:mod:`datamodules.tokens.mixture`) read the ids of every
source of a blend; :class:`MaskedPackedView` and :class:`MaskedDocView` also read each source's
mask (``trained``: one flag per token, in the same layout as the ids) in the same groups, and
set ``labels`` to -100 where a token is not trained. :class:`~datamodules.ChatDataModule`'s
blends use them (the mask of the assistant's tokens); a blend without a mask uses the plain
views.
"""

from __future__ import annotations

from typing import Any

import torch

from collates.pack_rows import IGNORE_INDEX, gather_rows
from datamodules.tokens.encoding import gather_padded
from datamodules.tokens.mixture import MixedDocView, MixedPackedView, MultiBuffer

__all__ = ["MaskDocs", "MaskedDocView", "MaskedPackedView"]


class _MaskBuffers:
    """The sources' loss masks read as one, in the groups the ids were read in."""

    _masks: MultiBuffer | None
    trained: list[Any]
    tokens: MultiBuffer

    @property
    def masks(self) -> MultiBuffer:
        if self._masks is None:
            self._masks = MultiBuffer([t.tokens_np for t in self.trained])
        self._masks.expect(self.tokens._groups)  # the batch's groups, as the ids were read
        return self._masks

    def resume_masks(self, trained: list[Any]) -> None:
        """Reads these masks (one per source of a mix resumed from a checkpoint) from now on."""
        self.trained, self._masks = trained, None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()  # type: ignore[misc]
        state["_masks"] = None  # views of the sources' maps: rebuilt, never pickled
        return state


class MaskedPackedView(_MaskBuffers, MixedPackedView):
    """A blend's packed rows, ``labels`` -100 where the mask says a token is not trained."""

    def __init__(self, *args: Any, trained: list[Any]) -> None:
        super().__init__(*args)
        self.trained, self._masks = trained, None

    def __getitem__(self, batch: torch.Tensor | list[torch.Tensor]) -> Any:
        if isinstance(batch, list):  # several batches for one worker message
            return [self[b] for b in batch]
        (table, _), rows = self._grouped(batch)
        out = gather_rows(self.tokens, table, rows, self.pad_id)  # type: ignore[arg-type]
        flags = gather_rows(self.masks, table, rows, 0)["input_ids"]  # type: ignore[arg-type]
        out["labels"].masked_fill_(flags == 0, IGNORE_INDEX)
        return self.transform(out) if self.transform is not None else out


class MaskDocs:
    """An epoch's documents over another buffer (the masks), as gather_padded reads them."""

    def __init__(self, buffer: MultiBuffer, like: Any) -> None:
        self.tokens_np, self.lengths_np, self.offsets_np = buffer, like.lengths_np, like.offsets_np


class MaskedDocView(_MaskBuffers, MixedDocView):
    """A blend's padded documents: ``{"input_ids", "labels", "attention_mask"}``, ``labels`` -100
    where the mask says a token is not trained and at padding."""

    def __init__(self, *args: Any, trained: list[Any], pad_to: int | None) -> None:
        super().__init__(*args, padding_side="right", pad_to=pad_to)
        self.trained, self._masks = trained, None

    def __getitem__(self, batch: torch.Tensor) -> dict[str, torch.Tensor]:
        (docs, _, _), rows = self._grouped(batch)
        index = torch.tensor(rows, dtype=torch.int64)
        ids, mask, _ = gather_padded(docs, index, self.pad_id, "right", self.pad_to)  # type: ignore[arg-type]
        flags, _, _ = gather_padded(MaskDocs(self.masks, docs), index, 0, "right", self.pad_to)  # type: ignore[arg-type]
        out = {
            "input_ids": ids,
            "labels": ids.masked_fill(flags == 0, IGNORE_INDEX),
            "attention_mask": mask,
        }
        return self.transform(out) if self.transform is not None else out
