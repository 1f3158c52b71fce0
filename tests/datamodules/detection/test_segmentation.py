"""SegmentationDataModule: exact batches and padding in both formats, masks never
interpolated (default and user v2 pipelines), VOC roots, a Trainer fit, bad arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from torch import nn
from torchvision.transforms import v2

from datamodules import SegmentationDataModule
from datamodules.imaging.transforms import IMAGENET_MEAN, IMAGENET_STD
from tests.datamodules.detection.segmentation_data import (
    mask_ids,
    sample_arrays,
    write_pairs,
    write_voc,
)


def sizes(i: int) -> tuple[int, int]:
    return (12, 16) if i % 2 else (9, 20)


def folder_dm(tmp_path: Path, count: int = 6, **kwargs: Any) -> SegmentationDataModule:
    images, masks = write_pairs(tmp_path, count, sizes)
    kwargs = {"batch_size": 4, "num_workers": 0, "val_split": 0, **kwargs}
    return SegmentationDataModule((images, masks), **kwargs)


def test_eval_batches_are_exact_and_padded_bottom_right(tmp_path: Path) -> None:
    dm = folder_dm(tmp_path, splits={"train": [0, 1], "val": [2, 3, 4, 5]})
    batch = next(iter(dm.val_dataloader()))
    assert sorted(batch) == ["image", "mask"]
    image, mask = batch["image"], batch["mask"]
    assert image.dtype == torch.uint8 and mask.dtype == torch.int64
    assert image.shape == (4, 3, 12, 20) and mask.shape == (4, 12, 20)
    for row, i in enumerate([2, 3, 4, 5]):
        h, w = sizes(i)
        pixels, classes = sample_arrays(i, h, w)
        assert torch.equal(image[row, :, :h, :w], torch.from_numpy(pixels).permute(2, 0, 1))
        assert torch.equal(mask[row, :h, :w], torch.from_numpy(classes).long())
        assert int(image[row, :, h:, :].sum() + image[row, :, :, w:].sum()) == 0
        assert set(mask[row, h:, :].unique().tolist()) <= {255}
        assert set(mask[row, :, w:].unique().tolist()) <= {255}
    assert int((mask == 255).sum()) == 2 * (12 * 20 - 9 * 20) + 2 * (12 * 20 - 12 * 16)


def test_hf_format_names_what_segformers_processor_names(tmp_path: Path) -> None:
    dm = folder_dm(tmp_path, batch_format="hf", splits={"train": [0], "val": [1, 3]})
    batch = next(iter(dm.val_dataloader()))
    assert sorted(batch) == ["labels", "pixel_values"]
    transformers = pytest.importorskip("transformers")
    processor = transformers.SegformerImageProcessor(
        do_resize=False, do_rescale=False, do_normalize=False, do_reduce_labels=False
    )
    arrays = [sample_arrays(i, *sizes(i)) for i in (1, 3)]
    theirs = processor(
        images=[a for a, _ in arrays], segmentation_maps=[m for _, m in arrays],
        return_tensors="pt",
    )  # fmt: skip
    assert sorted(theirs) == sorted(batch)
    assert torch.equal(batch["labels"], theirs["labels"])
    assert torch.equal(batch["pixel_values"].float(), theirs["pixel_values"].float())


def test_images_become_normalised_floats_on_the_device(tmp_path: Path) -> None:
    for normalize in (True, False):
        dm = folder_dm(tmp_path, normalize=normalize, splits={"train": [0], "val": [1]})
        batch = next(iter(dm.val_dataloader()))
        moved = dm.on_after_batch_transfer(batch, 0)
        expected = batch["image"].float() / 255
        if normalize:
            mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
            expected = (expected - mean) / torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
        assert moved["image"].dtype == torch.float32
        assert torch.allclose(moved["image"], expected, atol=1e-6)
        assert moved["mask"] is batch["mask"]


def write_sharp(tmp_path: Path) -> tuple[Path, Path, set[int]]:
    """Images whose masks hold classes 0, 1, 2, 7 and 20 in sharp blocks."""
    from PIL import Image

    images, masks = tmp_path / "im", tmp_path / "ma"
    images.mkdir()
    masks.mkdir()
    values = np.array([0, 1, 2, 7, 20], dtype=np.uint8)
    rng = np.random.default_rng(0)
    for i in range(8):
        blocks = values[rng.integers(0, 5, size=(5, 7))]
        mask = np.kron(blocks, np.ones((3, 3), dtype=np.uint8))  # 15 x 21
        Image.fromarray(rng.integers(0, 255, (15, 21, 3), dtype=np.uint8)).save(images / f"{i}.png")
        Image.fromarray(mask, mode="L").save(masks / f"{i}.png")
    return images, masks, set(values.tolist())


def test_default_train_crop_pads_with_ignore_index_and_never_interpolates_masks(
    tmp_path: Path,
) -> None:
    images, masks, values = write_sharp(tmp_path)
    torch.manual_seed(0)
    dm = SegmentationDataModule(
        (images, masks), crop_size=(24, 30), batch_size=4, num_workers=0, val_split=0,
        num_classes=21,
    )  # fmt: skip
    padded = 0
    for _ in range(4):
        for batch in dm.train_dataloader():
            assert batch["image"].shape[1:] == (3, 24, 30) and batch["mask"].shape[1:] == (24, 30)
            found = set(batch["mask"].unique().tolist())
            assert found <= values | {255}
            border = batch["mask"] == 255
            padded += int(border.sum())
            assert int(batch["image"].permute(1, 0, 2, 3)[:, border].sum()) == 0
    assert padded > 0  # short sides of 15 * [0.5, 2] * 30/15: some crops exceed the image


def test_a_users_v2_pipeline_works_unchanged_and_masks_stay_nearest(tmp_path: Path) -> None:
    images, masks, values = write_sharp(tmp_path)
    pipeline = v2.Compose([
        v2.Resize((37, 50), interpolation=v2.InterpolationMode.BICUBIC),
        v2.RandomRotation(20),
        v2.RandomResizedCrop((16, 16), scale=(0.3, 1.0)),
        v2.ColorJitter(0.3, 0.3),
    ])  # fmt: skip
    dm = SegmentationDataModule(
        (images, masks), transforms=pipeline, eval_transforms=v2.Resize((31, 43)), batch_size=3,
        num_workers=0, val_split=2,
    )  # fmt: skip
    torch.manual_seed(1)
    for batch in dm.train_dataloader():
        assert batch["image"].shape[1:] == (3, 16, 16)
        assert set(batch["mask"].unique().tolist()) <= values
    for batch in dm.val_dataloader():
        assert batch["mask"].shape[1:] == (31, 43)
        assert set(batch["mask"].unique().tolist()) <= values


def test_crop_size_none_keeps_sizes_and_only_flips(tmp_path: Path) -> None:
    dm = folder_dm(tmp_path, count=4, shuffle=False, batch_size=4)
    torch.manual_seed(3)
    batch = next(iter(dm.train_dataloader()))
    for row, i in enumerate(range(4)):
        h, w = sizes(i)
        _, classes = sample_arrays(i, h, w)
        got = batch["mask"][row, :h, :w]
        expected = torch.from_numpy(classes).long()
        assert torch.equal(got, expected) or torch.equal(got, expected.flip(-1))


def test_a_voc_root_gives_palette_indices_and_its_val_split(tmp_path: Path) -> None:
    root = write_voc(tmp_path / "VOC2012")
    dm = SegmentationDataModule(root, num_classes=21, batch_size=4, num_workers=0)
    dm.setup("fit")
    assert (dm.split_size("train"), dm.split_size("val"), dm.split_size("test")) == (4, 2, 0)
    batch = next(iter(dm.val_dataloader()))
    assert batch["image"].shape == (2, 3, 20, 24)
    for row, k in enumerate((4, 5)):
        mask = batch["mask"][row]
        assert set(mask.unique().tolist()) == {0, k % 4, 255}
        assert int(mask[7, 7]) == k % 4 and int(mask[4, 4]) == 255 and int(mask[0, 0]) == 0
    split_file = root / "ImageSets" / "Segmentation" / "train.txt"
    only = SegmentationDataModule(split_file, val_split=1, num_workers=0)
    only.setup("fit")
    assert (only.split_size("train"), only.split_size("val")) == (3, 1)


class TinySegmenter(pl.LightningModule):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, classes, 1))
        self.seen: dict[str, list[int]] = {"train": [], "val": []}

    def training_step(self, batch: dict, index: int) -> torch.Tensor:
        assert batch["image"].dtype == torch.float32
        self.seen["train"] += mask_ids(batch)
        logits = self.net(batch["image"])
        return nn.functional.cross_entropy(logits, batch["mask"], ignore_index=255)

    def validation_step(self, batch: dict, index: int) -> None:
        self.seen["val"] += mask_ids(batch)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_a_trainer_fits_on_every_train_image_and_validates_each_once(tmp_path: Path) -> None:
    dm = folder_dm(tmp_path, count=9, val_split=3, batch_size=2, transforms=v2.Identity())
    model = TinySegmenter(9)
    trainer = pl.Trainer(
        max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(model, datamodule=dm)
    assert sorted(model.seen["train"]) == sorted(dm.split_indices["train"].tolist())
    assert sorted(model.seen["val"]) == sorted(dm.split_indices["val"].tolist())
    assert len(model.seen["val"]) == 3


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"batch_format": "yolo"}, ValueError, "batch_format"),
        ({"crop_size": 0}, ValueError, "crop_size"),
        ({"crop_size": "big"}, TypeError, "crop_size"),
        ({"num_classes": 0}, ValueError, "num_classes"),
        ({"ignore_index": 2.5}, TypeError, "ignore_index"),
        ({"transforms": 3}, TypeError, "transforms"),
        ({"normalize": "yes"}, TypeError, "normalize"),
        ({"on_error": "warn"}, ValueError, "on_error"),
        ({"val": ["a"]}, TypeError, "val"),
        ({"val": 3}, TypeError, "val"),
        ({"mask_key": 3}, TypeError, "mask_key"),
    ],
)
def test_bad_arguments_are_named(tmp_path: Path, kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        SegmentationDataModule((tmp_path, tmp_path), **kwargs)


def test_no_train_split_and_folders_that_are_not_there_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs train="):
        SegmentationDataModule()
    with pytest.raises(ValueError, match="not a folder"):
        SegmentationDataModule((tmp_path / "nope", tmp_path)).setup()
    with pytest.raises(ValueError, match="no ImageSets/Segmentation"):
        SegmentationDataModule(tmp_path).setup()
