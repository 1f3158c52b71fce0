"""Image batches: decoded, transformed and written straight into a reused uint8 batch.

* :class:`ImageBatchView`: a split of an image folder whose item is a whole batch
  ``(images uint8 (B, 3, H, W) channels-last, targets int64 (B,))``; unreadable files raise
  :class:`~datamodules.imaging.decoding.ImageDecodeError` or, under ``on_error="skip"``, are
  left out of their batch and sent to ``dm.skipped``
  (:class:`~datamodules.core.skipped.SkipChannel`), each once where its batch reads it; a
  batch whose files are all unreadable holds the split's next readable sample instead,
  reported as repeated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from datamodules.core.skipped import SkipChannel
from datamodules.core.views import SplitView
from datamodules.images.index import ImageFolderIndex
from datamodules.imaging.batches import ImageBatchWriter
from datamodules.imaging.decoding import ImageDecodeError
from datamodules.imaging.decoding import preload as preload_decoders
from datamodules.imaging.scaled import ImageDecoder

__all__ = ["ImageBatchView"]


class ImageBatchView(SplitView):
    """A split of an image index, decoded and transformed a batch at a time.

    Args:
        index: Paths and class indices of every sample.
        indices: Positions of the split's samples in ``index``.
        transform: A transform on uint8 ``(3, H, W)`` tensors; must give one size per batch.
        on_error: ``"raise"``: an unreadable file raises
            :class:`~datamodules.imaging.decoding.ImageDecodeError` naming it; ``"skip"``: it is
            left out of its batch and sent through ``skips``.
        skips: Where skipped files are sent, for the main process's ``dm.skipped``.
        decode: ``"scaled"``: JPEGs the transform shrinks 2x or more are decoded at a reduced
            scale (:mod:`datamodules.imaging.scaled`); ``"full"``: every pixel.
    """

    def __init__(
        self,
        index: ImageFolderIndex,
        indices: torch.Tensor,
        transform: Callable[[torch.Tensor], torch.Tensor] | None,
        on_error: str = "raise",
        skips: SkipChannel | None = None,
        decode: str = "full",
    ) -> None:
        super().__init__(indices, transform)
        self.index = index
        self.decoder = ImageDecoder(transform, decode)
        self.on_error = on_error
        self.skips = skips

    def decode(self, row: int, quiet: bool = False) -> tuple[torch.Tensor, Any] | None:
        """Decodes one sample (interleaved layout) for the transform: ``(image, its own
        transform or None)`` as :meth:`ImageDecoder.file` gives; None if it was skipped (and
        sent to ``dm.skipped`` unless ``quiet``)."""
        path = self.index.path(row)
        try:
            return self.decoder.file(path)
        except ImageDecodeError as error:
            if self.on_error == "raise":
                raise
            if self.skips is not None and not quiet:
                self.skips.send(path, None, error.reason or str(error))
            return None

    def preload(self) -> None:
        """Imports the image decoders (before the loader forks its workers)."""
        preload_decoders()

    def __getitem__(self, batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = self.rows(batch).tolist()
        writer = ImageBatchWriter(len(rows), self.transform)
        kept = []
        for row in rows:
            decoded = self.decode(row)
            if decoded is not None:
                writer.add(*decoded)
                kept.append(row)
        if not kept:
            # Every file of this batch failed: an empty batch would break the step and a
            # missing one would desynchronise DDP ranks, so take the split's next readable
            # sample instead (the one duplicate is recorded in dm.skipped).
            decoded, row = self._substitute(rows[-1])
            writer.add(*decoded)
            kept.append(row)
        targets = torch.from_numpy(self.index.targets[np.asarray(kept, dtype=np.int64)])
        return writer.batch(), targets

    def _substitute(self, after: int) -> tuple[tuple[torch.Tensor, Any], int]:
        """The split's next readable sample after row ``after``, reported as repeated; the
        unreadable ones passed over are not sent again (their own batches send them, once)."""
        split_rows = self.indices.tolist()
        start = split_rows.index(after) if after in split_rows else 0
        for offset in range(1, len(split_rows) + 1):
            row = split_rows[(start + offset) % len(split_rows)]
            decoded = self.decode(row, quiet=True)
            if decoded is not None:
                if self.skips is not None:
                    self.skips.send(self.index.path(row), None, "repeated to fill an all-bad batch")
                return decoded, row
        raise ImageDecodeError("on_error='skip' found no readable image in this split at all")
