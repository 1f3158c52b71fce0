"""decode="scaled": JPEGs the resize shrinks 2x or more decode at a DCT scale, boxes and masks
follow by the exact factors, outputs stay within resampling of decode="full"; "full" is
today's path; a bad value is named."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

from datamodules import DetectionDataModule
from datamodules.detection.batches import ResizeMinMax
from datamodules.detection.scaling import DecodePlanner, letterbox_shape
from datamodules.imaging.decoding import decode_image

mask_api = pytest.importorskip("pycocotools.mask")

#: (width, height) of the JPEGs: odd sizes, so that the DCT scale rounds up; one portrait.
SIZES = {1: (643, 481), 2: (481, 643), 3: (400, 300)}


def photo(width: int, height: int, seed: int) -> np.ndarray:
    """A smooth picture with a few flat rectangles (little that resampling can disagree on)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    pixels = np.stack([x / width * 255, y / height * 255, (x + y) / (width + height) * 255], -1)
    rng = np.random.default_rng(seed)
    for _ in range(3):
        x0, y0 = rng.integers(0, width // 2), rng.integers(0, height // 2)
        pixels[y0 : y0 + height // 3, x0 : x0 + width // 3] = rng.integers(0, 255, 3)
    return pixels.astype(np.uint8)


def write_jpeg_coco(root: Path, png: bool = False) -> Path:
    """JPEGs (or PNGs) with a polygon, a box without segmentation and an RLE object each."""
    images, anns = [], []
    for image_id, (w, h) in SIZES.items():
        name = f"images/{image_id}.{'png' if png else 'jpg'}"
        (root / "images").mkdir(parents=True, exist_ok=True)
        Image.fromarray(photo(w, h, image_id)).save(root / name, quality=95)
        images.append({"id": image_id, "file_name": name, "width": w, "height": h})
        x, y = w // 5, h // 4
        polygon = [x, y, x + w // 3, y, x + w // 3 + 10, y + h // 3, x, y + h // 2]
        anns.append({"id": 10 * image_id, "image_id": image_id, "category_id": 1, "iscrowd": 0,
                     "bbox": [x, y, w // 3 + 10, h // 2], "segmentation": [polygon]})  # fmt: skip
        anns.append({"id": 10 * image_id + 1, "image_id": image_id, "category_id": 2,
                     "iscrowd": 0, "bbox": [w / 2, h / 2, w / 3, h / 4]})  # fmt: skip
        dense = np.zeros((h, w), dtype=np.uint8)
        dense[h // 8 : h // 3, w // 2 : w - w // 6] = 1
        rle = mask_api.encode(np.asfortranarray(dense))
        box = [w // 2, h // 8, w - w // 6 - w // 2, h // 3 - h // 8]
        counts = {"size": [h, w], "counts": rle["counts"].decode()}
        anns.append({"id": 10 * image_id + 2, "image_id": image_id, "category_id": 1,
                     "iscrowd": 0, "bbox": box, "segmentation": counts})  # fmt: skip
    data = {"images": images, "annotations": anns,
            "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]}  # fmt: skip
    path = root / "train.json"
    path.write_text(json.dumps(data))
    return path


def samples(path: Path, decode: str, **kwargs: Any) -> dict[int, tuple[torch.Tensor, dict]]:
    dm = DetectionDataModule(path, decode=decode, val_split=0, num_workers=0, **kwargs)
    dm.setup()
    view = dm.view("train")
    found = {}
    for i in range(dm.split_size("train")):
        image, target = view.sample(i)
        found[target["image_id"]] = (image, target)
    return found


class Recorder:
    """A transform that declares the size it needs and keeps what it is given."""

    decode_size = 100

    def __init__(self) -> None:
        self.seen: dict[int, tuple[torch.Tensor, dict]] = {}

    def __call__(self, image: Any, target: dict) -> tuple[Any, dict]:
        self.seen[target["image_id"]] = (image, target)
        return image, target


def test_a_declared_size_gets_the_scaled_image_with_boxes_and_masks_on_it(tmp_path: Path) -> None:
    path = write_jpeg_coco(tmp_path)
    recorder = Recorder()
    full = samples(path, "full", transforms=v2.Identity(), masks=True, crowd="keep")
    samples(path, "scaled", transforms=recorder, masks=True, crowd="keep")
    for image_id, (w, h) in SIZES.items():
        image, target = recorder.seen[image_id]
        scale = 4 if min(w, h) >= 400 else 2  # the largest keeping both sides >= 100
        height, width = math.ceil(h / scale), math.ceil(w / scale)
        assert tuple(image.shape) == (3, height, width)
        assert target["boxes"].canvas_size == (height, width)
        factors = torch.tensor([width / w, height / h] * 2)
        full_boxes = full[image_id][1]["boxes"].as_subclass(torch.Tensor)
        torch.testing.assert_close(target["boxes"].as_subclass(torch.Tensor), full_boxes * factors)
        masks = target["masks"].as_subclass(torch.Tensor)
        assert masks.shape == (3, height, width)
        for mask, box in zip(masks, target["boxes"].as_subclass(torch.Tensor), strict=True):
            ys, xs = torch.nonzero(mask, as_tuple=True)  # each mask lies in its scaled box
            assert xs.min() >= box[0] - 1 and xs.max() <= box[2] + 1
            assert ys.min() >= box[1] - 1 and ys.max() <= box[3] + 1


def assert_close_to_full(scaled: dict, full: dict, masks: bool) -> None:
    assert scaled.keys() == full.keys()
    for image_id in full:
        (image, target), (image_f, target_f) = scaled[image_id], full[image_id]
        assert image.shape == image_f.shape
        difference = (image.float() - image_f.float()).abs()
        assert difference.mean() < 2.0, image_id
        torch.testing.assert_close(
            target["boxes"].as_subclass(torch.Tensor),
            target_f["boxes"].as_subclass(torch.Tensor),
            atol=1e-3,
            rtol=1e-4,
        )
        assert target["boxes"].canvas_size == target_f["boxes"].canvas_size
        assert torch.equal(target["labels"], target_f["labels"])
        if masks:
            mask, mask_f = target["masks"].bool(), target_f["masks"].bool()
            assert mask.shape == mask_f.shape
            # They differ at most on the full mask's edge (each side's rounding to pixels).
            dilated = torch.nn.functional.max_pool2d(mask_f[None].float(), 3, 1, 1)[0].bool()
            eroded = -torch.nn.functional.max_pool2d(-mask_f[None].float(), 3, 1, 1)[0]
            edge = dilated & ~eroded.bool()
            assert not ((mask ^ mask_f) & ~edge).any(), image_id
            assert (mask ^ mask_f).sum() < 0.1 * mask_f.sum(), image_id


@pytest.mark.parametrize(("min_size", "max_size"), [(100, 160), (200, 300), (None, 120)])
def test_the_default_resize_gives_what_full_decoding_gives(
    tmp_path: Path, min_size: int | None, max_size: int | None
) -> None:
    path = write_jpeg_coco(tmp_path)
    options = {"min_size": min_size, "max_size": max_size, "masks": True, "crowd": "keep"}
    torch.manual_seed(0)
    scaled = samples(path, "scaled", **options)
    torch.manual_seed(0)
    full = samples(path, "full", **options)
    assert_close_to_full(scaled, full, masks=True)
    resize = ResizeMinMax(min_size, max_size)
    for image_id, (w, h) in SIZES.items():
        assert tuple(scaled[image_id][0].shape[-2:]) == resize.size(h, w)


def test_the_yolo_letterbox_gives_what_full_decoding_gives(tmp_path: Path) -> None:
    path = write_jpeg_coco(tmp_path)
    options = {"batch_format": "yolo", "image_size": 128, "transforms": None}
    views = {}
    for decode in ("scaled", "full"):
        dm = DetectionDataModule(path, decode=decode, val_split=0, num_workers=0, **options)
        dm.setup()
        views[decode] = dm.view("train")
    positions = torch.arange(len(SIZES))
    torch.manual_seed(0)
    scaled = views["scaled"][positions]
    torch.manual_seed(0)
    full = views["full"][positions]
    assert (scaled["images"].float() - full["images"].float()).abs().mean() < 2.0
    # The letterbox scales boxes by one ratio, its image by rounded sides: half a pixel apart.
    torch.testing.assert_close(scaled["targets"], full["targets"], atol=0.5 / 128, rtol=0)
    planner = views["scaled"].decoder
    assert planner.plans and planner.output_size(481, 643) == letterbox_shape(481, 643, 128)


def test_full_decoding_and_what_cannot_be_scaled_keep_todays_pixels(tmp_path: Path) -> None:
    path = write_jpeg_coco(tmp_path)
    resize = ResizeMinMax(100, 160)
    full = samples(path, "full", transforms=resize)
    for image_id in SIZES:
        expected = resize(decode_image(tmp_path / f"images/{image_id}.jpg"), {})[0]
        assert torch.equal(full[image_id][0], expected)
    # A transform that declares no size gets the full image under "scaled" too.
    custom = v2.Compose([v2.Resize(100), v2.RandomHorizontalFlip(0.0)])
    assert DecodePlanner(custom, "scaled").plans is False
    torch.manual_seed(0)
    undeclared = samples(path, "scaled", transforms=custom)
    torch.manual_seed(0)
    reference = samples(path, "full", transforms=custom)
    for image_id in SIZES:
        assert torch.equal(undeclared[image_id][0], reference[image_id][0])
    # PNGs decode in full whatever the resize.
    png = write_jpeg_coco(tmp_path / "png", png=True)
    torch.manual_seed(0)
    scaled_png = samples(png, "scaled", min_size=100, max_size=160)
    torch.manual_seed(0)
    full_png = samples(png, "full", min_size=100, max_size=160)
    for image_id in SIZES:
        assert torch.equal(scaled_png[image_id][0], full_png[image_id][0])


def test_a_bad_decode_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="decode.*'half'"):
        DetectionDataModule(tmp_path / "train.json", decode="half")
