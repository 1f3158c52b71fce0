"""Instance masks of detection objects, decoded only when asked (``masks=True``).

COCO polygons, uncompressed RLE (``counts`` a list) and compressed RLE (``counts`` a string)
decode exactly as pycocotools' ``COCO.annToMask`` decodes them (through ``pycocotools.mask``,
the ``detection`` extra); YOLO ``-seg`` polygons are COCO polygons in pixels. An object
without a segmentation (a plain box, VOC's objects) gets its box, filled, as its mask.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["object_mask", "require_pycocotools"]


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
    if segmentation is None:
        mask = np.zeros((height, width), dtype=np.uint8)
        x1, y1, x2, y2 = (int(round(float(v))) for v in box)
        mask[max(y1, 0) : max(y2, 0), max(x1, 0) : max(x2, 0)] = 1
        return mask
    if isinstance(segmentation, list):  # polygons: merged into one RLE, as annToRLE
        rle = coco.merge(coco.frPyObjects(segmentation, height, width))
    elif isinstance(segmentation.get("counts"), list):  # uncompressed RLE
        rle = coco.frPyObjects(segmentation, height, width)
    else:
        rle = dict(segmentation)
        if isinstance(rle["counts"], str):
            rle["counts"] = rle["counts"].encode()
    return np.ascontiguousarray(coco.decode(rle), dtype=np.uint8)
