"""The fused default image transforms equal torchvision's v2 pipelines they replace."""

from __future__ import annotations

import random

import pytest
import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from datamodules.imaging.transforms import RandomResizedCropFlip, ResizeCenterCrop


def channels_last_image(height: int, width: int, seed: int = 0) -> torch.Tensor:
    """A random uint8 (3, H, W) image laid out H, W, C in memory, as decode_image gives."""
    hwc = torch.randint(0, 256, (height, width, 3), dtype=torch.uint8,
                        generator=torch.Generator().manual_seed(seed))  # fmt: skip
    return hwc.permute(2, 0, 1)


@pytest.mark.parametrize(("height", "width"), [(240, 320), (320, 240), (100, 100), (57, 300)])
def test_resize_center_crop_equals_v2_resize_then_center_crop(height: int, width: int) -> None:
    image = channels_last_image(height, width)
    reference = v2.Compose([v2.Resize(64, antialias=True), v2.CenterCrop(56)])(image)
    assert torch.equal(ResizeCenterCrop(56, resize=64)(image), reference)
    assert ResizeCenterCrop(224).resize == 256


@pytest.mark.parametrize("flip", [False, True])
def test_crop_resize_flip_equals_torchvision_for_the_same_box(
    monkeypatch: pytest.MonkeyPatch, flip: bool
) -> None:
    image = channels_last_image(240, 320, seed=1)
    transform = RandomResizedCropFlip(96)
    monkeypatch.setattr(transform, "crop_box", lambda h, w: (17, 33, 150, 201))
    monkeypatch.setattr(random, "random", lambda: 0.0 if flip else 0.99)
    expected = F.resized_crop(image, 17, 33, 150, 201, [96, 96], antialias=True)
    if flip:
        expected = F.horizontal_flip(expected)
    assert torch.equal(transform(image), expected)


def test_crop_boxes_follow_scale_and_ratio() -> None:
    random.seed(0)
    transform = RandomResizedCropFlip(32, scale=(0.25, 0.5), ratio=(0.5, 2.0))
    for _ in range(500):
        top, left, h, w = transform.crop_box(240, 320)
        assert 0 <= top <= 240 - h and 0 <= left <= 320 - w
        assert 0.25 * 240 * 320 * 0.9 <= h * w <= 0.5 * 240 * 320 * 1.1
        assert 0.5 * 0.9 <= w / h <= 2.0 * 1.1


def test_crop_box_falls_back_to_a_central_crop() -> None:
    transform = RandomResizedCropFlip(8, scale=(2.0, 3.0))  # never fits: fallback
    assert transform.crop_box(100, 400) == (0, 133, 100, 133)


def test_flip_happens_half_the_time() -> None:
    random.seed(1)
    image = channels_last_image(16, 16)
    transform = RandomResizedCropFlip(16, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    flipped = sum(torch.equal(transform(image), F.horizontal_flip(image)) for _ in range(400))
    assert 160 <= flipped <= 240


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_a_whole_image_crop_flips_right_in_any_layout(layout: str) -> None:
    # A crop of the whole image is a dense view whose flip keeps the view's strides.
    image = channels_last_image(48, 40, seed=2).contiguous()
    if layout == "transposed":  # as an EXIF-rotated decode gives it
        image = channels_last_image(40, 48, seed=2).transpose(1, 2)
    whole = (40 / 48, 40 / 48)
    transform = RandomResizedCropFlip(24, scale=(1.0, 1.0), ratio=whole, flip_p=1.0)
    expected = F.horizontal_flip(F.resize(image, [24, 24], antialias=True))
    assert torch.equal(transform(image), expected)
