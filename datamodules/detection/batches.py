"""Detection batches: images decoded, targets built by the rules, transformed jointly.

:class:`DetectionBatchView` turns a batch of split positions into what torchvision's
detection models take: a list of ``uint8`` ``(3, H, W)`` images and a list of target dicts
(``boxes`` a ``tv_tensors.BoundingBoxes`` in XYXY pixels, ``labels`` int64, ``image_id``,
``iscrowd``, ``area``; ``crowd_boxes`` with ``crowd="ignore"``). Images decode through the
image kinds' decoder (:mod:`datamodules.imaging.decoding`). A torchvision.transforms.v2
transform gets ``(image, target)`` and moves the boxes with the pixels; afterwards boxes are
clamped to the image and those left without area are dropped (counted in ``dropped``). With
masks, a DataLoader worker keeps glibc's mmap threshold fixed (:mod:`datamodules.core.heap`),
so that its memory stays flat over an epoch.

Labels in this format are ``1 +`` the index into ``classes``: torchvision's detection models
keep label 0 for the background (build them with ``num_classes=len(classes) + 1``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info
from torchvision import tv_tensors
from torchvision.transforms import v2

from datamodules.core.heap import keep_mmap_threshold
from datamodules.core.views import SplitView
from datamodules.detection.arrays import AnnotationIndex
from datamodules.detection.collate import collate_torchvision
from datamodules.detection.flip_path import (
    NO_BOXES,
    box_tensor,
    clamped_boxes,
    flipped_samples,
    lone_flip,
)
from datamodules.detection.masks import object_mask, object_masks, require_pycocotools
from datamodules.detection.scaling import DecodePlanner, scale_segmentation
from datamodules.imaging.decoding import read_image_scratch

__all__ = ["CROWD", "DetectionBatchView", "ResizeMinMax", "default_transforms"]

#: What ``crowd=`` accepts.
CROWD = ("ignore", "drop", "keep")


class ResizeMinMax:
    """Resizes image and boxes so that the short side is ``min_size`` and the long side at
    most ``max_size`` (torchvision's ``GeneralizedRCNNTransform`` rule).

    Args:
        min_size: The short side's length (None: only ``max_size`` bounds the long side).
        max_size: The long side's bound (None: no bound).
    """

    def __init__(self, min_size: int | None, max_size: int | None) -> None:
        self.min_size, self.max_size = min_size, max_size

    def size(self, height: int, width: int) -> tuple[int, int]:
        """The output (height, width) of an image of this size."""
        short, long = min(height, width), max(height, width)
        scale = self.min_size / short if self.min_size is not None else 1.0
        if self.max_size is not None and long * scale > self.max_size:
            scale = self.max_size / long
        return max(1, round(height * scale)), max(1, round(width * scale))

    def __call__(self, image: Any, target: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        height, width = image.shape[-2:]
        size = self.size(height, width)
        if size == (height, width):
            return image, target
        return v2.Resize(size, antialias=True)(image, target)

    def __repr__(self) -> str:
        return f"ResizeMinMax(min_size={self.min_size}, max_size={self.max_size})"


def default_transforms(
    train: bool, min_size: int | None, max_size: int | None
) -> Callable[..., Any] | None:
    """The default joint transform: resize by ``min_size`` / ``max_size`` (when given), and
    a horizontal flip with probability 0.5 in training."""
    steps: list[Any] = []
    if min_size is not None or max_size is not None:
        steps.append(ResizeMinMax(min_size, max_size))
    if train:
        steps.append(v2.RandomHorizontalFlip(0.5))
    if not steps:
        return None
    return steps[0] if len(steps) == 1 else v2.Compose(steps)


class DetectionBatchView(SplitView):
    """A split of an :class:`~datamodules.detection.arrays.AnnotationIndex`, a batch a call.

    Args:
        index: The split's annotations.
        indices: The split's positions in ``index``.
        transform: A joint v2 transform of ``(image, target)``, or None.
        crowd: ``"ignore"`` (crowd objects in ``crowd_boxes``, not in ``boxes``), ``"drop"``
            or ``"keep"`` (in ``boxes``, ``iscrowd`` 1).
        collate: Turns the list of ``(image, target)`` samples into the batch
            (:mod:`~datamodules.detection.collate`; default torchvision's lists).
        masks: Add ``masks``, a ``tv_tensors.Mask`` (K, H, W) ``uint8`` of the objects in
            ``boxes`` (:mod:`~datamodules.detection.masks`; needs pycocotools).
        decode: ``"scaled"``: JPEGs the pipeline shrinks 2x or more decode at a reduced scale,
            boxes and masks scaled with them (:mod:`~datamodules.detection.scaling`);
            ``"full"``: every image in full.
        letterbox: ``"yolo"``'s letterbox side, the output size ``"scaled"`` plans for.
        read_image: Reads image ``i`` of ``index`` from a shard (a
            :class:`~datamodules.detection.shard_index.ShardImages`; None: from its file).
    """

    def __init__(
        self,
        index: AnnotationIndex,
        indices: torch.Tensor,
        transform: Callable[..., Any] | None,
        *,
        crowd: str = "ignore",
        collate: Callable[[list[Any]], Any] = collate_torchvision,
        masks: bool = False,
        decode: str = "full",
        letterbox: int | None = None,
        read_image: Any = None,
    ) -> None:
        super().__init__(indices, transform)
        self.decoder = DecodePlanner(transform, decode, letterbox)
        self.read_image = read_image
        self.index = index
        self.crowd = crowd
        self.collate = collate
        self.masks = masks
        if masks:
            require_pycocotools()
        #: The flip's probability where the transform is a lone ``v2.RandomHorizontalFlip``
        #: (the default in training), 0.0 where there is none: such a split takes the path of
        #: :mod:`~datamodules.detection.flip_path`; None for any other transform.
        self.flip = lone_flip(transform) if not self.decoder.sizes else None
        #: ``flip`` as the float32 that ``torch.rand(1) < p`` compares with.
        self.flip32 = float(np.float32(self.flip)) if self.flip is not None else None
        #: Boxes dropped in this process because a transform left them without area.
        self.dropped = 0

    def sample(self, i: int, draw: float | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        """Image ``i`` of the index and its target, transformed.

        ``draw``: for a lone flip, the flip's random draw, taken already (``__getitem__`` takes
        a batch's draws in one ``torch.rand(n)``: the same numbers, in the same order, as ``n``
        calls of ``torch.rand(1)``); None: drawn here."""
        if self.flip is not None:
            if self.transform is None:
                return flipped_samples(self, [i], None)[0]
            draws = [torch.rand(1).item() if draw is None else draw]
            return flipped_samples(self, [i], draws)[0]
        index = self.index
        image, output, full = self.decoder.decode_data(*self.encoded(i))
        height, width = image.shape[-2:]
        boxes, labels, crowd = index.objects(i)
        if full is not None:  # the exact factors the DCT scale applied (it rounds sizes up)
            boxes = boxes * np.array([width / full[1], height / full[0]] * 2, dtype=np.float32)
        target, boxes, labels, rows, crowd = self._target(i, boxes, labels, crowd, (height, width))
        target["boxes"] = box_tensor(boxes, height, width)
        target["labels"] = torch.from_numpy(labels + 1)
        target["iscrowd"] = torch.from_numpy(crowd.astype(np.int64))
        if self.masks:
            target["masks"] = self.object_masks(rows, boxes, height, width, full, output)
        if output is not None:
            image, target = self.decoder.finish(tv_tensors.Image(image), target, output)
        elif self.transform is not None:
            image, target = self.transform(tv_tensors.Image(image), target)
        return self._sanitized(image, target)

    def _target(
        self, i: int, boxes: np.ndarray, labels: np.ndarray, crowd: np.ndarray,
        size: tuple[int, int],
    ) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """Image ``i``'s target so far (``image_id``, ``crowd_boxes`` under ``"ignore"``), and
        its boxes, labels, rows and crowd flags once the ``crowd`` rule has taken out what it
        takes out. ``size``: the image's (height, width).
        """
        height, width = size
        start, stop = self.index.offsets[i : i + 2].tolist()
        rows = np.arange(start, stop)
        target: dict[str, Any] = {"image_id": int(self.index.image_ids[i])}
        if self.crowd == "keep" or not crowd.any():  # nothing to take out
            if self.crowd == "ignore":
                target["crowd_boxes"] = box_tensor(NO_BOXES.copy(), height, width)
            return target, boxes, labels, rows, crowd
        if self.crowd == "ignore":
            target["crowd_boxes"] = box_tensor(boxes[crowd], height, width)
        boxes, labels, rows, crowd = boxes[~crowd], labels[~crowd], rows[~crowd], crowd[~crowd]
        return target, boxes, labels, rows, crowd

    def encoded(self, i: int) -> tuple[bytearray | memoryview, str]:
        """Image ``i``'s encoded bytes (from its shard, or its file) and what errors call it.

        A file's bytes are a view of this thread's scratch buffer
        (:func:`~datamodules.imaging.decoding.read_image_scratch`): decode them before the
        next call."""
        index = self.index
        if self.read_image is not None and index.meta.get("images") == "shards":
            return self.read_image.data(index, i)
        path = index.image_path(i)
        return read_image_scratch(path), path

    def object_masks(
        self,
        rows: np.ndarray,
        boxes: np.ndarray,
        height: int,
        width: int,
        full: tuple[int, int] | None = None,
        size: tuple[int, int] | None = None,
        *,
        flip: bool = False,
    ) -> tv_tensors.Mask:
        """The masks of the objects whose ``boxes`` lie on a ``height`` x ``width`` image.

        ``full``: the size the annotations were made for, when the image was decoded smaller;
        ``size``: draw the masks at this size instead (the size the image is resized to next:
        polygons are scaled to it, RLE decoded in full and resized to it as ``"full"`` would);
        ``flip``: mirror them left-right (only with ``full`` None).
        """
        coco = require_pycocotools()
        index = self.index
        segmentations = [index.segmentation(int(row)) for row in rows]
        if full is None:
            return tv_tensors.Mask(
                torch.from_numpy(object_masks(segmentations, boxes, height, width, coco, flip=flip))
            )
        out_h, out_w = size or (height, width)
        found = []
        for segmentation, box in zip(segmentations, boxes, strict=True):
            if segmentation is None:
                on = box * np.array([out_w / width, out_h / height] * 2, dtype=np.float32)
                found.append(object_mask(None, on, out_h, out_w, coco))
            elif isinstance(segmentation, list):
                polygons = scale_segmentation(segmentation, out_w / full[1], out_h / full[0])
                found.append(object_mask(polygons, box, out_h, out_w, coco))
            else:
                mask = torch.from_numpy(object_mask(segmentation, box, *full, coco))
                resized = v2.functional.resize(
                    mask[None], [out_h, out_w], v2.InterpolationMode.NEAREST
                )
                found.append(resized[0].numpy())
        stacked = np.stack(found) if found else np.zeros((0, out_h, out_w), dtype=np.uint8)
        return tv_tensors.Mask(torch.from_numpy(stacked))

    def _sanitized(self, image: Any, target: dict[str, Any]) -> tuple[torch.Tensor, dict]:
        """The transformed sample with its boxes clamped to the image; boxes left without area
        are dropped with their labels, flags and masks, and counted."""
        height, width = image.shape[-2:]
        boxes = target["boxes"].as_subclass(torch.Tensor).numpy()
        clamped, area, keep = clamped_boxes(boxes, height, width)
        if not keep.all():  # indexing copies (the masks' stack included): only when a box goes
            self.dropped += int((~keep).sum())
            chosen = torch.from_numpy(keep)
            clamped, area = clamped[keep], area[keep]
            target["labels"] = target["labels"][chosen]
            target["iscrowd"] = target["iscrowd"][chosen]
            if "masks" in target:
                target["masks"] = target["masks"].as_subclass(torch.Tensor)[chosen]
        target["boxes"] = box_tensor(clamped, height, width)
        if "masks" in target and type(target["masks"]) is not tv_tensors.Mask:
            target["masks"] = tv_tensors.Mask(target["masks"])
        target["area"] = torch.from_numpy(area)
        if "crowd_boxes" in target:
            crowd = target["crowd_boxes"].as_subclass(torch.Tensor)
            target["crowd_boxes"] = tv_tensors.BoundingBoxes(
                crowd, format="XYXY", canvas_size=(height, width)
            )
        return image.as_subclass(torch.Tensor), target

    def __getitem__(self, batch: torch.Tensor) -> Any:
        if self.masks and get_worker_info() is not None:  # freed masks leave the heap
            keep_mmap_threshold()
        rows = self.rows(batch).tolist()
        if self.flip is None:
            return self.collate([self.sample(i) for i in rows])
        # A lone flip (or none): the batch's draws in one call, the same numbers in the same
        # order as one ``torch.rand(1)`` a sample (tested), and its targets in one pass.
        draws = torch.rand(len(rows)).tolist() if self.transform is not None else None
        return self.collate(flipped_samples(self, rows, draws))
