"""Image batches: decoded, transformed and written straight into a reused uint8 batch.

* :class:`ImageBatchView`: a split of an image folder whose item is a whole batch
  ``(images uint8 (B, 3, H, W) channels-last, targets int64 (B,))``; unreadable files raise
  :class:`~datamodules.images.decoding.ImageDecodeError` or, under ``on_error="skip"``, are
  replaced by the next readable sample and logged.
* :class:`SkipLog`: the files skipped so far, shared by the worker processes through a
  directory of small files.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

import numpy as np
import torch

from collates.images import check_uint8_image
from datamodules.core.shared_batches import empty_batch
from datamodules.core.views import SplitView
from datamodules.images.decoding import ImageDecodeError, decode_image
from datamodules.images.index import ImageFolderIndex


class SkipLog:
    """Records files skipped with ``on_error="skip"``, from any worker process.

    Workers append one line per skipped file to a file (appends of a short line are atomic),
    so the record survives worker processes of any start method; the main process reads
    the lines added since its last read.

    Args:
        directory: Where to keep the log file.
    """

    def __init__(self, directory: str | None = None) -> None:
        handle, self.path = tempfile.mkstemp(prefix="skipped-", suffix=".tsv", dir=directory)
        os.close(handle)
        self._read_to = 0
        self.total: list[tuple[str, str]] = []

    def record(self, path: str, reason: str) -> None:
        """Appends one skipped file and the reason (called in workers)."""
        line = f"{path}\t{reason}".replace("\n", " ") + "\n"
        with open(self.path, "a", encoding="utf-8", errors="surrogateescape") as log:
            log.write(line)

    def read_new(self) -> list[tuple[str, str]]:
        """Returns the (path, reason) pairs recorded since the previous call."""
        with open(self.path, encoding="utf-8", errors="surrogateescape") as log:
            log.seek(self._read_to)
            text = log.read()
            self._read_to = log.tell()
        new = [tuple(line.split("\t", 1)) for line in text.splitlines() if line]
        self.total.extend(new)  # type: ignore[arg-type]
        return new  # type: ignore[return-value]


class ImageBatchView(SplitView):
    """A split of an image index, decoded and transformed a batch at a time.

    Args:
        index: Paths and class indices of every sample.
        indices: Positions of the split's samples in ``index``.
        transform: A transform on uint8 ``(3, H, W)`` tensors; must give one size per batch.
        on_error: ``"raise"``: an unreadable file raises
            :class:`~datamodules.images.decoding.ImageDecodeError` naming it; ``"skip"``: it is
            left out of its batch and recorded in ``skip_log``.
        skip_log: Where skipped files are recorded.
    """

    def __init__(
        self,
        index: ImageFolderIndex,
        indices: torch.Tensor,
        transform: Callable[[torch.Tensor], torch.Tensor] | None,
        on_error: str = "raise",
        skip_log: SkipLog | None = None,
    ) -> None:
        super().__init__(indices, transform)
        self.index = index
        self.on_error = on_error
        self.skip_log = skip_log

    def decode(self, row: int) -> torch.Tensor | None:
        """Decodes one sample (interleaved layout); None if it was skipped."""
        path = self.index.path(row)
        try:
            return decode_image(path, channels_last=True)
        except ImageDecodeError as error:
            if self.on_error == "raise":
                raise
            if self.skip_log is not None:
                self.skip_log.record(path, error.reason or str(error))
            return None

    def __getitem__(self, batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = self.rows(batch).tolist()
        writer = _BatchWriter(len(rows), self.transform)
        kept = []
        for row in rows:
            image = self.decode(row)
            if image is not None:
                writer.add(image)
                kept.append(row)
        if not kept:
            # Every file of this batch failed: an empty batch would break the step and a
            # missing one would desynchronise DDP ranks, so take the split's next readable
            # sample instead (the one duplicate is recorded in the skip log).
            image, row = self._substitute(rows[-1])
            writer.add(image)
            kept.append(row)
        targets = torch.from_numpy(self.index.targets[np.asarray(kept, dtype=np.int64)])
        return writer.batch(), targets

    def _substitute(self, after: int) -> tuple[torch.Tensor, int]:
        split_rows = self.indices.tolist()
        start = split_rows.index(after) if after in split_rows else 0
        for offset in range(1, len(split_rows) + 1):
            row = split_rows[(start + offset) % len(split_rows)]
            image = self.decode(row)
            if image is not None:
                if self.skip_log is not None:
                    self.skip_log.record(self.index.path(row), "repeated to fill an all-bad batch")
                return image, row
        raise ImageDecodeError("on_error='skip' found no readable image in this split at all")


class _BatchWriter:
    """Transforms images one by one into a ``(B, 3, H, W)`` channels-last uint8 batch.

    The batch is allocated once its first image gives the size, with
    :func:`~datamodules.core.shared_batches.empty_batch` (in a DataLoader worker, a reused
    shared-memory buffer the main process already has mapped). Transforms with an ``into``
    method (the default train transform) resize straight into their place in it; others'
    results are copied in, with the checks of :func:`~collates.images.stack_uint8_images`.

    Args:
        capacity: The most images the batch will hold.
        transform: The split's transform, or None.
    """

    def __init__(self, capacity: int, transform: Callable[[torch.Tensor], torch.Tensor] | None):
        self.capacity = capacity
        self.transform = transform
        self.into = getattr(transform, "into", None)
        self.out: torch.Tensor | None = None  # (B, C, H, W), channels-last strides
        self.count = 0

    def add(self, image: torch.Tensor) -> None:
        """Transforms ``image`` and writes it after the images already added."""
        if self.out is not None and self.into is not None:
            self.into(image, self.out[self.count])
            self.count += 1
            return
        if self.transform is not None:
            image = self.transform(image)
        check_uint8_image(image, self.count, None if self.out is None else self.out.shape[1:])
        if self.out is None:
            c, h, w = image.shape
            self.out = empty_batch((self.capacity, c, h, w), torch.uint8, channels_last=True)
        target = self.out[self.count].permute(1, 2, 0)  # (H, W, C), contiguous
        source = image.permute(1, 2, 0)
        if source.is_contiguous():
            target.copy_(source)
        else:  # numpy's strided copy is about 2x faster for CHW -> HWC
            target.numpy()[...] = source.numpy()
        self.count += 1

    def batch(self) -> torch.Tensor:
        """The images added so far, as one ``(n, C, H, W)`` batch."""
        assert self.out is not None
        return self.out[: self.count]
