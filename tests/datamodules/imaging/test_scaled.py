"""Scaled JPEG decoding: the scale chosen, its pixels against full decoding, EXIF orientation, the
full-decode path unchanged, custom transforms, folders and tar shards alike."""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from datamodules import ImageFolderDataModule, StreamingDataModule
from datamodules.imaging.batches import ImageBatchWriter
from datamodules.imaging.decoding import ImageDecodeError, decode_image, decode_image_bytes
from datamodules.imaging.scaled import (
    ImageDecoder,
    _stored_box,
    check_decode,
    decode_jpeg_scaled,
    jpeg_header,
    largest_scale,
    planner_for,
)
from datamodules.imaging.transforms import RandomResizedCropFlip, ResizeCenterCrop
from datamodules.streaming import write_shards


def photo(seed: int, height: int = 900, width: int = 1200) -> np.ndarray:
    """Smooth colour waves under per-pixel noise: fine detail, where filters differ most."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    waves = 60 * np.sin(x / 37 + seed)[..., None] * np.array([1.0, 0.5, -0.5])
    waves += 50 * np.cos(y / 53)[..., None] * np.array([-0.3, 1.0, 0.6])
    pixels = 128 + waves + rng.normal(0, 8, (height, width, 3))
    return np.clip(pixels, 0, 255).astype(np.uint8)


def encode(pixels: np.ndarray, fmt: str = "JPEG", **options: Any) -> bytes:
    buffer = io.BytesIO()
    extra = {"quality": 90} if fmt == "JPEG" else {"lossless": True} if fmt == "WEBP" else {}
    Image.fromarray(pixels).save(buffer, fmt, **{**extra, **options})
    return buffer.getvalue()


def oriented(pixels: np.ndarray, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(pixels, exif=exif.tobytes())


def transformed(transform: Any, data: bytes, decode: str, seed: int) -> torch.Tensor:
    """The transform's output for encoded ``data``, as a loader makes it (seeded draws)."""
    random.seed(seed)
    image, own = ImageDecoder(transform, decode).bytes(data)
    writer = ImageBatchWriter(1, transform)
    writer.add(image, own)
    return writer.batch()[0]


