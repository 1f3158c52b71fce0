"""Split helpers: sizes, seeded random splits, stratified splits, explicit indices."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import random_split

from datamodules import TensorDataModule
from datamodules.core.splits import (
    compute_split_indices,
    explicit_split_indices,
    random_split_indices,
    split_fingerprint,
    split_sizes,
    stratified_split_indices,
)


@pytest.mark.parametrize(
    ("n", "val", "test", "expected"),
    [
        (100, 0.1, 0.0, (90, 10, 0)),
        (100, 0.1, 0.2, (70, 10, 20)),
        (100, 7, 3, (90, 7, 3)),
        (10, 0.25, 2, (5, 3, 2)),
        (3, 0.0, 0.0, (3, 0, 0)),
    ],
)
def test_split_sizes(n: int, val: float, test: float, expected: tuple[int, int, int]) -> None:
    assert split_sizes(n, val, test) == expected


def test_split_sizes_refuse_an_empty_train_split() -> None:
    with pytest.raises(ValueError, match="leaving 0 for training"):
        split_sizes(10, 6, 4)
    with pytest.raises(ValueError, match="sum to 1"):
        split_sizes(10, 0.5, 0.5)


def test_random_split_matches_torch_random_split_with_seeded_generator() -> None:
    parts = random_split_indices(50, [30, 15, 5], seed=3)
    expected = torch.randperm(50, generator=torch.Generator().manual_seed(3))
    assert torch.equal(torch.cat(parts), expected)
    for n, sizes in ((50, [30, 15, 5]), (1, [1, 0, 0]), (2, [1, 1, 0]), (7, [7, 0, 0])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's, for sizes it reads as fractions
            theirs = random_split(range(n), sizes, generator=torch.Generator().manual_seed(5))
        ours = random_split_indices(n, sizes, seed=5)
        assert [p.tolist() for p in ours] == [list(p.indices) for p in theirs]


def test_an_empty_split_is_named_once_and_torch_says_nothing() -> None:
    dm = TensorDataModule(torch.arange(1.0), num_workers=0)  # one sample: val_split=0.1 -> 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dm.setup("fit")
        dm.setup("validate")
        assert dm.val_dataloader() == []
    messages = [str(w.message) for w in caught]
    assert not any("Length of split" in m for m in messages)
    assert messages == [
        "TensorDataModule: val_split=0.1 of 1 sample rounds to 0: the validation split is "
        "empty, so there is no validation."
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a split not asked for (test_split=0) says nothing
        TensorDataModule(torch.arange(1.0), val_split=0, num_workers=0).setup("fit")


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=6),
    val=st.floats(min_value=0.0, max_value=0.45),
    test=st.floats(min_value=0.0, max_value=0.45),
    seed=st.integers(min_value=0, max_value=10_000),
)
def test_stratified_split_keeps_every_class_within_one(
    counts: list[int], val: float, test: float, seed: int
) -> None:
    labels = np.repeat(np.arange(len(counts)), counts)
    n = len(labels)
    try:
        sizes = split_sizes(n, val, test)
    except ValueError:
        return
    parts = stratified_split_indices(labels, sizes, seed)
    assert [len(p) for p in parts] == list(sizes)
    assert sorted(torch.cat(parts).tolist()) == list(range(n))
    for part, size in zip(parts, sizes, strict=True):
        got = np.bincount(labels[part.numpy()], minlength=len(counts))
        exact = np.asarray(counts) * size / n
        assert np.all(np.abs(got - exact) <= 1.0), (got, exact)


def test_stratified_split_is_seeded() -> None:
    labels = torch.arange(100) % 4
    a = stratified_split_indices(labels, [80, 20], seed=1)
    b = stratified_split_indices(labels, [80, 20], seed=1)
    c = stratified_split_indices(labels, [80, 20], seed=2)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[1].sort().values, c[1].sort().values)


def test_explicit_splits_accept_lists_arrays_and_tensors() -> None:
    out = explicit_split_indices(
        {"train": [0, 1, 2], "val": np.array([3]), "test": torch.tensor([4])}, 5
    )
    assert [out[k].tolist() for k in ("train", "val", "test")] == [[0, 1, 2], [3], [4]]
    only_train = explicit_split_indices({"train": range(3)}, 3)
    assert only_train["val"].numel() == 0 and only_train["test"].numel() == 0


def test_fingerprint_changes_with_any_index() -> None:
    base = {"train": torch.tensor([0, 1]), "val": torch.tensor([2])}
    moved = {"train": torch.tensor([0, 2]), "val": torch.tensor([1])}
    assert split_fingerprint(3, base) == split_fingerprint(3, dict(base))
    assert split_fingerprint(3, base) != split_fingerprint(3, moved)
    assert split_fingerprint(3, base) != split_fingerprint(4, base)


@pytest.mark.parametrize("value", [1.0, 5.0, 100.0])
def test_a_float_is_always_a_fraction(value: float) -> None:
    # YAML's "val_split: 1.0" means a fraction, and a fraction must be below 1.
    with pytest.raises(ValueError, match=rf"val_split={value!r} .* a fraction must be in"):
        split_sizes(200, value, 0)
    assert split_sizes(200, int(value), 0)[1] == int(value)  # the int is a count


def test_stratifying_continuous_labels_is_refused_as_scikit_learn_does() -> None:
    labels = torch.linspace(0, 1, 50)  # every value its own "class"
    with pytest.raises(
        ValueError,
        match=r"stratify=True needs class labels, but these are "
        r"continuous: float values such as .* 50 distinct among 50 samples",
    ):
        compute_split_indices(50, explicit=None, val_split=0.2, test_split=0, seed=0,
                              labels=lambda: labels)  # fmt: skip
    whole = torch.tensor([0.0, 1.0, 2.0] * 10)  # floats that are whole numbers are classes
    parts = compute_split_indices(30, explicit=None, val_split=0.2, test_split=0, seed=0,
                                  labels=lambda: whole)  # fmt: skip
    assert np.bincount(whole[parts["val"]].long().numpy()).tolist() == [2, 2, 2]
