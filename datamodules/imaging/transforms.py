"""The default image transforms, fused for speed on uint8 channels-last tensors.

:func:`default_train_transforms` / :func:`default_eval_transforms` are what
:class:`~datamodules.ImageFolderDataModule` and the image records of
:class:`~datamodules.StreamingDataModule` use unless given others; what both do to a uint8
batch once the Trainer moved it to the device is in :mod:`datamodules.imaging.normalize`.

They draw the same random parameters as ``torchvision.transforms.v2.RandomResizedCrop`` +
``RandomHorizontalFlip`` (train) and apply the same ``Resize`` + ``CenterCrop`` (eval), but:

* the crop is copied to a small channels-last block before resizing, which sends torch's
  uint8 antialiased bilinear resize down its vectorised channels-last path (a strided crop
  view takes the generic path, about 1.6x slower here);
* the flip is applied to the crop while it is copied (resizing commutes exactly with a
  horizontal flip: the sampling grid is symmetric), so it costs nothing;
* they call the antialiased bilinear kernel behind ``interpolate`` directly and draw
  numbers with Python's ``random`` (seeded per DataLoader worker by PyTorch), without the
  per-call input flattening and type dispatch of ``v2.Compose``, ``interpolate``'s argument
  checks or one-element torch RNG calls, which together cost as much as the resize;
* :meth:`RandomResizedCropFlip.into` writes the resized crop straight into its place in the
  batch (the kernel's ``out=`` form): no per-image allocation and no stacking copy.

They take and return ``uint8`` tensors ``(3, H, W)``, so any ``torchvision.transforms.v2``
transform can replace them (``train_transforms=`` / ``eval_transforms=``).
"""

from __future__ import annotations

import math
import random
from typing import Any

import torch

from datamodules.core.checks import check_mean_std, int_mistake, rejected

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "RandomResizedCropFlip",
    "ResizeCenterCrop",
    "check_image_arguments",
    "default_eval_transforms",
    "default_train_transforms",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# What F.interpolate(mode="bilinear", antialias=True, align_corners=False) runs.
_resize_aa = torch.ops.aten._upsample_bilinear2d_aa

#: An output size as torchvision's transforms take it: a side, or ``(height, width)``.
Size = int | tuple[int, int]


def as_height_width(size: Size | list[int]) -> tuple[int, int]:
    """``(height, width)`` of an output size: an int is a square's side.

    Raises:
        TypeError: Neither an int nor a pair (a float, a string, a pair holding one).
        ValueError: An int < 1, in a pair or alone, or a sequence of another length.
    """
    if isinstance(size, (tuple, list)):
        mistakes = [int_mistake(v, 1) for v in size] if len(size) == 2 else [ValueError]
        mistake = TypeError if TypeError in mistakes else ValueError if any(mistakes) else None
    else:
        mistake = int_mistake(size, 1)
    if mistake is not None:
        accepted = (
            "an int >= 1 (a square's side) or (height, width), as torchvision's transforms take it"
        )
        raise rejected("image_size", size, accepted, mistake)
    if isinstance(size, (tuple, list)):
        return int(size[0]), int(size[1])
    return int(size), int(size)


def _as_nchw(hwc: torch.Tensor) -> torch.Tensor:
    h, w, c = hwc.shape
    return hwc.as_strided((1, c, h, w), (c * h * w, 1, w * c, c))  # unambiguous NHWC


def resize_hwc(
    hwc: torch.Tensor, size: tuple[int, int], out: torch.Tensor | None = None
) -> torch.Tensor:
    """Antialiased bilinear resize of a dense ``(H, W, C)`` uint8 tensor to ``size`` (h, w).

    Args:
        hwc: The image, interleaved and contiguous.
        size: Output (height, width).
        out: Optional ``(C, h, w)`` destination with channels-last strides (e.g. one image
            of a ``torch.channels_last`` batch); written in place.

    Returns:
        A ``(C, h, w)`` tensor with channels-last strides (``out`` if given).
    """
    if out is not None:
        _resize_aa.out(_as_nchw(hwc), list(size), False, None, None, out=out.unsqueeze(0))
        return out
    return _resize_aa.default(_as_nchw(hwc), list(size), False, None, None)[0]


