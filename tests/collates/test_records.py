"""collate_records: the batch-level conversion gives exactly what PadCollate gives per record.

The reference is ``PadCollate(...)._collate_dicts(records, with_masks=False)``, which is what
``collate_records`` returned before its fast path (one array per batch instead of one tensor
per record's list) was added.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from collates import PadCollate
from collates.records import collate_records


def reference(records: list[dict], **kwargs: Any) -> dict:
    return PadCollate(
        kwargs.get("pad_value", 0),
        label_pad_value=kwargs.get("label_pad_value"),
        padding_side=kwargs.get("padding_side", "right"),
    )._collate_dicts(records, with_masks=False)


def assert_same_batch(actual: dict, expected: dict) -> None:
    assert list(actual) == list(expected)
    for key, value in expected.items():
        got = actual[key]
        if isinstance(value, torch.Tensor):
            assert isinstance(got, torch.Tensor), key
            assert got.dtype == value.dtype and got.shape == value.shape, (key, got, value)
            assert torch.equal(got, value), (key, got, value)
        else:
            assert got == value, key


def outcome(fn: Any, records: list[dict], **kwargs: Any) -> Any:
    try:
        return fn(records, **kwargs)
    except (TypeError, ValueError) as err:
        return type(err), str(err)


COLUMNS = {
    "ints": lambda i: list(range(i % 4)),
    "floats": lambda i: [0.5 * j for j in range(i % 3 + 1)],
    "int_or_float": lambda i: [1, 2] if i % 2 else [0.25],
    "bools": lambda i: [True, False][: i % 3],
    "bool_or_int": lambda i: [True] if i % 2 else [7, 8],
    "all_empty": lambda i: [],
    "nested": lambda i: [[i, i + 1]] * (i % 3),
    "arrays": lambda i: np.arange(i % 4, dtype=np.int32),
    "float_arrays": lambda i: np.linspace(0, 1, i % 3 + 1),
    "mixed_arrays": lambda i: np.arange(2, dtype=np.int16 if i % 2 else np.float32),
    "tensors": lambda i: torch.arange(i % 3 + 1),
    "numbers": lambda i: i,
    "number_floats": lambda i: i / 3,
    "numpy_scalars": lambda i: np.float64(i),
    "strings": lambda i: f"s{i}",
    "string_lists": lambda i: ["a"] * (i % 2 + 1),
    "none": lambda i: None,
    "labels": lambda i: list(range(i % 3 + 1)),
    "attention_mask": lambda i: [1] * (i % 3 + 1),
    "big_rows": lambda i: list(range(i * 700)),
    "numpy_items": lambda i: [np.int64(i)] * 2,
}


@pytest.mark.parametrize("column", sorted(COLUMNS))
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("size", [1, 2, 5])
def test_each_kind_of_field_matches_padcollate(column, side, size):
    records = [{"id": i, column: COLUMNS[column](i)} for i in range(size)]
    kwargs = {"pad_value": {"id": 0, column: 9}, "label_pad_value": -100, "padding_side": side}
    if column == "labels":
        kwargs["pad_value"] = 3
    expected = outcome(reference, records, **kwargs)
    actual = outcome(collate_records, records, **kwargs)
    if isinstance(expected, tuple):
        assert actual == expected
    else:
        assert_same_batch(actual, expected)


@pytest.mark.parametrize(
    "records",
    [
        [{"x": [1, 2]}, {"x": ["a"]}],  # kinds differ within a field
        [{"x": [1]}, {"x": [[2]]}],  # ragged nesting
        [{"x": [[1, 2]]}, {"x": [[3]]}],  # trailing shapes differ
        [{"x": [2**70]}, {"x": [1]}],  # does not fit in int64
        [{"x": [1]}, {"y": [1]}],  # keys differ
        [{"x": [1]}, [1]],  # not a dict
    ],
)
def test_errors_match_padcollate(records):
    expected = outcome(reference, records)
    assert isinstance(expected, tuple)
    assert outcome(collate_records, records) == expected


def test_pad_value_naming_an_unknown_field_is_an_error():
    with pytest.raises(ValueError, match="pad_value names"):
        collate_records([{"x": [1]}], pad_value={"y": 1})


token_lists = st.lists(st.integers(-(2**40), 2**40), max_size=12)
float_lists = st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=64), max_size=5)


@settings(max_examples=150, deadline=None)
@given(
    tokens=st.lists(token_lists, min_size=1, max_size=9),
    side=st.sampled_from(["right", "left"]),
    pad=st.integers(-5, 5),
    floats=st.data(),
)
def test_random_batches_match_padcollate(tokens, side, pad, floats):
    values = [floats.draw(float_lists) for _ in tokens]
    records = [
        {"id": i, "tokens": t, "weights": w, "name": str(i)}
        for i, (t, w) in enumerate(zip(tokens, values, strict=True))
    ]
    expected = outcome(reference, records, pad_value=pad, padding_side=side)
    actual = outcome(collate_records, records, pad_value=pad, padding_side=side)
    if isinstance(expected, tuple):
        assert actual == expected
    else:
        assert_same_batch(actual, expected)
