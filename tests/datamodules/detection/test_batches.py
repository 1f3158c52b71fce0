"""The batch view's path for a lone horizontal flip (the default training transform, or no
transform at all): its samples equal those of the same flip run as a v2 transform, image,
boxes, crowd boxes, masks and counts alike, under every crowd rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2

from datamodules import DetectionDataModule
from tests.datamodules.detection.detection_data import COCO_SIZES, write_coco

pytest.importorskip("pycocotools")


def with_gradients(tmp_path: Path) -> Path:
    """The COCO fixture, each image a gradient (a flip changes its pixels)."""
    path = write_coco(tmp_path)
    for image_id, (w, h) in COCO_SIZES.items():
        x = np.linspace(0, 255, w, dtype=np.float32)[None, :, None]
        y = np.linspace(0, 255, h, dtype=np.float32)[:, None, None]
        pixels = np.concatenate([x + 0 * y, y + 0 * x, (x + y) / 2], axis=2).astype(np.uint8)
        Image.fromarray(pixels).save(tmp_path / f"images/img{image_id}.png")
    return path


def views(path: Path, p: float, **options) -> tuple:
    """The train view with ``v2.RandomHorizontalFlip(p)`` as the transform, and with the
    same flip inside a ``v2.Compose`` (which the lone-flip path does not take)."""
    made = []
    for transform in (v2.RandomHorizontalFlip(p), v2.Compose([v2.RandomHorizontalFlip(p)])):
        dm = DetectionDataModule(
            path, transforms=transform, val_split=0, num_workers=0, **options
        )  # fmt: skip
        dm.setup()
        made.append(dm.view("train"))
    return tuple(made)


def assert_same_sample(ours: tuple, theirs: tuple) -> None:
    (image, target), (expected_image, expected) = ours, theirs
    assert image.shape == expected_image.shape and torch.equal(image, expected_image)
    assert list(target) == list(expected)
    for key, value in expected.items():
        got = target[key]
        assert type(got) is type(value), key
        if isinstance(value, torch.Tensor):
            assert got.dtype == value.dtype and torch.equal(got, value), key
            if isinstance(value, tv_tensors.BoundingBoxes):
                assert got.canvas_size == value.canvas_size and got.format == value.format
        else:
            assert got == value, key


@pytest.mark.parametrize("crowd", ["ignore", "drop", "keep"])
@pytest.mark.parametrize("masks", [False, True])
def test_a_lone_flip_gives_the_samples_of_the_v2_flip(
    tmp_path: Path, crowd: str, masks: bool
) -> None:
    path = with_gradients(tmp_path)
    flipped = 0
    for p in (0.0, 0.5, 1.0):
        ours, theirs = views(path, p, crowd=crowd, masks=masks)
        assert ours.flip == p and theirs.flip is None
        for i in range(len(COCO_SIZES)):
            torch.manual_seed(i)
            sample = ours.sample(i)
            torch.manual_seed(i)
            expected = theirs.sample(i)
            assert_same_sample(sample, expected)
            torch.manual_seed(i)
            flipped += bool(torch.rand(1) < p)
        assert ours.dropped == theirs.dropped
    assert 10 < flipped < 20  # p=1 flips all 10 images, p=0.5 some, p=0 none


@pytest.mark.parametrize("crowd", ["ignore", "drop", "keep"])
@pytest.mark.parametrize("masks", [False, True])
def test_a_batch_built_in_one_pass_equals_the_v2_flip_sample_by_sample(
    tmp_path: Path, crowd: str, masks: bool
) -> None:
    """A batch takes its draws in one ``torch.rand(n)`` and builds its targets in one pass:
    the v2 flip, drawing once per sample from the same seed, gives the same batch. Without
    masks, the image files are a third as wide as the annotations say, so that clamping
    leaves boxes without area: one of the plain ones, and under ``crowd="keep"`` the crowd
    one too. (With masks they keep their width: an RLE must fit its image.)"""
    path = with_gradients(tmp_path)
    for image_id in COCO_SIZES if not masks else ():
        file = tmp_path / f"images/img{image_id}.png"
        with Image.open(file) as image:
            narrower = image.resize((image.width // 3, image.height))
        narrower.save(file)
    ours, theirs = views(path, 0.5, crowd=crowd, masks=masks)
    order = torch.tensor([9, 0, 4, 1, 7, 2, 8, 3, 6, 5])[: len(COCO_SIZES)]
    flips = []
    for batch in (order[:1], order[1:4], order[4:]):
        torch.manual_seed(len(batch))
        images, targets = ours[batch]
        torch.manual_seed(len(batch))
        flips += (torch.rand(len(batch)) < 0.5).tolist()
        torch.manual_seed(len(batch))
        for image, target, i in zip(images, targets, ours.rows(batch).tolist(), strict=True):
            assert_same_sample((image, target), theirs.sample(i))
    assert ours.dropped == theirs.dropped == (0 if masks else 2 if crowd == "keep" else 1)
    assert 0 < sum(flips) < len(flips)  # both kinds of image in the batches


def test_without_a_transform_nothing_is_drawn_and_nothing_moves(tmp_path: Path) -> None:
    path = with_gradients(tmp_path)
    made = []
    for transforms in (None, v2.Identity()):
        dm = DetectionDataModule(path, val=path, eval_transforms=transforms, num_workers=0)
        dm.setup()
        made.append(dm.view("val"))
    plain, identity = made
    assert plain.transform is None and plain.flip == 0.0 and identity.flip is None
    state = torch.get_rng_state()
    for i in range(len(COCO_SIZES)):
        assert_same_sample(plain.sample(i), identity.sample(i))
    assert torch.equal(torch.get_rng_state(), state)  # no random draw without a flip


def test_the_default_training_transform_takes_the_lone_flip_path(tmp_path: Path) -> None:
    dm = DetectionDataModule(with_gradients(tmp_path), val_split=0, num_workers=0)
    dm.setup()
    view = dm.view("train")
    assert view.flip == 0.5
    image, target = view.sample(0)
    assert image.dtype == torch.uint8 and image.shape == (3, 32, 48)
    assert image.stride() == (1, 3 * 48, 3)  # the decoder's interleaved layout, uncopied
    assert isinstance(target["boxes"], tv_tensors.BoundingBoxes)