def mad(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean absolute difference, in levels of 0-255."""
    return (a.float() - b.float()).abs().mean().item()


# ---------------------------------------------------------------------- the scale chosen
@pytest.mark.parametrize(
    ("shrink_h", "shrink_w", "scale"),
    [(1.0, 5.0, 1), (1.99, 3.0, 1), (2.0, 2.0, 2), (3.9, 7.0, 2), (4.0, 4.5, 4),
     (7.99, 9.0, 4), (8.0, 8.0, 8), (30.0, 12.0, 8)],
)  # fmt: skip
def test_largest_scale_keeps_both_sides_at_or_above_the_output(
    shrink_h: float, shrink_w: float, scale: int
) -> None:
    assert largest_scale(shrink_h, shrink_w) == scale


@pytest.mark.parametrize(("height", "width"), [(1500, 2000), (2000, 1500), (480, 640), (447, 900),
                                               (448, 448), (3000, 4000), (4000, 600)])  # fmt: skip
@pytest.mark.parametrize("size", [224, (224, 160), 64])
def test_train_crops_never_decode_below_the_output(height: int, width: int, size: Any) -> None:
    transform = RandomResizedCropFlip(size)
    out_h, out_w = (size, size) if isinstance(size, int) else size
    plan = planner_for(transform)
    random.seed(0)
    scales = set()
    for _ in range(300):
        state = random.getstate()
        planned = plan(height, width)
        if height < 2 * out_h or width < 2 * out_w:
            assert planned is None  # no crop can be shrunk 2x: nothing drawn, today's path
            assert random.getstate() == state
            continue
        random.setstate(state)
        top, left, h, w = transform.crop_box(height, width)  # the same draw
        random.random()
        scale, box, _ = planned
        assert scale == largest_scale(h / out_h, w / out_w)
        scales.add(scale)
        if scale == 1:
            continue
        t, lft, bh, bw = box
        assert bh >= out_h and bw >= out_w  # never below the output size
        assert t >= 0 and t + bh <= -(-height // scale)  # inside the scaled image
        assert lft >= 0 and lft + bw <= -(-width // scale)
        assert abs(t * scale - top) <= scale / 2 and abs(bw * scale - w) <= scale
    if 4 <= min(height / out_h, width / out_w) < 16:  # both small and large crops can be drawn
        assert len(scales) >= 2  # the scale follows each crop


@pytest.mark.parametrize(
    ("height", "width", "size", "scale"),
    [(1500, 2000, 224, 4), (480, 640, 224, None), (600, 800, 224, 2), (3000, 4000, 224, 8),
     (1500, 2000, 112, 8), (2000, 1500, (224, 160), 4)],
)  # fmt: skip
def test_eval_scale_follows_the_resize_target(
    height: int, width: int, size: Any, scale: int | None
) -> None:
    planned = planner_for(ResizeCenterCrop(size))(height, width)
    assert (planned and planned[0]) == scale
    if planned is not None:
        new_h, new_w = ResizeCenterCrop(size).resized_shape(height, width)
        assert height / scale >= new_h and width / scale >= new_w


def test_a_declared_decode_size_sets_the_scale() -> None:
    class Declared:
        decode_size = (256, 300)

        def __call__(self, image: torch.Tensor) -> torch.Tensor:
            return image

    plan = planner_for(Declared())
    assert plan(1500, 2000)[0] == 4 and plan(1024, 2400)[0] == 4  # 375 x 500, 256 x 600
    assert plan(1000, 2000)[0] == 2 and plan(500, 2000) is None
    assert planner_for(lambda image: image) is None  # nothing declared: full images
    bad = Declared()
    bad.decode_size = 0
    with pytest.raises(ValueError, match="decode_size=0 is not accepted"):
        planner_for(bad)


# ---------------------------------------------------------------------- the header
@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
@pytest.mark.parametrize("options", [{}, {"progressive": True}, {"subsampling": 0}])
def test_jpeg_header_gives_size_and_orientation(orientation: int, options: dict) -> None:
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = encode(photo(0, 75, 130), exif=exif.tobytes(), **options)
    assert jpeg_header(data) == (75, 130, orientation)
    assert jpeg_header(encode(photo(0, 75, 130)[..., 0])) == (75, 130, 1)  # grayscale, no EXIF
    assert jpeg_header(encode(photo(0, 30, 40), "PNG")) is None
    assert jpeg_header(data[:20]) is None and jpeg_header(b"") is None


@pytest.mark.parametrize("orientation", range(1, 9))
def test_a_box_of_the_displayed_image_maps_to_the_stored_one(orientation: int) -> None:
    from datamodules.imaging.decoding import _apply_orientation

    stored = torch.arange(7 * 11 * 3, dtype=torch.int32).view(3, 7, 11)
    displayed = _apply_orientation(stored, orientation)
    box = (1, 2, 3, 4)  # top, left, h, w of the displayed image
    left, upper, right, lower = _stored_box(box, orientation, 7, 11)
    region = _apply_orientation(stored[:, upper:lower, left:right], orientation)
    assert torch.equal(region, displayed[:, 1:4, 2:6])


# ---------------------------------------------------------------------- pixels
def box_reduced(image: torch.Tensor, scale: int) -> torch.Tensor:
    """Each ``scale`` x ``scale`` block averaged: the filter DCT scaling stands for."""
    pooled = torch.nn.functional.avg_pool2d(image[None].float(), scale, ceil_mode=True)[0]
    return pooled.round().to(torch.uint8).permute(1, 2, 0).contiguous().permute(2, 0, 1)


@pytest.mark.parametrize("transform", [RandomResizedCropFlip(96), ResizeCenterCrop(96),
                                       RandomResizedCropFlip(224), ResizeCenterCrop(224)],
                         ids=repr)  # fmt: skip
def test_scaled_differs_from_full_decoding_by_the_filter_only(transform: Any) -> None:
    for seed in range(4):
        data = encode(photo(seed))
        scaled = transformed(transform, data, "scaled", seed)
        full = transformed(transform, data, "full", seed)
        # The reference: full decoding, each block of the chosen scale averaged (a box
        # filter), then the same crop and resize as the scaled path.
        image = decode_image_bytes(data, channels_last=True)
        random.seed(seed)
        scale, box, own = planner_for(transform)(*image.shape[1:])
        if scale == 1:
            assert torch.equal(scaled, full)
            continue
        reduced = box_reduced(image, scale)
        if box is not None:
            reduced = reduced[:, box[0] : box[0] + box[2], box[1] : box[1] + box[3]]
        filtered = (own or transform)(reduced)
        # Scaled decoding is that box filter (to the IDCT's rounding): no shift, no blur more.
        assert mad(scaled, filtered) <= 0.5
        # So it differs from full decoding + the same resize by what a box prefilter of the
        # scale changes in an antialiased resize, and little in all: here, on per-pixel
        # noise (the worst case), 0.4-1.7 levels of 255 on average.
        assert mad(scaled, full) <= mad(filtered, full) + 0.5
        assert mad(scaled, full) <= 2.5


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_is_applied_when_scaled(orientation: int) -> None:
    data = oriented(photo(1), orientation)
    for transform in (RandomResizedCropFlip((96, 64)), ResizeCenterCrop((96, 64))):
        for seed in range(3):
            scaled = transformed(transform, data, "scaled", seed)
            full = transformed(transform, data, "full", seed)
            assert scaled.shape == full.shape == (3, 96, 64)
            assert mad(scaled, full) <= 2.5  # a wrong turn or flip would be ~40
    whole = decode_jpeg_scaled(bytearray(data), 4, orientation)
    assert whole.shape == ((3, 300, 225) if orientation >= 5 else (3, 225, 300))
    reference = box_reduced(decode_image_bytes(data), 4)
    assert mad(whole, reference) <= 0.5


def test_full_decode_gives_todays_pixels(tmp_path: Path) -> None:
    for i, (h, w) in enumerate([(900, 1200), (1200, 900), (240, 320)]):
        (tmp_path / "a").mkdir(exist_ok=True)
        (tmp_path / "a" / f"{i}.jpg").write_bytes(encode(photo(i, h, w)))
    dm = ImageFolderDataModule(tmp_path, val_root=tmp_path, image_size=112, batch_size=3,
                               val_split=0, num_workers=0, decode="full")  # fmt: skip
    dm.setup("fit")
    for split, transform in (("train", dm.train_transforms), ("val", dm.eval_transforms)):
        view = dm.view(split)
        paths = [view.index.path(row) for row in view.rows(torch.arange(3)).tolist()]
        random.seed(5)
        images, _ = view[torch.arange(3)]
        random.seed(5)  # today: decode_image in full, then the transform
        expected = [transform(decode_image(p, channels_last=True)) for p in paths]
        assert torch.equal(images, torch.stack(expected))


@pytest.mark.parametrize("fmt", ["PNG", "WEBP", "small JPEG"])
def test_png_webp_and_small_jpegs_take_the_full_path(fmt: str) -> None:
    data = encode(photo(2, 240, 320)) if fmt == "small JPEG" else encode(photo(2), fmt)
    for transform in (RandomResizedCropFlip(112 if fmt != "small JPEG" else 224),
                      ResizeCenterCrop(112 if fmt != "small JPEG" else 224)):  # fmt: skip
        for seed in range(3):
            random.seed(seed)
            image, own = ImageDecoder(transform, "scaled").bytes(data)
            assert own is None
            assert torch.equal(image, decode_image_bytes(data, channels_last=True))
            scaled = transformed(transform, data, "scaled", seed)
            assert torch.equal(scaled, transformed(transform, data, "full", seed))


def test_a_custom_transform_gets_full_images_unless_it_declares_a_size(tmp_path: Path) -> None:
    class Recorder:
        def __init__(self) -> None:
            self.seen: list[tuple[int, ...]] = []

        def __call__(self, image: torch.Tensor) -> torch.Tensor:
            self.seen.append(tuple(image.shape))
            return ResizeCenterCrop(64)(image)

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.jpg").write_bytes(encode(photo(3)))
    plain, declared = Recorder(), Recorder()
    declared.decode_size = 256  # type: ignore[attr-defined]
    for transform in (plain, declared):
        dm = ImageFolderDataModule(tmp_path, image_size=64, val_split=0, num_workers=0,
                                   train_transforms=transform)  # fmt: skip
        next(iter(dm.train_dataloader()))
        if transform is plain:
            assert "train full images (its transform declares no decode_size)" in dm.summary()
    assert plain.seen == [(3, 900, 1200)]
    assert declared.seen == [(3, 450, 600)]  # 1/2: 1/4 would be 225 < 256
    assert "train decode_size 256x256; eval scale from the resize target" in dm.summary()


@pytest.mark.parametrize("transform", [ResizeCenterCrop(96), RandomResizedCropFlip(96)],
                         ids=["eval", "train"])  # fmt: skip
def test_a_truncated_large_jpeg_raises_naming_the_file(tmp_path: Path, transform: Any) -> None:
    data = encode(photo(4))
    path = tmp_path / "cut.jpg"
    path.write_bytes(data[: len(data) * 3 // 4])
    decoder = ImageDecoder(transform, "scaled")
    for seed in range(5):  # crops that end above the cut too: every one raises
        random.seed(seed)
        with pytest.raises(ImageDecodeError, match="cut.jpg.*Pillow JPEG decoder.*truncated"):
            decoder.file(path)


def test_rows_below_the_crop_are_not_decoded_and_change_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import datamodules.imaging.scaled as scaled

    data = bytearray(encode(photo(5)))
    used = []
    top_rows = scaled._top_rows
    monkeypatch.setattr(scaled, "_top_rows", lambda *a: used.append(top_rows(*a)) or used[-1])
    for orientation, box in [(1, (10, 20, 120, 150)), (1, (0, 0, 225, 150)), (6, (7, 5, 90, 60)),
                             (3, (100, 40, 80, 60))]:  # fmt: skip
        fast = decode_jpeg_scaled(data, 4, orientation, box)
        monkeypatch.setattr(scaled, "_top_rows", lambda *a: None)
        assert torch.equal(fast, decode_jpeg_scaled(data, 4, orientation, box))
        monkeypatch.setattr(scaled, "_top_rows", lambda *a: used.append(top_rows(*a)) or used[-1])
    assert len(used) == 3 and all(image is not None for image in used)  # not for the last row


# ---------------------------------------------------------------------- the DataModules
def test_folders_and_tar_shards_decode_alike(tmp_path: Path) -> None:
    records = []
    for i in range(4):
        data = encode(photo(i, 600, 800) if i % 2 else photo(i, 800, 600))
        (tmp_path / "folder" / "a").mkdir(parents=True, exist_ok=True)
        (tmp_path / "folder" / "a" / f"{i}.jpg").write_bytes(data)
        records.append({"__key__": f"a/{i}", "jpg": data, "cls": 0})
    shards = write_shards(records, tmp_path / "tar", max_records=3)
    batches = {}
    for decode in ("scaled", "full"):
        folder = ImageFolderDataModule(tmp_path / "folder", val_root=tmp_path / "folder",
                                       image_size=96, batch_size=4, num_workers=0,
                                       decode=decode)  # fmt: skip
        stream = StreamingDataModule(shards, shards, image_key="jpg", image_size=96,
                                     batch_size=4, num_workers=0, index_cache=False,
                                     decode=decode)  # fmt: skip
        (a, _), (b, _) = next(iter(folder.val_dataloader())), next(iter(stream.val_dataloader()))
        assert torch.equal(a, b)  # the same decoder for files and records
        batches[decode] = a
        for dm in (folder, stream):
            assert f"decode: {decode!r}" in dm.summary()
            if decode == "scaled":
                how = "train crop drawn from the header; eval scale from the resize target"
                assert how in dm.summary()
    assert not torch.equal(batches["scaled"], batches["full"])  # 600 -> 110: decoded at 1/4
    assert mad(batches["scaled"], batches["full"]) <= 2.5


def test_decode_is_checked() -> None:
    check_decode("scaled")
    with pytest.raises(ValueError, match=r"decode='half' is not accepted: use 'scaled' or 'full'"):
        ImageFolderDataModule("x", decode="half")
    with pytest.raises(TypeError, match=r"decode=1 is not accepted: use 'scaled' or 'full'"):
        ImageFolderDataModule("x", decode=1)
    with pytest.raises(ValueError, match="decode apply to image records: give image_key="):
        StreamingDataModule("x.jsonl", decode="full")
    with pytest.raises(ValueError, match="decode='half'"):
        StreamingDataModule("x.tar", image_key="jpg", decode="half")
