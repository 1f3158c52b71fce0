"""Instance masks of detection objects, decoded only when asked (``masks=True``).

COCO polygons, uncompressed RLE (``counts`` a list) and compressed RLE (``counts`` a string)
decode exactly as pycocotools' ``COCO.annToMask`` decodes them (through ``pycocotools.mask``,
the ``detection`` extra); YOLO ``-seg`` polygons are COCO polygons in pixels. An object
without a segmentation (a plain box, VOC's objects) gets its box, filled, as its mask.

:func:`object_masks` draws the masks of one image into one zeroed ``(K, H, W)`` array, each
object only over the columns its RLE's runs span (and, where no run leaves its column, the rows
too), mirrored there when the image is flipped: an image's masks cost one allocation and a
write of each object's extent, not a full-size transposed copy per object, a stack and a flip
of the stack.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["fill_object_mask", "object_mask", "object_masks", "require_pycocotools", "rle_counts"]


def require_pycocotools() -> Any:
    """``pycocotools.mask``, or an ImportError that names the extra to install."""
    try:
        from pycocotools import mask
    except ImportError as exc:
        raise ImportError(
            "DetectionDataModule(masks=True) decodes polygons and RLE with pycocotools: "
            "pip install 'lightning-datamodules[detection]' (or pycocotools)."
        ) from exc
    return mask


def object_mask(
    segmentation: Any, box: np.ndarray, height: int, width: int, coco: Any
) -> np.ndarray:
    """The ``uint8`` ``(height, width)`` mask of one object.

    Args:
        segmentation: Its polygons (a list of flat ``x, y`` lists), an RLE dict, or None.
        box: Its XYXY box (the mask when there is no segmentation).
        height: The image's height.
        width: The image's width.
        coco: ``pycocotools.mask`` (:func:`require_pycocotools`).
    """
    mask = np.zeros((height, width), dtype=np.uint8)
    fill_object_mask(mask, segmentation, box, coco)
    return mask


def object_masks(
    segmentations: list[Any], boxes: np.ndarray, height: int, width: int, coco: Any,
    *, flip: bool = False,
) -> np.ndarray:  # fmt: skip
    """The ``uint8`` ``(K, height, width)`` masks of an image's ``K`` objects, mirrored
    left-right with ``flip`` (as ``v2.functional.horizontal_flip`` of the stack gives them)."""
    masks = np.zeros((len(segmentations), height, width), dtype=np.uint8)
    for mask, segmentation, box in zip(masks, segmentations, boxes, strict=True):
        fill_object_mask(mask, segmentation, box, coco, flip=flip)
    return masks


def fill_object_mask(
    mask: np.ndarray, segmentation: Any, box: np.ndarray, coco: Any, *, flip: bool = False
) -> None:
    """Writes one object's mask into ``mask``, a zeroed ``uint8`` ``(H, W)`` array, over the
    object's extent only; mirrored left-right with ``flip``. Arguments as :func:`object_mask`.

    Polygons become pycocotools' RLE (``frPyObjects`` and ``merge``, so the pixels are its
    own); the runs are then read from the RLE's counts here, over the columns the object
    spans, instead of ``pycocotools.mask.decode``'s full-size array written byte by byte.
    """
    height, width = mask.shape
    if segmentation is None:  # the box, filled (slices past the image stop at its edge)
        x1, y1, x2, y2 = (int(round(float(v))) for v in box)
        left, right = min(max(x1, 0), width), min(max(x2, 0), width)
        if flip:
            left, right = width - right, width - left
        mask[max(y1, 0) : max(y2, 0), left:right] = 1
        return
    if isinstance(segmentation, list):  # polygons: merged into one RLE, as annToRLE
        counts = rle_counts(coco.merge(coco.frPyObjects(segmentation, height, width))["counts"])
    elif isinstance(segmentation.get("counts"), list):  # uncompressed RLE
        counts = np.asarray(segmentation["counts"], dtype=np.int64)
    else:
        counts = rle_counts(segmentation["counts"])
    ends = np.cumsum(counts)
    if ends[-1] != height * width:
        raise ValueError(
            f"an RLE of {int(ends[-1])} pixels does not fit an image of {height}x{width}"
        )
    starts, stops = ends[0:-1:2], ends[1::2]  # the runs of ones, column-major positions
    if not len(starts):
        return
    first, last = int(starts[0]) // height, (int(stops[-1]) - 1) // height  # its columns
    # The runs over those columns only: zeros, ones, ..., ones, zeros, written by np.repeat.
    lengths = np.empty(2 * len(starts) + 1, dtype=np.int64)
    lengths[0] = starts[0] - first * height
    lengths[1:-1] = counts[1 : 2 * len(starts)]
    lengths[-1] = (last + 1) * height - stops[-1]
    values = _ALTERNATING[: len(lengths)]
    if len(values) < len(lengths):  # more runs than the table holds
        values = (np.arange(len(lengths)) & 1).astype(np.uint8)
    drawn = np.repeat(values, lengths).reshape(-1, height).T
    if (starts // height == (stops - 1) // height).all():  # no run leaves its column
        top, bottom = int((starts % height).min()), int(((stops - 1) % height).max()) + 1
    else:
        top, bottom = 0, height
    if flip:
        mask[top:bottom, width - last - 1 : width - first] = drawn[top:bottom, ::-1]
    else:
        mask[top:bottom, first : last + 1] = drawn[top:bottom]


#: 0, 1, 0, 1, ...: the values of an RLE's runs (a longer RLE makes its own).
_ALTERNATING = np.zeros(1 << 16, dtype=np.uint8)
_ALTERNATING[1::2] = 1


def rle_counts(counts: str | bytes) -> np.ndarray:
    """The run lengths of a compressed COCO RLE string (pycocotools' ``rleFrString``: each
    count in 5-bit groups of characters from ``0``, ``0x20`` marking more, ``0x10`` the sign
    of the last; from the fourth on, a difference from the count two before)."""
    chars = np.frombuffer(counts.encode() if isinstance(counts, str) else counts, np.uint8)
    chars = chars.astype(np.int64) - 48
    if not len(chars):
        return np.zeros(0, dtype=np.int64)
    last = (chars & 0x20) == 0
    first = np.flatnonzero(np.concatenate(([True], last[:-1])))  # each count's first char
    value = np.cumsum(np.concatenate(([0], last[:-1])))  # which count each char is of
    shift = 5 * (np.arange(len(chars)) - first[value])
    values = np.add.reduceat((chars & 0x1F) << shift, first)
    negative = np.flatnonzero(last & ((chars & 0x10) != 0))
    values[value[negative]] -= np.left_shift(1, shift[negative] + 5)
    values[3::2] = np.cumsum(values[1::2])[1:]
    values[4::2] = np.cumsum(values[2::2])[1:]
    return values
