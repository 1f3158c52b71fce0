"""Writing decoded images into a reused uint8 batch.

:class:`ImageBatchWriter` transforms decoded images one by one straight into a
``(B, 3, H, W)`` channels-last ``uint8`` batch allocated in a reused shared-memory slot
(:func:`~datamodules.core.shared_batches.empty_batch`). Both
:class:`~datamodules.ImageFolderDataModule` and the image records of
:class:`~datamodules.StreamingDataModule` build their batches with it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from collates.images import check_uint8_image
from datamodules.core.shared_batches import empty_batch

__all__ = ["ImageBatchWriter"]


class ImageBatchWriter:
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

    def add(
        self, image: torch.Tensor, transform: Callable[[torch.Tensor], torch.Tensor] | None = None
    ) -> None:
        """Transforms ``image`` and writes it after the images already added.

        Args:
            image: A decoded ``uint8`` image ``(3, H, W)``.
            transform: This image's own transform instead of the batch's (one whose random
                parameters were drawn before decoding, by
                :class:`~datamodules.imaging.scaled.ImageDecoder`).
        """
        into = self.into
        if transform is not None:
            into = getattr(transform, "into", None)
        else:
            transform = self.transform
        if self.out is not None and into is not None:
            into(image, self.out[self.count])
            self.count += 1
            return
        if transform is not None:
            image = transform(image)
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
