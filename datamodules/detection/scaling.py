"""Scaled JPEG decoding for detection: a JPEG the transform shrinks 2x or more decodes at 1/2,
1/4 or 1/8, and its boxes and masks follow.

``DetectionDataModule(decode="scaled")`` (the default) reads each JPEG's header (size and EXIF
orientation, :func:`~datamodules.imaging.scaled.jpeg_header`), works out the size the image
will have after the resize the pipeline does anyway, and decodes at the largest DCT scale that
keeps the image at or above it (:func:`~datamodules.imaging.scaled.decode_jpeg_scaled`). The
boxes are then put on the decoded image by the exact factors applied, ``w' / w`` and ``h' / h``
(the DCT scale rounds sizes up: ``w' = ceil(w / s)``), and masks are drawn at the decoded size.

Which pipelines allow it (:class:`DecodePlanner`):

* the default transform (:class:`~datamodules.detection.batches.ResizeMinMax` by ``min_size`` /
  ``max_size``, then a flip in training): the output size is the one the resize gives the
  full image; the decoded image is resized straight to it, then the rest of the transform runs,
  so sizes equal ``decode="full"``'s exactly and pixels differ by resampling only;
* ``batch_format="yolo"``: the letterbox's image (the longer side ``image_size``) after the
  default transform (or a transform of flips only) is the output size; the decoded image is
  resized to it before the flips, and the letterbox then only pads it;
* any other transform gets the full image, unless it declares the smallest size it needs with a
  ``decode_size`` attribute (an int or ``(height, width)``, the image kinds' protocol,
  :mod:`datamodules.imaging.scaled`): it then gets the whole image decoded at the largest scale
  still at least that large, boxes and masks on it.

PNG and other formats, JPEGs shrunk less than 2x and everything under ``decode="full"`` take
today's path: :func:`~datamodules.imaging.decoding.decode_image`, the transform as given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torchvision.transforms import v2

from datamodules.imaging.decoding import ImageDecodeError, decode_image_bytes
from datamodules.imaging.scaled import (
    DECODE_SIZE,
    check_decode,
    decode_jpeg_scaled,
    jpeg_header,
    largest_scale,
)
from datamodules.imaging.transforms import as_height_width

__all__ = ["DecodePlanner", "letterbox_shape", "scale_segmentation"]

#: Transforms that keep an image's size and commute with a resize.
_FLIPS = (v2.RandomHorizontalFlip, v2.RandomVerticalFlip)


def letterbox_shape(height: int, width: int, size: int) -> tuple[int, int]:
    """The (height, width) the letterbox of :func:`~datamodules.detection.collate.letterbox`
    resizes an image to before padding it to ``size``."""
    ratio = min(size / height, size / width)
    return round(height * ratio), round(width * ratio)


def _steps(transform: Any) -> list[Any] | None:
    if transform is None:
        return []
    if type(transform) is v2.Compose:
        return list(transform.transforms)
    return [transform]


def _is_resize_min_max(step: Any) -> bool:
    """Whether ``step`` is the default transform's resize (batches' ``ResizeMinMax``), known
    by its class's name and module so that this module does not import batches (which
    imports it)."""
    kind = type(step)
    return kind.__name__ == "ResizeMinMax" and kind.__module__ == "datamodules.detection.batches"


class DecodePlanner:
    """Decodes one split's images for its transform: scaled JPEGs where the pipeline allows.

    Args:
        transform: The split's joint ``(image, target)`` transform (or None).
        decode: ``"scaled"`` or ``"full"``.
        letterbox: ``"yolo"``'s letterbox side (None for the other formats).
    """

    def __init__(self, transform: Any, decode: str = "scaled", letterbox: int | None = None):
        check_decode(decode)
        self.decode = decode
        self.letterbox = letterbox
        #: The resize whose output size is planned, the steps after it, a declared size.
        self.resize: Any = None
        self.rest: Callable[..., Any] | None = None
        self.declared: tuple[int, int] | None = None
        self.plans = False
        steps = _steps(transform)
        if decode == "full" or steps is None:
            return
        if steps and _is_resize_min_max(steps[0]):
            self.resize, steps = steps[0], steps[1:]
        sized = self.resize is not None or letterbox is not None
        if sized and (letterbox is None or all(type(s) in _FLIPS for s in steps)):
            self.plans = True
            self.rest = None if not steps else steps[0] if len(steps) == 1 else v2.Compose(steps)
            return
        size = getattr(transform, DECODE_SIZE, None)
        if size is not None:
            try:
                self.declared = as_height_width(size)
            except ValueError:
                raise ValueError(
                    f"{type(transform).__name__}.decode_size={size!r} is not accepted: use an "
                    "int >= 1 or (height, width), the smallest image the transform needs."
                ) from None

    @property
    def sizes(self) -> bool:
        """Whether images may decode at a reduced scale (a planned resize, a declared size)."""
        return self.plans or self.declared is not None

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """The size the pipeline's resize gives an image of this (full) size."""
        if self.resize is not None:
            height, width = self.resize.size(height, width)
        if self.letterbox is not None:
            height, width = letterbox_shape(height, width, self.letterbox)
        return height, width

    def decode_data(
        self, data: bytes, path: str
    ) -> tuple[torch.Tensor, tuple[int, int] | None, tuple[int, int] | None]:
        """Decodes one image's encoded bytes (read from its file or its shard), errors naming
        ``path`` (where they came from).

        Returns:
            ``(image, output, full)``: the ``uint8`` ``(3, h, w)`` image; the (height,
            width) to resize it to before the rest of the transform (None: apply the split's
            transform as given); the image's full (height, width) as displayed when it was
            decoded at a reduced scale (its boxes and masks must be scaled from it), else None.
        """
        if self.decode == "full":
            return decode_image_bytes(data, name=path), None, None
        header = jpeg_header(data) if self.plans or self.declared else None
        if header is None:
            return decode_image_bytes(data, name=path), None, None
        height, width, orientation = header
        if orientation >= 5:
            height, width = width, height
        output = self.output_size(height, width) if self.plans else self.declared
        assert output is not None
        scale = largest_scale(height / output[0], width / output[1])
        if scale == 1:
            return decode_image_bytes(data, name=path), None, None
        try:
            image = decode_jpeg_scaled(data, scale, orientation)
        except Exception as exc:
            message = str(exc).strip() or type(exc).__name__
            raise ImageDecodeError.for_file(path, f"Pillow JPEG decoder: {message}") from exc
        return image, (output if self.plans else None), (height, width)

    def finish(self, image: Any, target: dict[str, Any], output: tuple[int, int]) -> tuple:
        """Resizes a scaled image and its target to ``output``, then runs the rest of the
        transform."""
        if tuple(image.shape[-2:]) != output:
            image, target = v2.Resize(list(output), antialias=True)(image, target)
        if self.rest is not None:
            image, target = self.rest(image, target)
        return image, target


def scale_segmentation(segmentation: Any, fx: float, fy: float) -> Any:
    """Polygons (a list of flat ``x, y`` lists) scaled by ``fx``, ``fy``; other
    segmentations (RLE, None) unchanged (the caller resizes their masks)."""
    if not isinstance(segmentation, list):
        return segmentation
    scaled = []
    for polygon in segmentation:
        points = np.asarray(polygon, dtype=np.float64).reshape(-1, 2) * (fx, fy)
        scaled.append(points.reshape(-1).tolist())
    return scaled
