"""DetectionDataModule: torchvision batches that a torchvision detector trains on, the
crowd / empty rules, joint v2 transforms, splits from the formats, a Trainer run, bad
arguments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torchvision import tv_tensors
from torchvision.models.detection import FasterRCNN
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.ops import MultiScaleRoIAlign
from torchvision.transforms import v2

from datamodules import DetectionDataModule
from tests.datamodules.detection.detection_data import (
    COCO_SIZES,
    write_coco,
    write_voc,
    write_yolo,
)


def coco_dm(tmp_path: Path, **kwargs: Any) -> DetectionDataModule:
    kwargs = {"batch_size": 4, "num_workers": 0, "val_split": 0, **kwargs}
    return DetectionDataModule(write_coco(tmp_path), **kwargs)


def all_targets(dm: DetectionDataModule, split: str = "train") -> dict[int, dict]:
    found = {}
    for images, targets in dm.make_loader(split):
        for image, target in zip(images, targets, strict=True):
            assert image.dtype == torch.uint8 and image.shape[0] == 3
            found[target["image_id"]] = target
    return found


def tiny_detector(num_classes: int) -> FasterRCNN:
    backbone = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU())
    backbone.out_channels = 8
    return FasterRCNN(
        backbone, num_classes=num_classes, min_size=32, max_size=64,
        rpn_anchor_generator=AnchorGenerator(((8, 16),), ((0.5, 1.0, 2.0),)),
        box_roi_pool=MultiScaleRoIAlign(["0"], 7, 2),
    )  # fmt: skip


def test_torchvision_batches_train_a_torchvision_detector(tmp_path: Path) -> None:
    dm = coco_dm(tmp_path, shuffle=False, eval_transforms=None)
    dm.setup("fit")
    assert dm.classes == ["cat", "dog", "zebra"] and dm.num_classes == 4
    images, targets = next(iter(dm.train_dataloader()))
    target = targets[0]
    assert isinstance(target["boxes"], tv_tensors.BoundingBoxes)
    assert target["boxes"].format == tv_tensors.BoundingBoxFormat.XYXY
    assert target["labels"].dtype == torch.int64
    model = tiny_detector(dm.num_classes).train()
    floats, targets = dm.on_after_batch_transfer((images, targets), 0)
    assert floats[0].dtype == torch.float32 and float(floats[0].max()) <= 1.0
    losses = model(floats, targets)
    assert set(losses) == {"loss_classifier", "loss_box_reg", "loss_objectness", "loss_rpn_box_reg"}
    assert all(torch.isfinite(v) for v in losses.values())


def test_targets_are_exact_and_labels_start_at_one(tmp_path: Path) -> None:
    dm = coco_dm(tmp_path, transforms=v2.Identity())
    targets = all_targets(dm)
    assert sorted(targets) == sorted(COCO_SIZES)
    one = targets[1]
    assert one["boxes"].tolist() == [[2, 3, 12, 15], [40, 20, 48, 32]]  # clipped to 48 x 32
    assert one["labels"].tolist() == [2, 2]  # "dog" is classes[1]
    assert one["area"].tolist() == [120.0, 96.0] and one["iscrowd"].tolist() == [0, 0]
    assert targets[6]["boxes"].shape == (0, 4)  # kept: empty="keep"
    assert dm.degenerate_boxes() == {"train": 1}


@pytest.mark.parametrize("crowd", ["ignore", "drop", "keep"])
def test_crowd_rules(tmp_path: Path, crowd: str) -> None:
    target = all_targets(coco_dm(tmp_path, crowd=crowd, transforms=v2.Identity()))[3]
    crowd_box, own_box = [20, 10, 28, 16], [2, 3, 12, 15]
    if crowd == "ignore":
        assert target["boxes"].tolist() == [own_box]
        assert target["crowd_boxes"].tolist() == [crowd_box]
    elif crowd == "drop":
        assert target["boxes"].tolist() == [own_box] and "crowd_boxes" not in target
    else:
        assert target["boxes"].tolist() == [own_box, crowd_box]
        assert target["iscrowd"].tolist() == [0, 1]


def test_empty_drop_leaves_out_train_images_without_objects_but_eval_keeps_them(
    tmp_path: Path,
) -> None:
    # Position 4 is image 6, the one without objects.
    dm = coco_dm(tmp_path, empty="drop", splits={"train": list(range(8)), "val": [8, 9]})
    assert sorted(all_targets(dm)) == [1, 2, 3, 5, 7, 8, 9] and dm.empty_dropped == 1
    keep = coco_dm(tmp_path, empty="keep", splits={"train": list(range(8)), "val": [8, 9]})
    assert sorted(all_targets(keep)) == [1, 2, 3, 5, 6, 7, 8, 9]
    evaluated = coco_dm(tmp_path, empty="drop", splits={"train": [0, 1, 2], "val": [4]})
    assert sorted(all_targets(evaluated, "val")) == [6]


def test_a_v2_transform_moves_boxes_with_pixels_and_degenerate_boxes_are_dropped(
    tmp_path: Path,
) -> None:
    flip = coco_dm(tmp_path, transforms=v2.RandomHorizontalFlip(1.0))
    one = all_targets(flip)[1]
    assert one["boxes"].tolist() == [[36, 3, 46, 15], [0, 20, 8, 32]]
    # Columns 10..38 of image 1: its first box (x 2..12) keeps x 0..2, its second (x 40..48)
    # is left without area and dropped.
    crop = coco_dm(tmp_path, transforms=v2.CenterCrop((32, 28)))
    view = crop.view("train")
    image, target = view.sample(0)
    assert tuple(image.shape) == (3, 32, 28) and target["boxes"].tolist() == [[0, 3, 2, 15]]
    assert target["labels"].tolist() == [2] and view.dropped == 1


def test_default_resize_follows_min_and_max_size(tmp_path: Path) -> None:
    dm = coco_dm(tmp_path, min_size=64, max_size=80, eval_transforms=None)
    dm.setup()
    image, target = dm.view("train").sample(0)  # 48 x 32 -> short side 64 needs 96 > 80
    assert image.shape == (3, 53, 80)
    assert target["boxes"].canvas_size == (53, 80)


def test_yolo_and_voc_splits_come_from_their_files(tmp_path: Path) -> None:
    yolo = DetectionDataModule(write_yolo(tmp_path / "y"), batch_size=2, num_workers=0)
    yolo.setup("fit")
    assert yolo.classes == ["cat", "dog"]
    assert (yolo.split_size("train"), yolo.split_size("val")) == (4, 1)
    voc = DetectionDataModule(write_voc(tmp_path / "v"), batch_size=2, num_workers=0)
    voc.setup("fit")
    assert (voc.split_size("train"), voc.split_size("val")) == (2, 1)
    assert voc.classes == ["cat", "dog", "person"]


class Recorder(pl.LightningModule):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.model = tiny_detector(num_classes)
        self.seen: dict[str, list[int]] = {"train": [], "val": []}

    def training_step(self, batch: Any, index: int) -> torch.Tensor:
        images, targets = batch
        self.seen["train"] += [t["image_id"] for t in targets]
        return sum(self.model(images, targets).values())

    def validation_step(self, batch: Any, index: int) -> None:
        images, targets = batch
        self.seen["val"] += [t["image_id"] for t in targets]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.001)


def test_a_trainer_fits_and_validates_every_image_once(tmp_path: Path) -> None:
    dm = DetectionDataModule(
        write_coco(tmp_path), batch_size=3, num_workers=0, val_split=3, split_seed=1
    )
    dm.setup("fit")
    model = Recorder(dm.num_classes)
    trainer = pl.Trainer(
        max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(model, datamodule=dm)
    train_ids = sorted(model.seen["train"])
    val_ids = sorted(model.seen["val"])
    assert sorted(train_ids + val_ids) == sorted(COCO_SIZES) and len(val_ids) == 3


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"crowd": "mask"}, ValueError, "crowd"),
        ({"empty": "skip"}, ValueError, "empty"),
        ({"batch_format": "detr"}, ValueError, "batch_format"),
        ({"group_by_aspect_ratio": 0}, ValueError, "group_by_aspect_ratio"),
        ({"transforms": 3}, TypeError, "transforms"),
        ({"classes": "cat"}, TypeError, "classes"),
    ],
)
def test_bad_arguments_are_named(tmp_path: Path, kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        DetectionDataModule(str(tmp_path / "train.json"), **kwargs)


def test_no_train_split_is_refused() -> None:
    with pytest.raises(ValueError, match="needs train="):
        DetectionDataModule()


def test_skipped_annotations_are_listed_and_workers_keep_bounding_boxes(tmp_path: Path) -> None:
    path = write_coco(tmp_path)
    data = json.loads(path.read_text())
    data["annotations"][0]["category_id"] = 99
    path.write_text(json.dumps(data))
    dm = DetectionDataModule(path, on_error="skip", num_workers=1, batch_size=5, val_split=0)
    dm.setup()
    assert dm.skipped.records == 1
    assert dm.skipped.messages == [
        f"{path}: annotation id 100: category_id 99 is not among the categories [1, 3, 7]"
    ]
    targets = [t for _, batch in dm.train_dataloader() for t in batch]
    assert sorted(t["image_id"] for t in targets) == sorted(COCO_SIZES)
    assert all(isinstance(t["boxes"], tv_tensors.BoundingBoxes) for t in targets)
    assert dm.describe_data() == [
        "  train: 10 images, 10 objects",
        "  val: 0 images, 0 objects",
        "  test: 0 images, 0 objects",
        "  train objects per class: cat 3, dog 3, zebra 4",
    ]


def test_coco_images_may_live_in_a_folder_per_split(tmp_path: Path) -> None:
    train = write_coco(tmp_path / "train")
    val = write_coco(tmp_path / "val", "val.json")
    (tmp_path / "ann").mkdir()
    for path, name in ((train, "train.json"), (val, "val.json")):
        data = json.loads(path.read_text())
        for image in data["images"]:
            image["file_name"] = image["file_name"].removeprefix("images/")
        (tmp_path / "ann" / name).write_text(json.dumps(data))
    dm = DetectionDataModule(
        tmp_path / "ann" / "train.json", tmp_path / "ann" / "val.json", num_workers=0,
        images={"train": tmp_path / "train" / "images", "val": tmp_path / "val" / "images"},
    )  # fmt: skip
    dm.setup("fit")
    assert dm.indexes["val"].image_path(0) == str(tmp_path / "val" / "images" / "img1.png")
    assert (dm.split_size("train"), dm.split_size("val")) == (10, 10)
    with pytest.raises(ValueError, match="images"):
        DetectionDataModule(tmp_path / "ann" / "train.json", images={"eval": "x"})
