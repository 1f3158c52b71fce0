"""The lone-flip path's box helpers (the path itself is tested in ``test_batches.py``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision import tv_tensors

from datamodules.detection.flip_path import box_tensor


@pytest.mark.parametrize("shape", [(3, 4), (0, 4), (4,)])
def test_box_tensor_equals_what_tv_tensors_wrap_gives(shape: tuple[int, ...]) -> None:
    """The same class, values, memory and metadata (format, canvas size, clamping mode) as
    ``tv_tensors.wrap`` of an XYXY ``BoundingBoxes``; boxes of one image do not share their
    metadata with another's."""
    values = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    like = tv_tensors.BoundingBoxes(torch.zeros(0, 4), format="XYXY", canvas_size=(1, 1))
    got = box_tensor(values, 30, 40)
    expected = tv_tensors.wrap(
        torch.from_numpy(values).reshape(-1, 4), like=like, canvas_size=(30, 40)
    )
    assert type(got) is tv_tensors.BoundingBoxes and vars(got) == vars(expected)
    assert got.canvas_size == (30, 40) and got.format is tv_tensors.BoundingBoxFormat.XYXY
    assert torch.equal(got.as_subclass(torch.Tensor), expected.as_subclass(torch.Tensor))
    assert got.data_ptr() == torch.from_numpy(values).data_ptr() or values.size == 0
    other = box_tensor(values.copy(), 5, 6)
    assert other.canvas_size == (5, 6) and got.canvas_size == (30, 40)
