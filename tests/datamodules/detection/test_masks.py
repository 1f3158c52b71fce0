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


def random_segmentation(rng: np.random.Generator, height: int, width: int, case: int) -> object:
    """Polygons (one or two; some with a repeated point, points on the half pixel or outside
    the image) or an RLE, compressed or not, of random pixels."""
    if case % 4 == 3:
        pixels = (rng.random((height, width)) < rng.random()).astype(np.uint8)
        rle = mask_api.encode(np.asfortranarray(pixels))
        if case % 8 == 3:
            return {"size": [height, width], "counts": rle["counts"].decode()}
        flat = np.concatenate(([0], pixels.reshape(-1, order="F"), [2]))
        changes = np.flatnonzero(flat[1:] != flat[:-1])  # run boundaries, zeros first
        counts = np.diff(np.concatenate(([0], changes)))
        return {"size": [height, width], "counts": counts.tolist()}
    polygons = []
    for _ in range(int(rng.integers(1, 3))):
        points = rng.uniform(-10, max(height, width) + 10, (int(rng.integers(3, 9)), 2))
        if case % 5 == 0:
            points = np.round(points * 10) / 10
        if case % 7 == 0:
            points[1] = points[0]  # a repeated point
        if case % 11 == 0:
            points = np.round(points) + 0.5
        polygons.append(points.reshape(-1).tolist())
    return polygons


def test_drawn_masks_equal_pycocotools_decode_also_mirrored() -> None:
    from datamodules.detection.masks import fill_object_mask

    rng = np.random.default_rng(7)
    kinds = set()
    for case in range(600):
        height, width = (int(v) for v in rng.integers(1, 70, 2))
        segmentation = random_segmentation(rng, height, width, case)
        if isinstance(segmentation, list):
            rle = mask_api.merge(mask_api.frPyObjects(segmentation, height, width))
        elif isinstance(segmentation["counts"], list):
            rle = mask_api.frPyObjects(segmentation, height, width)
        else:
            rle = {**segmentation, "counts": segmentation["counts"].encode()}
        expected = mask_api.decode(rle)
        kinds.add(kind_of(segmentation))
        for flip in (False, True):
            mask = np.zeros((height, width), np.uint8)
            fill_object_mask(mask, segmentation, np.zeros(4), mask_api, flip=flip)
            assert np.array_equal(mask, expected[:, ::-1] if flip else expected), (case, flip)
    assert kinds == {"polygons", "compressed RLE", "RLE"}


def test_an_uncompressed_rle_and_one_of_the_wrong_size() -> None:
    from datamodules.detection.masks import fill_object_mask

    segmentation = {"size": [5, 4], "counts": [6, 2, 3, 2, 7]}  # column-major runs
    mask = np.zeros((5, 4), np.uint8)
    fill_object_mask(mask, segmentation, np.zeros(4), mask_api)
    expected = np.zeros((5, 4), np.uint8)
    expected[1:3, 1:3] = 1  # positions 6, 7 and 11, 12: rows 1-2 of columns 1 and 2
    assert np.array_equal(mask, expected)
    with pytest.raises(ValueError, match="RLE of 20 pixels does not fit an image of 5x5"):
        fill_object_mask(np.zeros((5, 5), np.uint8), segmentation, np.zeros(4), mask_api)
