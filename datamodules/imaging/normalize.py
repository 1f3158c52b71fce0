"""Device normalisation: uint8 image batches to float, once the Trainer moved them to the device.

Image folders and image records of streams both deliver uint8 ``(B, 3, H, W)`` batches (a
quarter of float32's bytes through the worker queue, pinned memory and the host-to-device
copy) and turn them into float here, where it is cheapest:

* :func:`to_float`: uint8 images -> float32 in [0, 1], then ``(x - mean) / std`` per channel.
* :func:`batch_to_float`: a conversion applied to the images of a batch, ``(images, ...)`` or
  a dict with ``"image"``; anything else passes unchanged.
* :class:`NormalizeOnDevice`: the ``on_after_batch_transfer`` and ``to_float`` methods of
  :class:`~datamodules.ImageFolderDataModule` and of
  :class:`~datamodules.StreamingDataModule`'s image records, from their ``normalize``,
  ``mean`` and ``std``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from datamodules.imaging.transforms import IMAGENET_MEAN, IMAGENET_STD

__all__ = ["NormalizeOnDevice", "batch_to_float", "to_float"]


def to_float(
    images: torch.Tensor,
    mean: Sequence[float] | None = IMAGENET_MEAN,
    std: Sequence[float] | None = IMAGENET_STD,
) -> torch.Tensor:
    """uint8 images ``(B, 3, H, W)`` -> float32 in [0, 1], then ``(x - mean) / std`` per
    channel unless ``mean`` / ``std`` are None; on the images' device, layout kept."""
    out = images.float().div_(255.0)
    if mean is not None and std is not None:
        shift = torch.tensor(mean, device=out.device).view(1, 3, 1, 1)
        scale = torch.tensor(std, device=out.device).view(1, 3, 1, 1)
        out.sub_(shift).div_(scale)
    return out


def _is_uint8(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == torch.uint8


def batch_to_float(batch: Any, convert: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """A batch with its uint8 images passed through ``convert`` (e.g. :func:`to_float`).

    ``(images, labels, ...)`` (a tuple or list whose first item is a uint8 tensor) gives a
    tuple; a dict whose ``"image"`` (or ``"pixel_values"``, a vision-language batch's images)
    is a uint8 tensor gives a dict; anything else (images
    already float, other batches) is returned as it is.
    """
    if isinstance(batch, (tuple, list)) and batch and _is_uint8(batch[0]):
        return (convert(batch[0]), *batch[1:])
    if isinstance(batch, dict):
        found = [k for k in ("image", "pixel_values") if _is_uint8(batch.get(k))]
        if found:
            return {**batch, **{k: convert(batch[k]) for k in found}}
    return batch


class NormalizeOnDevice:
    """Float conversion and normalisation of uint8 image batches on the device (a mixin).

    The class using it sets ``normalize`` (bool), ``mean`` and ``std`` (3 floats each).
    """

    normalize: bool
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """uint8 images to float in [0, 1], normalised if ``normalize``, on the device
        (:meth:`to_float` on the batch's images)."""
        return batch_to_float(batch, self.to_float)

    def to_float(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 images -> float32 in [0, 1], normalised with ``mean``/``std`` if ``normalize``."""
        if not self.normalize:
            return to_float(images, None, None)
        return to_float(images, self.mean, self.std)
