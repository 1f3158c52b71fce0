"""The "hf" batches equal what transformers' DetrImageProcessor makes of the same images and
annotations; the "yolo" batches are Ultralytics' letterbox and (M, 6) targets."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torchvision.transforms import v2

from datamodules import DetectionDataModule
from tests.datamodules.detection.detection_data import write_coco


def first_batch(tmp_path: Path, **kwargs) -> tuple[DetectionDataModule, object]:
    dm = DetectionDataModule(
        write_coco(tmp_path), batch_size=4, num_workers=0, val_split=0, shuffle=False,
        group_by_aspect_ratio=False, transforms=v2.Identity(), **kwargs,
    )  # fmt: skip
    return dm, next(iter(dm.train_dataloader()))


def test_hf_batches_equal_detr_image_processor(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    dm, batch = first_batch(tmp_path, batch_format="hf", crowd="keep")
    assert set(batch) == {"pixel_values", "pixel_mask", "labels"}
    index = dm.indexes["train"]
    images, annotations = [], []
    for i in range(4):  # image ids 1, 2, 3, 5; image 3 holds a crowd object
        image, target = dm.view("train").sample(i)
        images.append(image.numpy())
        boxes, labels, crowd = index.objects(i)
        annotations.append({
            "image_id": int(index.image_ids[i]),
            "annotations": [
                {"bbox": [float(x1), float(y1), float(x2 - x1), float(y2 - y1)],
                 "category_id": int(label), "area": float((x2 - x1) * (y2 - y1)),
                 "iscrowd": int(c)}
                for (x1, y1, x2, y2), label, c in zip(boxes, labels, crowd, strict=True)
            ],
        })  # fmt: skip
    processor = transformers.DetrImageProcessor(
        do_resize=False, do_rescale=False, do_normalize=False, do_convert_annotations=True
    )
    expected = processor(
        images=images, annotations=annotations, return_tensors="pt",
        input_data_format="channels_first",
    )  # fmt: skip
    assert torch.equal(batch["pixel_values"], expected["pixel_values"])
    assert torch.equal(batch["pixel_mask"], expected["pixel_mask"])
    assert len(batch["labels"]) == 4
    for ours, theirs in zip(batch["labels"], expected["labels"], strict=True):
        assert set(ours) == set(theirs)
        for key in theirs:
            assert torch.allclose(ours[key].double(), theirs[key].double(), atol=1e-6), key
    assert batch["labels"][2]["class_labels"].tolist() == [0]  # its crowd object left out
    on_device = dm.on_after_batch_transfer(batch, 0)  # "hf" normalises, as the processor
    assert on_device["pixel_values"].dtype == torch.float32
    assert float(on_device["pixel_values"].min()) < 0


def test_yolo_batches_are_letterboxed_with_normalised_rows(tmp_path: Path) -> None:
    dm, batch = first_batch(tmp_path, batch_format="yolo", image_size=64)
    images, targets = batch["images"], batch["targets"]
    assert images.shape == (4, 3, 64, 64) and images.dtype == torch.uint8
    # Image 1 (48 x 32): scale 4/3 -> 64 x 43, 10 grey rows above and 11 below.
    assert images[0, :, :10].eq(114).all() and images[0, :, 53:].eq(114).all()
    assert not images[0, :, 10:53].eq(114).all()
    s = 4 / 3
    box = torch.tensor([2 * s, 3 * s + 10, 12 * s, 15 * s + 10]) / 64
    first = [0, 1, (box[0] + box[2]) / 2, (box[1] + box[3]) / 2, box[2] - box[0], box[3] - box[1]]
    assert torch.allclose(targets[0], torch.tensor(first, dtype=torch.float32), atol=1e-5)
    # Image 3's crowd object is left out: 2 + 1 + 1 + 1 rows for images 1, 2, 3, 5.
    assert targets[:, 0].tolist() == [0, 0, 1, 2, 3]
    assert dm.num_classes == 3
    floats = dm.on_after_batch_transfer(batch, 0)["images"]
    assert float(floats.max()) <= 1.0 and float(floats.min()) >= 0.0


def test_image_size_is_only_for_yolo(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="image_size"):
        DetectionDataModule(str(tmp_path / "a.json"), image_size=64)
