"""Helpers of the detection shard tests: every target of a split by image id, hand-written
tar records, and the comparison of two DataModules image by image."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torchvision.transforms import v2

from datamodules import DetectionDataModule


def by_image_id(spec: Any, split: str = "train", **kwargs: Any) -> tuple[DetectionDataModule, dict]:
    """A DataModule of ``spec`` (no flips, masks on) and ``{image_id: (image, target)}`` of
    ``split``."""
    kwargs = {
        "val_split": 0, "batch_size": 3, "num_workers": 0, "shuffle": False, "masks": True,
        "group_by_aspect_ratio": False, "transforms": v2.Identity(), **kwargs,
    }  # fmt: skip
    dm = DetectionDataModule(spec, **kwargs)
    dm.setup("fit")
    found = {}
    for images, targets in dm.make_loader(split):
        for image, target in zip(images, targets, strict=True):
            found[target["image_id"]] = (image, target)
    return dm, found


def assert_same(expected: dict, got: dict) -> None:
    """The same images, and targets equal field by field (boxes, labels, masks, crowd...)."""
    assert sorted(got) == sorted(expected)
    for image_id, (image, target) in expected.items():
        other_image, other = got[image_id]
        assert torch.equal(image, other_image), image_id
        assert sorted(other) == sorted(target), image_id
        for key, value in target.items():
            if torch.is_tensor(value):
                assert torch.equal(value, other[key]), (image_id, key)
            else:
                assert value == other[key], (image_id, key)


def png(width: int = 16, height: int = 12, shade: int = 90) -> bytes:
    data = io.BytesIO()
    Image.new("RGB", (width, height), (shade, 10, 10)).save(data, "PNG")
    return data.getvalue()


def write_tar(path: Path, members: list[tuple[str, bytes]]) -> Path:
    """A tar of ``(name, bytes)`` members, in order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for name, body in members:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return path


def boxes_json(labels: list[Any], **extra: Any) -> bytes:
    """A record's JSON: a box per label."""
    boxes = [[1.0 + k, 2.0, 9.0 + k, 10.0] for k in range(len(labels))]
    return json.dumps({"boxes": boxes, "labels": labels, **extra}).encode()
