"""The lone-flip path: a batch of detection samples built already flipped.

Where a split's transform is a lone ``v2.RandomHorizontalFlip`` (the default in training) or
none (evaluation), :class:`~datamodules.detection.batches.DetectionBatchView` does not call the
transform. :func:`flipped_samples` decodes each image and mirrors it in one copy where the
flip's draw says so; the targets of the whole batch are then built in one pass of NumPy over
the index's arrays (boxes mirrored, the ``crowd`` rule applied, clamped to each image, those
left without area dropped and counted), and split into one dict per image. The samples equal
the transform's, key by key (tested in ``tests/datamodules/detection/test_batches.py``); the
per-image work left is wrapping the tensors.

Two of the box helpers here, :func:`clamped_boxes` and :func:`box_tensor`, are also what the
generic path's sanitiser uses.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

from datamodules.imaging.decoding import decode_image_bytes

__all__ = [
    "NO_BOXES",
    "box_tensor",
    "clamped_boxes",
    "flipped_boxes",
    "flipped_samples",
    "lone_flip",
]

#: No boxes: what an image without crowd objects has in ``crowd_boxes`` (copied for each).
NO_BOXES = np.zeros((0, 4), dtype=np.float32)

#: An XYXY box tensor whose metadata :func:`box_tensor` gives others.
_XYXY = tv_tensors.BoundingBoxes(torch.zeros(0, 4), format="XYXY", canvas_size=(1, 1))
#: That metadata (format, canvas size and whatever else this torchvision keeps, such as its
#: clamping mode), copied onto each new box tensor.
_XYXY_METADATA = dict(vars(_XYXY))


def lone_flip(transform: Any) -> float | None:
    """``p`` of a transform that is only a ``v2.RandomHorizontalFlip``, 0.0 for no transform,
    None for any other."""
    if transform is None:
        return 0.0
    if type(transform) is v2.RandomHorizontalFlip:
        return float(transform.p)
    return None


def flipped_boxes(boxes: np.ndarray, width: Any) -> np.ndarray:
    """XYXY ``boxes`` mirrored on an image ``width`` wide (a number, or one per box as a
    ``(K, 1)`` array), as ``v2.functional.horizontal_flip`` moves them (``x' = width - x``,
    the corners swapped)."""
    mirrored = np.empty_like(boxes)
    width = np.asarray(width, dtype=np.float32)
    mirrored[:, 0::2] = width - boxes[:, 2::-2]
    mirrored[:, 1::2] = boxes[:, 1::2]
    return mirrored


def clamped_boxes(boxes: np.ndarray, height: Any, width: Any) -> tuple[np.ndarray, ...]:
    """XYXY ``boxes`` clamped to a ``height`` x ``width`` image (numbers, or one per box as
    ``(K, 1)`` arrays), their areas, and which of them keep an area (the rest are dropped,
    counted)."""
    clamped = np.maximum(boxes, np.float32(0))  # np.clip's wrapper costs 4x these ufuncs
    np.minimum(clamped[:, 0::2], np.asarray(width, np.float32), out=clamped[:, 0::2])
    np.minimum(clamped[:, 1::2], np.asarray(height, np.float32), out=clamped[:, 1::2])
    wide, high = clamped[:, 2] - clamped[:, 0], clamped[:, 3] - clamped[:, 1]
    return clamped, wide * high, (wide > 0) & (high > 0)


def box_tensor(values: np.ndarray, height: int, width: int) -> tv_tensors.BoundingBoxes:
    """``values`` (K x 4 XYXY, not shared with anything else) as ``BoundingBoxes`` on a
    ``height`` x ``width`` canvas."""
    boxes = torch.from_numpy(np.ascontiguousarray(values))
    if boxes.ndim != 2:
        boxes = boxes.reshape(-1, 4)
    # What ``tv_tensors.wrap(boxes, like=_XYXY, canvas_size=...)`` gives (tested), in 4 us
    # against its 9 (its dynamo guard and keyword checks): two a sample, on the lone-flip path.
    wrapped = boxes.as_subclass(tv_tensors.BoundingBoxes)
    vars(wrapped).update(_XYXY_METADATA)
    wrapped.canvas_size = (height, width)
    return wrapped


def flipped_samples(
    view: Any, images: list[int], draws: list[float] | None
) -> list[tuple[torch.Tensor, dict[str, Any]]]:
    """The samples of ``images`` (positions in ``view.index``) for a split whose transform is
    a lone horizontal flip (``draws``: the flip's random draws, one per image) or none
    (``draws`` None). ``view``: the split's
    :class:`~datamodules.detection.batches.DetectionBatchView` (its index, ``crowd`` rule,
    ``masks``, ``flip32``, ``encoded`` and ``object_masks``; ``dropped`` counts what goes).

    Images keep the decoder's interleaved layout (strides ``(1, 3 * W, 3)``, as
    ``torchvision.io.decode_jpeg`` gives it), uncopied, or mirrored in one copy.
    """
    index = view.index
    decoded, flips, sizes = [], [], []
    for n, i in enumerate(images):
        data, name = view.encoded(i)
        image = decode_image_bytes(data, name=name, channels_last=True)
        decoded.append(image)
        flips.append(draws is not None and draws[n] < view.flip32)
        sizes.append(image.shape[-2:])
    # The mirrors one after another, once all are decoded: torch's intra-op threads stay awake
    # from one to the next (woken once a batch, not once an image: 3% of an epoch at 0 workers
    # on 2 cores here, where a copy of 1 MB wakes them).
    for n, flip in enumerate(flips):
        if flip:
            decoded[n] = decoded[n].permute(1, 2, 0).flip(1).permute(2, 0, 1)
    where = np.asarray(images, dtype=np.int64)
    starts, stops = index.offsets[where], index.offsets[where + 1]
    counts = stops - starts
    total = int(counts.sum())
    image_of = np.repeat(np.arange(len(images)), counts)
    rows = np.arange(total) + np.repeat(starts - (np.cumsum(counts) - counts), counts)
    boxes, labels, crowd = index.boxes[rows], index.labels[rows], index.crowd[rows]
    hw = np.asarray(sizes, dtype=np.float32).reshape(-1, 2)[image_of]
    height, width = hw[:, 0:1], hw[:, 1:2]
    placed = boxes
    if any(flips):
        mirror = np.asarray(flips)[image_of]
        placed = boxes.copy()
        placed[mirror] = flipped_boxes(boxes[mirror], width[mirror])
    taken = crowd if view.crowd != "keep" else np.zeros(total, dtype=bool)
    clamped, area, keep = clamped_boxes(placed, height, width)
    dropped = ~keep & ~taken
    if dropped.any():
        view.dropped += int(dropped.sum())
    chosen = keep & ~taken
    clamped, area, labels = clamped[chosen], area[chosen], labels[chosen] + 1
    iscrowd, kept_rows, kept_boxes = crowd[chosen].astype(np.int64), rows[chosen], boxes[chosen]
    ends = np.cumsum(np.bincount(image_of[chosen], minlength=len(images)))
    if view.crowd == "ignore":
        crowd_placed = placed[taken]
        crowd_ends = np.cumsum(np.bincount(image_of[taken], minlength=len(images)))
    samples = []
    for n, i in enumerate(images):
        h, w = sizes[n]
        start, end = (int(ends[n - 1]) if n else 0), int(ends[n])
        target: dict[str, Any] = {"image_id": int(index.image_ids[i])}
        if view.crowd == "ignore":
            first, last = (int(crowd_ends[n - 1]) if n else 0), int(crowd_ends[n])
            placed_here = crowd_placed[first:last].copy()
            target["crowd_boxes"] = box_tensor(placed_here, h, w)
        target["boxes"] = box_tensor(clamped[start:end].copy(), h, w)
        target["labels"] = torch.from_numpy(labels[start:end].copy())
        target["iscrowd"] = torch.from_numpy(iscrowd[start:end].copy())
        if view.masks:
            target["masks"] = view.object_masks(
                kept_rows[start:end], kept_boxes[start:end], h, w, flip=flips[n]
            )
        target["area"] = torch.from_numpy(area[start:end].copy())
        samples.append((decoded[n], target))
    return samples
