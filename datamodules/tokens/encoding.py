"""Tokenized texts in one flat buffer, and padded batches gathered from it in one call.

* :class:`EncodedTexts`: every text's token ids in one flat buffer, with offsets, lengths and
  optional labels (numpy arrays shared with tensors).
* :func:`gather_padded`: samples into a padded ``(B, L)`` batch by one vectorised indexing call.
* :class:`TextBatchView`: a split of tokenized texts, whose item is a whole batch dict, equal
  to what :class:`collates.PadCollate` makes of the same samples.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from datamodules.core.views import SplitView

__all__ = ["EncodedTexts", "TextBatchView", "gather_padded"]


class EncodedTexts:
    """Tokenized texts: one flat token buffer, offsets, lengths and optional int64 labels.

    The tensors (``tokens``, ``offsets``, ``lengths``, ``labels``) share memory with numpy
    arrays that :func:`gather_padded` indexes (numpy's fancy indexing of a small batch is
    single-threaded and a few times faster than torch's here; see benchmarks/bench_text.py).

    Memory-mapped arrays (a token store's, :mod:`datamodules.tokens.store`) are used as they
    are: the tokens keep their ``uint16`` / ``uint32`` dtype, nothing is copied, and a pickled
    ``EncodedTexts`` (for spawned workers) maps the same files again rather than carrying them.

    Args:
        flat: All token ids, sample after sample.
        lengths: Tokens per sample.
        labels: One int64 label per sample, or None.
        offsets: Where each sample starts in ``flat`` (samples + 1 entries; default: the
            running sum of ``lengths``).
    """

    def __init__(
        self,
        flat: np.ndarray,
        lengths: np.ndarray,
        labels: torch.Tensor | None,
        offsets: np.ndarray | None = None,
    ) -> None:
        self.set_tokens(flat)
        if offsets is None:
            self.lengths_np = np.ascontiguousarray(lengths, dtype=np.int64)
            self.offsets_np = np.zeros(len(lengths) + 1, dtype=np.int64)
            np.cumsum(self.lengths_np, out=self.offsets_np[1:])
        else:
            self.lengths_np, self.offsets_np = lengths, offsets
        self.lengths = torch.from_numpy(self.lengths_np)
        self.offsets = torch.from_numpy(self.offsets_np)
        self.labels = labels

    @property
    def labels(self) -> torch.Tensor | None:
        """One int64 label per sample, or None."""
        return self._labels

    @labels.setter
    def labels(self, labels: torch.Tensor | None) -> None:
        self._labels = labels
        self.labels_np = None if labels is None else labels.numpy()

    def set_tokens(self, flat: np.ndarray) -> None:
        """Stores the buffer as int32 when every id fits (half the memory), else int64; a
        memory-mapped buffer stays as it is."""
        if isinstance(flat, np.memmap):
            self.tokens_np = flat
        else:
            small = not len(flat) or int(flat.max()) < 2**31
            self.tokens_np = np.ascontiguousarray(flat, np.int32 if small else np.int64)
        self.tokens = torch.from_numpy(self.tokens_np)

    def max_id(self) -> int:
        """The largest token id (-1 when there is none), read a slice at a time."""
        step = 1 << 24
        tops = (
            int(self.tokens_np[i : i + step].max()) for i in range(0, len(self.tokens_np), step)
        )
        return max(tops, default=-1)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("tokens_np", "lengths_np", "offsets_np"):
            array = state[name]
            if isinstance(array, np.memmap) and array.filename is not None:
                state[name] = _Mapped(array)
        for name in ("tokens", "lengths", "offsets", "_labels"):
            state.pop(name)
        state["labels"] = self._labels
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        labels = state.pop("labels")
        for name, value in state.items():
            setattr(self, name, value.open() if isinstance(value, _Mapped) else value)
        self.tokens = torch.from_numpy(self.tokens_np)
        self.lengths = torch.from_numpy(self.lengths_np)
        self.offsets = torch.from_numpy(self.offsets_np)
        self.labels = labels

    def __len__(self) -> int:
        return len(self.lengths_np)

    def sample(self, index: int) -> dict[str, Any]:
        """One sample as ``{"input_ids": LongTensor, "labels": int}`` (labels when labelled)."""
        start, stop = self.offsets_np[index], self.offsets_np[index + 1]
        out: dict[str, Any] = {
            "input_ids": torch.from_numpy(self.tokens_np[start:stop].astype(np.int64))
        }
        if self.labels is not None:
            out["labels"] = int(self.labels_np[index])
        return out


class _Mapped:
    """A memory-mapped array as pickles carry it: its file, dtype, shape and offset."""

    def __init__(self, array: np.memmap) -> None:
        self.file, self.dtype, self.shape = array.filename, array.dtype, array.shape
        self.offset = array.offset

    def open(self) -> np.memmap:
        return np.memmap(self.file, self.dtype, "c", self.offset, self.shape)


def gather_padded(
    encoded: EncodedTexts,
    rows: torch.Tensor,
    pad_id: int,
    padding_side: str = "right",
    pad_to_multiple_of: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gathers samples ``rows`` from the flat buffer into a padded (B, L) batch.

    Returns:
        ``(input_ids, attention_mask, lengths)``: int64 ids padded with ``pad_id``, an int64
        mask (1 at real tokens), and int64 lengths, as :class:`collates.PadCollate` makes them.
    """
    index = rows.numpy()
    lengths = encoded.lengths_np[index]
    starts = encoded.offsets_np[index]
    longest = int(lengths.max()) if len(index) else 0
    width = longest
    if pad_to_multiple_of:
        width = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    position = np.arange(width)
    if padding_side == "right":
        mask = position < lengths[:, None]
        source = starts[:, None] + position
    else:
        shift = (width - lengths)[:, None]
        mask = position >= shift
        source = starts[:, None] + (position - shift)
    padding = ~mask
    if len(encoded.tokens_np):
        source[padding] = 0
        ids = encoded.tokens_np[source].astype(np.int64)
        ids[padding] = pad_id
    else:
        ids = np.full((len(index), width), pad_id, dtype=np.int64)
    return (
        torch.from_numpy(ids),
        torch.from_numpy(mask.astype(np.int64)),
        torch.from_numpy(lengths),
    )


class TextBatchView(SplitView):
    """A split of tokenized texts; a batch is gathered from the flat buffer in one call.

    Args:
        encoded: The tokenized texts of the split's source.
        indices: Positions of the split's samples in ``encoded``.
        transform: Applied to each whole batch dict.
        pad_id: Id written at padded positions.
        padding_side: ``"right"`` or ``"left"``.
        pad_to_multiple_of: Round the padded length up to a multiple of this.
    """

    def __init__(
        self,
        encoded: EncodedTexts,
        indices: torch.Tensor,
        transform: Callable[[Any], Any] | None,
        pad_id: int,
        padding_side: str = "right",
        pad_to_multiple_of: int | None = None,
    ) -> None:
        super().__init__(indices, transform)
        self.encoded = encoded
        self.pad_id = pad_id
        self.padding_side = padding_side
        self.pad_to_multiple_of = pad_to_multiple_of

    @property
    def lengths(self) -> torch.Tensor:
        """Tokens per sample of this split, in split order (what the sampler buckets on)."""
        return self.encoded.lengths if self._identity else self.encoded.lengths[self.indices]

    def __getitem__(self, batch: torch.Tensor) -> dict[str, torch.Tensor]:
        rows = self.rows(batch)
        ids, mask, lengths = gather_padded(
            self.encoded, rows, self.pad_id, self.padding_side, self.pad_to_multiple_of
        )
        out = {"input_ids": ids}
        if self.encoded.labels is not None:
            out["labels"] = torch.from_numpy(self.encoded.labels_np[rows.numpy()])
        out["attention_mask"] = mask
        out["lengths"] = lengths
        return self.transform(out) if self.transform is not None else out