class RandomResizedCropFlip:
    """RandomResizedCrop(size, scale, ratio) followed by a horizontal flip with probability p.

    Args:
        size: Side of the square output, or ``(height, width)``.
        scale: Range of the crop's share of the image area.
        ratio: Range of the crop's aspect ratio (width / height).
        flip_p: Probability of a horizontal flip.
    """

    def __init__(
        self,
        size: Size,
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        flip_p: float = 0.5,
    ) -> None:
        self.size = size
        self._hw = as_height_width(size)
        self.scale = scale
        self.ratio = ratio
        self.flip_p = flip_p
        self._log_ratio = (math.log(ratio[0]), math.log(ratio[1]))

    def crop_box(self, height: int, width: int) -> tuple[int, int, int, int]:
        """Draws (top, left, h, w) with torchvision's RandomResizedCrop algorithm."""
        area = height * width
        for _ in range(10):
            target_area = area * random.uniform(*self.scale)
            aspect = math.exp(random.uniform(*self._log_ratio))
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                return random.randint(0, height - h), random.randint(0, width - w), h, w
        # Fallback to a central crop, as torchvision does.
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            w, h = width, int(round(width / self.ratio[0]))
        elif in_ratio > self.ratio[1]:
            h, w = height, int(round(height * self.ratio[1]))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return self.into(image, None)

    def into(self, image: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
        """As calling the transform, but writes the result into ``out`` if given.

        Args:
            image: A ``uint8`` image ``(3, H, W)``, any layout.
            out: ``None``, or a ``(3, height, width)`` uint8 view with channels-last strides,
                such as ``batch[i]`` of a ``torch.channels_last`` batch.
        """
        channels, height, width = image.shape
        top, left, h, w = self.crop_box(height, width)
        if image.stride() == (1, channels * width, channels):  # interleaved: one view op
            offset = image.storage_offset() + (top * width + left) * channels
            crop = image.as_strided((h, w, channels), (channels * width, channels, 1), offset)
        else:
            crop = image[:, top : top + h, left : left + w].permute(1, 2, 0)
        # flip() keeps the strides of a dense view (a whole transposed image): copy to HWC.
        flip = random.random() < self.flip_p
        crop = (crop.flip(1) if flip else crop).contiguous()
        return resize_hwc(crop, self._hw, out)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(size={self.size}, scale={self.scale}, "
            f"ratio=({self.ratio[0]:.3f}, {self.ratio[1]:.3f}), flip_p={self.flip_p})"
        )


class ResizeCenterCrop:
    """Resize the short side to ``resize``, then CenterCrop ``size`` (the usual eval pipeline).

    Args:
        size: Side of the square output, or ``(height, width)``.
        resize: Short side after resizing (default ``round(size / 0.875)``, i.e. 256 for
            224). For ``size=(h, w)``, the default resizes (keeping the aspect ratio) to the
            least that covers ``(round(h / 0.875), round(w / 0.875))``.
    """

    def __init__(self, size: Size, resize: int | None = None) -> None:
        self.size = size
        self._hw = as_height_width(size)
        if resize is None and isinstance(size, int):
            resize = int(round(size / 0.875))
        self.resize = resize
        self._cover = None if resize is not None else tuple(int(round(v / 0.875)) for v in self._hw)

    def _resized_shape(self, height: int, width: int) -> tuple[int, int]:
        if self._cover is not None:  # (h, w) output: cover the enlarged box
            scale = max(self._cover[0] / height, self._cover[1] / width)
            return max(self._cover[0], int(height * scale)), max(self._cover[1], int(width * scale))
        short = min(height, width)
        new_h = self.resize if height == short else int(self.resize * height / width)
        new_w = self.resize if width == short else int(self.resize * width / height)
        return new_h, new_w

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        height, width = image.shape[-2:]
        new_h, new_w = self._resized_shape(height, width)
        if (new_h, new_w) == (height, width):
            resized = image
        else:
            resized = resize_hwc(image.permute(1, 2, 0).contiguous(), (new_h, new_w))
        crop_h, crop_w = self._hw
        top = int(round((resized.shape[-2] - crop_h) / 2.0))
        left = int(round((resized.shape[-1] - crop_w) / 2.0))
        if top < 0 or left < 0:
            raise ValueError(
                f"ResizeCenterCrop: image of {height}x{width} resized to "
                f"{tuple(resized.shape[-2:])} is smaller than the crop {self.size}"
            )
        return resized[:, top : top + crop_h, left : left + crop_w]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.size}, resize={self.resize})"


def default_train_transforms(image_size: Size) -> RandomResizedCropFlip:
    """RandomResizedCrop to ``image_size`` and a horizontal flip, on uint8 tensors."""
    return RandomResizedCropFlip(image_size)


def default_eval_transforms(image_size: Size) -> ResizeCenterCrop:
    """Resize the short side to ``image_size / 0.875``, then CenterCrop ``image_size``."""
    return ResizeCenterCrop(image_size)


def check_image_arguments(
    image_size: Any, mean: Any, std: Any
) -> tuple[Size, tuple[float, ...], tuple[float, ...]]:
    """Checks ``image_size`` (an int >= 1 or ``(height, width)``) and ``mean`` / ``std`` (3
    numbers each, ``std`` all > 0; :func:`~datamodules.core.checks.check_mean_std`).

    Returns:
        ``image_size`` as an int or a ``(height, width)`` tuple (a list from a config becomes a
        pair again), and ``mean`` and ``std`` as tuples of floats.

    Raises:
        TypeError, ValueError: A bad value, naming the argument, the value and what is
            accepted.
    """
    height, width = as_height_width(image_size)
    size = (height, width) if isinstance(image_size, (tuple, list)) else height
    return (size, *check_mean_std(mean, std))
