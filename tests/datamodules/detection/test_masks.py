"""masks=True: each object's mask equals pycocotools' annToMask (polygons, uncompressed and
compressed RLE), moves with the image under a v2 transform, and trains a Mask R-CNN."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.transforms import v2

from datamodules import DetectionDataModule
from tests.datamodules.detection.detection_data import write_coco

coco_api = pytest.importorskip("pycocotools.coco")
mask_api = pytest.importorskip("pycocotools.mask")


def with_compressed_rle(tmp_path: Path) -> Path:
    """The fixture, one polygon turned into a compressed RLE (a string of counts)."""
    path = write_coco(tmp_path)
    data = json.loads(path.read_text())
    ann = data["annotations"][1]  # image 2 (32 wide, 48 high)
    rle = mask_api.encode(
        np.asfortranarray(np.pad(np.ones((12, 10), np.uint8), ((3, 33), (2, 20))))
    )
    ann["segmentation"] = {"size": rle["size"], "counts": rle["counts"].decode()}
    path.write_text(json.dumps(data))
    return path


def kind_of(segmentation: object) -> str:
    if isinstance(segmentation, list):
        return "polygons"
    assert isinstance(segmentation, dict)
    return "compressed RLE" if isinstance(segmentation["counts"], str) else "RLE"


def test_masks_equal_pycocotools_ann_to_mask(tmp_path: Path) -> None:
    path = with_compressed_rle(tmp_path)
    dm = DetectionDataModule(
        path, masks=True, crowd="keep", transforms=v2.Identity(), val_split=0, num_workers=0
    )
    dm.setup()
    coco = coco_api.COCO(str(path))
    view = dm.view("train")
    kinds = set()
    for i in range(dm.split_size("train")):
        image, target = view.sample(i)
        index = dm.indexes["train"]
        ids = index.annotation_ids[index.rows(i)].tolist()
        assert target["masks"].shape == (len(ids), *image.shape[-2:])
        for k, ann_id in enumerate(ids):
            ann = coco.anns[ann_id]
            segm = ann.get("segmentation")
            if not segm:  # a box without a segmentation: the box filled
                x1, y1, x2, y2 = (round(v) for v in target["boxes"][k].tolist())
                expected = np.zeros(image.shape[-2:], np.uint8)
                expected[y1:y2, x1:x2] = 1
            else:
                expected = coco.annToMask(ann)
                kinds.add(kind_of(segm))
            assert np.array_equal(target["masks"][k].numpy(), expected), ann_id
    assert kinds == {"polygons", "RLE", "compressed RLE"}


def test_masks_move_with_a_flip_and_train_a_mask_rcnn(tmp_path: Path) -> None:
    from torchvision.models.detection import MaskRCNN

    from tests.datamodules.detection.test_datamodule import tiny_detector

    dm = DetectionDataModule(
        write_coco(tmp_path), masks=True, transforms=v2.RandomHorizontalFlip(1.0),
        val_split=0, num_workers=0, batch_size=4, shuffle=False,
    )  # fmt: skip
    dm.setup()
    image, target = dm.view("train").sample(0)  # image 1, 48 wide: box x 2..12 -> 36..46
    assert target["masks"][0].sum() == 120 and target["masks"][0][3:15, 36:46].all()
    images, targets = dm.on_after_batch_transfer(next(iter(dm.train_dataloader())), 0)
    detector = tiny_detector(dm.num_classes)
    model = MaskRCNN(
        detector.backbone, num_classes=dm.num_classes, min_size=32, max_size=64,
        rpn_anchor_generator=detector.rpn.anchor_generator,
        box_roi_pool=detector.roi_heads.box_roi_pool,
    ).train()  # fmt: skip
    losses = model(images, targets)
    assert "loss_mask" in losses and torch.isfinite(losses["loss_mask"])


def test_masks_only_in_the_torchvision_format(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="masks"):
        DetectionDataModule(str(tmp_path / "a.json"), masks=True, batch_format="hf")
