"""The three batch formats of detection: torchvision's, transformers' DETR family's, YOLO's.

Each takes the transformed samples of a batch, ``(image, target)`` pairs (``uint8``
``(3, H, W)`` images, targets as :class:`~datamodules.detection.batches.DetectionBatchView`
builds them, labels ``1 +`` the class index), and returns the batch:

* ``"torchvision"``: ``(images, targets)``, the lists themselves;
* ``"hf"``: what ``DetrImageProcessor`` gives for these images (with ``do_resize``,
  ``do_rescale`` and ``do_normalize`` off): ``pixel_values`` ``uint8`` padded at the bottom and
  right to the batch's largest height and width, ``pixel_mask`` (1 on the image), and
  ``labels``, a dict per image (``class_labels`` the class index, ``boxes`` centre x, y,
  width, height relative to the padded size, ``image_id``, ``area``, ``iscrowd``, ``size``,
  ``orig_size``), crowd objects left out as the processor leaves them out;
* ``"yolo"``: Ultralytics' letterbox: ``images`` ``uint8`` ``(B, 3, S, S)``, each image
  resized to fit ``S`` and centred on grey (114), and ``targets`` ``(M, 6)`` float32 rows
  ``[batch_index, class, cx, cy, w, h]`` normalised to ``S``; crowd objects left out.
"""

from __future__ import annotations

from typing import Any

import torch
from torchvision.transforms.v2 import functional as F

__all__ = ["BATCH_FORMATS", "collate_hf", "collate_torchvision", "collate_yolo", "letterbox"]

#: What ``batch_format=`` accepts.
BATCH_FORMATS = ("torchvision", "hf", "yolo")

Sample = tuple[torch.Tensor, dict[str, Any]]


def collate_torchvision(samples: list[Sample]) -> tuple[list[torch.Tensor], list[dict]]:
    """``(images, targets)``: the lists torchvision's detection models take."""
    return [image for image, _ in samples], [target for _, target in samples]


def _plain(target: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The non-crowd boxes (plain XYXY tensor), their class indices and areas."""
    keep = target["iscrowd"] == 0
    boxes = target["boxes"].as_subclass(torch.Tensor)[keep].float()
    return boxes, target["labels"][keep] - 1, target["area"][keep].float()


def collate_hf(samples: list[Sample]) -> dict[str, Any]:
    """``pixel_values``, ``pixel_mask`` and ``labels`` as DETR-family processors give them."""
    height = max(int(image.shape[-2]) for image, _ in samples)
    width = max(int(image.shape[-1]) for image, _ in samples)
    pixels = torch.zeros((len(samples), 3, height, width), dtype=torch.uint8)
    mask = torch.zeros((len(samples), height, width), dtype=torch.int64)
    labels = []
    scale = torch.tensor([width, height, width, height], dtype=torch.float32)
    for row, (image, target) in enumerate(samples):
        h, w = int(image.shape[-2]), int(image.shape[-1])
        pixels[row, :, :h, :w] = image
        mask[row, :h, :w] = 1
        boxes, classes, area = _plain(target)
        centred = torch.stack(
            [
                (boxes[:, 0] + boxes[:, 2]) / 2,
                (boxes[:, 1] + boxes[:, 3]) / 2,
                boxes[:, 2] - boxes[:, 0],
                boxes[:, 3] - boxes[:, 1],
            ],
            dim=1,
        )
        labels.append({
            "size": torch.tensor([height, width]),
            "image_id": torch.tensor([int(target["image_id"])]),
            "class_labels": classes,
            "boxes": centred / scale,
            "area": area,
            "iscrowd": torch.zeros(len(classes), dtype=torch.int64),
            "orig_size": torch.tensor([h, w]),
        })  # fmt: skip
    return {"pixel_values": pixels, "pixel_mask": mask, "labels": labels}


def letterbox(image: torch.Tensor, size: int) -> tuple[torch.Tensor, float, int, int]:
    """Ultralytics' ``LetterBox`` (centred, grey 114): the ``(3, size, size)`` image, the scale
    and the left and top padding."""
    h, w = int(image.shape[-2]), int(image.shape[-1])
    ratio = min(size / h, size / w)
    new_h, new_w = round(h * ratio), round(w * ratio)
    if (new_h, new_w) != (h, w):
        image = F.resize(image, [new_h, new_w], antialias=True)
    left, top = round((size - new_w) / 2 - 0.1), round((size - new_h) / 2 - 0.1)
    out = torch.full((3, size, size), 114, dtype=torch.uint8)
    out[:, top : top + new_h, left : left + new_w] = image
    return out, ratio, left, top


def collate_yolo(samples: list[Sample], size: int) -> dict[str, torch.Tensor]:
    """Letterboxed ``images`` and ``targets`` rows ``[batch_index, class, cx, cy, w, h]``."""
    images = torch.empty((len(samples), 3, size, size), dtype=torch.uint8)
    rows = []
    for i, (image, target) in enumerate(samples):
        images[i], ratio, left, top = letterbox(image, size)
        boxes, classes, _ = _plain(target)
        boxes = boxes * ratio + torch.tensor([left, top, left, top], dtype=torch.float32)
        row = torch.empty((len(classes), 6), dtype=torch.float32)
        row[:, 0] = i
        row[:, 1] = classes.float()
        row[:, 2] = (boxes[:, 0] + boxes[:, 2]) / 2 / size
        row[:, 3] = (boxes[:, 1] + boxes[:, 3]) / 2 / size
        row[:, 4] = (boxes[:, 2] - boxes[:, 0]) / size
        row[:, 5] = (boxes[:, 3] - boxes[:, 1]) / size
        rows.append(row)
    return {"images": images, "targets": torch.cat(rows) if rows else torch.zeros((0, 6))}
