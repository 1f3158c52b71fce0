"""Tiny segmentation datasets written in fixtures with PIL: image / mask folders and a Pascal
VOC root (palette PNG masks with 255 borders).

In the folder fixtures sample ``i`` is identifiable from its batch: its image's red channel is
``10 * i`` everywhere and its mask holds class ``i % CLASSES`` left of column ``SPLIT_COLUMN``
and ``i`` from there on, so the right-most mask column names the sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from torchvision.transforms import v2

#: Samples of the contract fixture (ids 0 .. 22).
CONTRACT_PAIRS = 23
#: Classes of the left part of each mask.
CLASSES = 3
#: The column from which a mask holds its sample's id.
SPLIT_COLUMN = 5


def sample_arrays(i: int, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The image ``(H, W, 3)`` and mask ``(H, W)`` of sample ``i``."""
    image = np.zeros((height, width, 3), dtype=np.uint8)
    image[..., 0] = 10 * i
    image[..., 1] = np.arange(width, dtype=np.uint8)[None, :] * 3
    image[..., 2] = np.arange(height, dtype=np.uint8)[:, None] * 3
    mask = np.full((height, width), i % CLASSES, dtype=np.uint8)
    mask[:, SPLIT_COLUMN:] = i
    return image, mask


def write_pairs(
    root: Path, count: int, sizes: Any = None, image_ext: str = ".png", first: int = 0
) -> tuple[Path, Path]:
    """``root/images/s{i:03d}{image_ext}`` and ``root/masks/s{i:03d}.png`` for ``i`` in
    ``first .. first + count - 1``; ``sizes(i) -> (h, w)`` (default 12 x 16)."""
    images, masks = root / "images", root / "masks"
    images.mkdir(parents=True, exist_ok=True)
    masks.mkdir(parents=True, exist_ok=True)
    for i in range(first, first + count):
        h, w = sizes(i) if sizes is not None else (12, 16)
        image, mask = sample_arrays(i, h, w)
        Image.fromarray(image).save(images / f"s{i:03d}{image_ext}", quality=100)
        Image.fromarray(mask, mode="L").save(masks / f"s{i:03d}.png")
    return images, masks


def mask_ids(batch: Any) -> list[int]:
    """The sample ids of a batch of the folder fixtures (any format, any width: the last
    column of a row that is not padding)."""
    masks = batch["mask"] if "mask" in batch else batch["labels"]
    ids = []
    for mask in masks:
        row = mask[0]
        ids.append(int(row[row != 255][-1]))
    return ids


def write_voc(root: Path) -> Path:
    """A VOC root: 6 ids (``2007_00000{k}``), train 0-3, val 4-5; palette masks with class
    ``k % 4`` in a square, 255 on its border, 0 elsewhere."""
    for folder in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    palette = [0, 0, 0, 128, 0, 0, 0, 128, 0, 128, 128, 0] + [0] * (3 * 251) + [224, 224, 192]
    ids = [f"2007_00000{k}" for k in range(6)]
    for k, sample in enumerate(ids):
        image = np.full((20, 24, 3), 30 * k, dtype=np.uint8)
        Image.fromarray(image).save(root / "JPEGImages" / f"{sample}.jpg", quality=95)
        mask = np.zeros((20, 24), dtype=np.uint8)
        mask[4:12, 4:12] = 255
        mask[5:11, 5:11] = k % 4
        png = Image.fromarray(mask, mode="P")
        png.putpalette(palette)
        png.save(root / "SegmentationClass" / f"{sample}.png")
    lists = root / "ImageSets" / "Segmentation"
    (lists / "train.txt").write_text("\n".join(ids[:4]) + "\n")
    (lists / "val.txt").write_text("\n".join(ids[4:]) + "\n")
    return root


def contract_datamodule(root: str, **kwargs: Any) -> Any:
    """A SegmentationDataModule over the contract pairs (no transforms: ids stay readable)."""
    from datamodules import SegmentationDataModule

    kwargs = {"batch_size": 4, "num_workers": 0, **kwargs}
    pair = (str(Path(root) / "images"), str(Path(root) / "masks"))
    return SegmentationDataModule(pair, transforms=v2.Identity(), **kwargs)


def ddp_datamodule(root: str) -> tuple[Any, Any]:
    """The DataModule each DDP process builds, and its batch ids."""
    return contract_datamodule(root, batch_size=3, val_split=5), mask_ids
