"""What ``inspect`` prints for a batch's fields (:func:`describe_batch`): one line per field."""

from __future__ import annotations

import torch

from datamodules.tools.descriptions import describe_batch


def test_a_list_of_dicts_is_one_line() -> None:
    records = [{"id": i, "text": f"r{i}"} for i in range(32)]
    records[5]["extra"] = None  # the keys of every record are named, in first-seen order
    batch = {"image": torch.zeros(32, 3, 2, 2, dtype=torch.uint8), "json": records}
    assert describe_batch(batch) == [
        "image: (32, 3, 2, 2) uint8, values in [0, 0]",
        "json: list of 32 dict, keys id, text, extra",
    ]


def test_a_list_of_other_objects_is_one_line() -> None:
    batch = {"raw": [b"ab", b"cde"], "nested": {"t": torch.ones(2)}}
    assert describe_batch(batch) == [
        "raw: list of 2 bytes",
        "nested.t: (2,) float32, values in [1, 1]",
    ]


def test_a_tuple_of_tensors_is_still_one_line_per_tensor() -> None:
    batch = (torch.zeros(4, 2), torch.arange(4))
    assert describe_batch(batch) == [
        "0: (4, 2) float32, values in [0, 0]",
        "1: (4,) int64, values in [0, 3]",
    ]
