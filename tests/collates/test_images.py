"""Tests for collates.images.stack_uint8_images."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import collates.images as images_module
from collates.images import stack_uint8_images

pytestmark = pytest.mark.filterwarnings("error")


def _images(n: int = 4, h: int = 6, w: int = 5, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=g) for _ in range(n)]


def _hwc_views(images: list[torch.Tensor]) -> list[torch.Tensor]:
    """The same images with interleaved (channels-last) memory, as decoders return them."""
    return [x.permute(1, 2, 0).contiguous().permute(2, 0, 1) for x in images]


@pytest.mark.parametrize("layout", ["contiguous", "hwc", "mixed"])
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_stack_values_and_layout(layout, memory_format):
    images = _images()
    inputs = {
        "contiguous": images,
        "hwc": _hwc_views(images),
        "mixed": [images[0], *_hwc_views(images[1:])],
    }[layout]
    batch = stack_uint8_images(inputs, memory_format=memory_format)
    assert batch.shape == (4, 3, 6, 5) and batch.dtype == torch.uint8
    assert batch.is_contiguous(memory_format=memory_format)
    assert torch.equal(batch, torch.stack(images))


@pytest.mark.parametrize("layout", ["contiguous", "hwc"])
def test_preserve_format_follows_the_first_image(layout):
    images = _images()
    inputs = images if layout == "contiguous" else _hwc_views(images)
    batch = stack_uint8_images(inputs, memory_format=torch.preserve_format)
    expected = torch.contiguous_format if layout == "contiguous" else torch.channels_last
    assert batch.is_contiguous(memory_format=expected)
    assert torch.equal(batch, torch.stack(images))
    cropped = [x[:, 1:4, 1:4] for x in _hwc_views(images)]  # non-dense interleaved views
    batch = stack_uint8_images(cropped, memory_format=torch.preserve_format)
    assert batch.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(batch, torch.stack([x[:, 1:4, 1:4] for x in images]))


def test_single_image_and_one_channel():
    gray = [torch.zeros(1, 2, 3, dtype=torch.uint8)]
    assert stack_uint8_images(gray).shape == (1, 1, 2, 3)


def test_shape_mismatch_names_the_first_bad_index():
    images = _images(5)
    images[2] = torch.zeros(3, 7, 5, dtype=torch.uint8)
    images[4] = torch.zeros(3, 8, 5, dtype=torch.uint8)
    with pytest.raises(
        ValueError, match=r"image 2 has shape \(3, 7, 5\) but image 0 has \(3, 6, 5\)"
    ):
        stack_uint8_images(images)


@pytest.mark.parametrize(
    "bad,error,match",
    [
        (torch.zeros(3, 6, 5), TypeError, "image 1 has dtype torch.float32"),
        ("not a tensor", TypeError, "image 1 is a str"),
        (torch.zeros(6, 5, dtype=torch.uint8), ValueError, r"image 1 has shape \(6, 5\)"),
    ],
)
def test_bad_elements_are_named(bad, error, match):
    with pytest.raises(error, match=match):
        stack_uint8_images([_images(1)[0], bad])


def test_empty_and_bad_memory_format():
    with pytest.raises(ValueError, match="at least one image"):
        stack_uint8_images([])
    with pytest.raises(ValueError, match="memory_format"):
        stack_uint8_images(_images(), memory_format=torch.strided)


def test_worker_batch_is_allocated_in_shared_memory(monkeypatch):
    monkeypatch.setattr(images_module, "get_worker_info", lambda: object())
    for memory_format in (torch.contiguous_format, torch.channels_last):
        batch = stack_uint8_images(_hwc_views(_images()), memory_format=memory_format)
        assert batch.is_shared()
        assert torch.equal(batch, torch.stack(_images()))


class _ImageDataset(torch.utils.data.Dataset):
    def __init__(self, images: list[torch.Tensor]):
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.images[i]


@pytest.mark.timeout(60)
def test_in_a_dataloader_worker():
    images = _hwc_views(_images(6))
    loader = DataLoader(
        _ImageDataset(images),
        batch_size=3,
        num_workers=1,
        collate_fn=lambda batch: stack_uint8_images(batch, memory_format=torch.channels_last),
        multiprocessing_context="fork",
    )
    batches = list(loader)
    assert [b.shape for b in batches] == [(3, 3, 6, 5)] * 2
    assert batches[0].is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(torch.cat(batches), torch.stack(images))


def test_collates_never_imports_datamodules():
    source = Path(images_module.__file__).read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            assert not any(alias.name.split(".")[0] == "datamodules" for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert (node.module or "").split(".")[0] != "datamodules"
