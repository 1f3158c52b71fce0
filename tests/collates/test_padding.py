"""Tests for collates.padding: PadCollate, pad_collate and collate_records."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

from collates import PadCollate, pad_collate
from collates.records import collate_records

ROOT = Path(__file__).resolve().parents[2]


def seqs(lengths, trailing=(), dtype=torch.int64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 100, (n, *trailing), generator=g).to(dtype) for n in lengths]


def assert_same(actual, expected):
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.equal(actual, expected), (actual, expected)


# -- parity with pad_sequence ----------------------------------------------------------------


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("trailing", [(), (3,), (2, 2), (1100,)])  # (1100,): pad_sequence path
@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.uint8, torch.bool])
def test_matches_pad_sequence(side, trailing, dtype):
    batch = seqs([5, 0, 3, 7, 1], trailing, dtype)
    pad = True if dtype == torch.bool else 9
    padded, mask, lengths = PadCollate(pad, padding_side=side)(batch)
    expected = pad_sequence(batch, batch_first=True, padding_value=pad, padding_side=side)
    assert_same(padded, expected)
    assert_same(lengths, torch.tensor([5, 0, 3, 7, 1]))
    assert mask.shape == (5, 7) and mask.dtype == torch.int64


@pytest.mark.parametrize("lengths", [[40] * 4, [3000, 2, 17], [1], [1024, 1025]])
def test_matches_pad_sequence_sizes(lengths):
    batch = seqs(lengths, dtype=torch.float64)
    for side in ("right", "left"):
        expected = pad_sequence(batch, batch_first=True, padding_value=-1.5, padding_side=side)
        assert_same(PadCollate(-1.5, padding_side=side)(batch)[0], expected)


def test_default_function_is_pad_sequence_with_defaults():
    batch = seqs([4, 2, 6], (2,), torch.float16)
    padded, mask, lengths = pad_collate(batch)
    assert_same(padded, pad_sequence(batch, batch_first=True))
    assert_same(mask, torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0], [1] * 6]))
    assert_same(lengths, torch.tensor([4, 2, 6]))


def test_large_int_pad_value_is_exact_on_every_path():
    pad = 2**62 + 1  # not representable as a double
    for trailing in [(), (2000,)]:
        for multiple in (None, 8):
            padded, _, _ = PadCollate(pad, pad_to_multiple_of=multiple)(seqs([2, 1], trailing))
            assert padded[1, 1].flatten()[0].item() == pad


# -- bare sequences --------------------------------------------------------------------------


def test_bare_tensors_exact_output():
    batch = [torch.tensor([1, 2, 3]), torch.tensor([4]), torch.tensor([], dtype=torch.int64)]
    padded, mask, lengths = PadCollate(pad_value=-1)(batch)
    assert_same(padded, torch.tensor([[1, 2, 3], [4, -1, -1], [-1, -1, -1]]))
    assert_same(mask, torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]]))
    assert_same(lengths, torch.tensor([3, 1, 0]))


def test_left_padding_exact_output_and_bool_mask():
    batch = [torch.tensor([1, 2, 3]), torch.tensor([4])]
    padded, mask, lengths = PadCollate(padding_side="left", mask_dtype=torch.bool)(batch)
    assert_same(padded, torch.tensor([[1, 2, 3], [0, 0, 4]]))
    assert_same(mask, torch.tensor([[True, True, True], [False, False, True]]))
    assert_same(lengths, torch.tensor([3, 1]))


def test_all_zero_length():
    padded, mask, lengths = pad_collate([torch.zeros(0, 3), torch.zeros(0, 3)])
    assert padded.shape == (2, 0, 3) and padded.dtype == torch.float32
    assert mask.shape == (2, 0) and lengths.tolist() == [0, 0]
    padded, _, _ = PadCollate(pad_to_multiple_of=4)([torch.zeros(0, dtype=torch.long)])
    assert padded.shape == (1, 0)


def test_lists_and_arrays_become_tensors():
    padded, _, lengths = pad_collate([[1, 2], [3], []])
    assert_same(padded, torch.tensor([[1, 2], [3, 0], [0, 0]]))
    assert_same(lengths, torch.tensor([2, 1, 0]))
    padded, _, _ = pad_collate([[0.5, 1.0], [2.0]])
    assert_same(padded, torch.tensor([[0.5, 1.0], [2.0, 0.0]]))  # float32
    padded, _, _ = pad_collate([np.arange(3, dtype=np.int32), np.arange(1, dtype=np.int32)])
    assert_same(padded, torch.tensor([[0, 1, 2], [0, 0, 0]], dtype=torch.int32))


def test_mixed_numeric_dtypes_are_promoted():
    padded, _, _ = pad_collate([torch.tensor([1, 2]), torch.tensor([0.5])])
    assert_same(padded, torch.tensor([[1.0, 2.0], [0.5, 0.0]]))


# -- pad_to_multiple_of and truncation -------------------------------------------------------


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("trailing", [(), (1500,)])
def test_pad_to_multiple_of(side, trailing):
    batch = seqs([5, 3], trailing)
    padded, mask, lengths = PadCollate(7, padding_side=side, pad_to_multiple_of=4)(batch)
    assert padded.shape == (2, 8, *trailing)
    ref = pad_sequence(batch, batch_first=True, padding_value=7, padding_side=side)
    if side == "right":
        assert_same(padded[:, :5], ref)
        assert (padded[:, 5:] == 7).all()
        assert_same(mask, torch.tensor([[1] * 5 + [0] * 3, [1] * 3 + [0] * 5]))
    else:
        assert_same(padded[:, 3:], ref)
        assert (padded[:, :3] == 7).all()
        assert_same(mask, torch.tensor([[0] * 3 + [1] * 5, [0] * 5 + [1] * 3]))
    assert_same(lengths, torch.tensor([5, 3]))
    exact = PadCollate(pad_to_multiple_of=4)(seqs([8, 4], trailing))[0]
    assert exact.shape == (2, 8, *trailing)


def test_truncation_keeps_first_items_by_default():
    batch = [torch.arange(6), torch.arange(2)]
    padded, mask, lengths = PadCollate(max_length=4)(batch)
    assert_same(padded, torch.tensor([[0, 1, 2, 3], [0, 1, 0, 0]]))
    assert_same(mask, torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]))
    assert_same(lengths, torch.tensor([4, 2]))


def test_truncation_side_left_with_left_padding():
    batch = [torch.arange(6), torch.arange(2)]
    collate = PadCollate(max_length=4, truncation_side="left", padding_side="left")
    padded, mask, lengths = collate(batch)
    assert_same(padded, torch.tensor([[2, 3, 4, 5], [0, 0, 0, 1]]))
    assert_same(mask, torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]]))
    assert_same(lengths, torch.tensor([4, 2]))


def test_truncation_with_multiple_and_labels_stays_aligned():
    collate = PadCollate(max_length=4, pad_to_multiple_of=2, label_pad_value=-100)
    out = collate(
        [
            {"input_ids": list(range(1, 8)), "labels": list(range(11, 18))},
            {"input_ids": [1], "labels": [11]},
        ]
    )
    assert_same(out["input_ids"], torch.tensor([[1, 2, 3, 4], [1, 0, 0, 0]]))
    assert_same(out["labels"], torch.tensor([[11, 12, 13, 14], [11, -100, -100, -100]]))
    assert_same(out["lengths"], torch.tensor([4, 1]))


# -- tuples ----------------------------------------------------------------------------------


def test_tuple_samples_exact_output():
    batch = [(torch.tensor([1, 2, 3]), 1, "a"), (torch.tensor([4]), 0, "b")]
    out = PadCollate()(batch)
    assert isinstance(out, tuple) and len(out) == 5
    padded, labels, names, mask, lengths = out
    assert_same(padded, torch.tensor([[1, 2, 3], [4, 0, 0]]))
    assert_same(labels, torch.tensor([1, 0]))
    assert names == ["a", "b"]
    assert_same(mask, torch.tensor([[1, 1, 1], [1, 0, 0]]))
    assert_same(lengths, torch.tensor([3, 1]))


def test_tuple_token_labels_use_label_pad_value_and_main_mask():
    batch = [([1, 2, 3], [5, 6, 7], 0.5), ([4], [8], 1.5)]
    tokens, tags, score, mask, lengths = PadCollate(label_pad_value=-100)(batch)
    assert_same(tokens, torch.tensor([[1, 2, 3], [4, 0, 0]]))
    assert_same(tags, torch.tensor([[5, 6, 7], [8, -100, -100]]))
    assert_same(score, torch.tensor([0.5, 1.5]))
    assert_same(mask, torch.tensor([[1, 1, 1], [1, 0, 0]]))
    assert_same(lengths, torch.tensor([3, 1]))


def test_tuple_of_numbers_only_is_stacked_without_extras():
    out = pad_collate([(1, 2.0, True), (3, 4.0, False)])
    assert len(out) == 3
    assert_same(out[0], torch.tensor([1, 3]))
    assert_same(out[1], torch.tensor([2.0, 4.0]))
    assert_same(out[2], torch.tensor([True, False]))


def test_numpy_scalars_zero_d_tensors_and_objects():
    out = pad_collate([(np.float64(0.5), torch.tensor(1), None), (np.float64(2.0), 3, "x")])
    assert len(out) == 3
    assert_same(out[0], torch.tensor([0.5, 2.0], dtype=torch.float64))
    assert_same(out[1], torch.tensor([1, 3]))
    assert out[2] == [None, "x"]


def test_list_samples_are_fields_unless_they_start_with_a_number():
    out = pad_collate([[torch.tensor([1, 2]), 0], [torch.tensor([3]), 1]])
    assert isinstance(out, tuple) and len(out) == 4
    assert_same(out[0], torch.tensor([[1, 2], [3, 0]]))
    assert_same(out[1], torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="sequence: sample 0 .*rectangular"):
        pad_collate([[1, "a"], [2, "b"]])  # a list starting with a number is a sequence


def test_tuple_pad_value_by_position():
    out = PadCollate({0: 9, 1: 8})([([1, 1], [2]), ([1], [2, 2])])
    assert_same(out[0], torch.tensor([[1, 1], [1, 9]]))
    assert_same(out[1], torch.tensor([[2, 8], [2, 2]]))


# -- dicts -----------------------------------------------------------------------------------


def test_dict_samples_exact_output_and_key_order():
    batch = [
        {"id": "x", "input_ids": torch.tensor([5, 6, 7]), "label": 2, "weight": 0.5},
        {"id": "y", "input_ids": torch.tensor([8]), "label": 0, "weight": 1.0},
    ]
    out = PadCollate(pad_value=1)(batch)
    assert list(out) == ["id", "input_ids", "label", "weight", "attention_mask", "lengths"]
    assert out["id"] == ["x", "y"]
    assert_same(out["input_ids"], torch.tensor([[5, 6, 7], [8, 1, 1]]))
    assert_same(out["label"], torch.tensor([2, 0]))
    assert_same(out["weight"], torch.tensor([0.5, 1.0], dtype=torch.float32))
    assert_same(out["attention_mask"], torch.tensor([[1, 1, 1], [1, 0, 0]]))
    assert_same(out["lengths"], torch.tensor([3, 1]))


def test_dict_several_sequences_named_masks_and_per_field_pad():
    batch = [
        {"src": [1, 2, 3], "tgt": [4, 5], "labels": [7, 7, 7]},
        {"src": [1], "tgt": [4, 5, 6, 6], "labels": [7]},
    ]
    out = PadCollate({"src": 0, "tgt": 3}, label_pad_value=-100)(batch)
    assert list(out) == [
        "src",
        "tgt",
        "labels",
        "attention_mask",
        "lengths",
        "tgt_attention_mask",
        "tgt_lengths",
    ]
    assert_same(out["src"], torch.tensor([[1, 2, 3], [1, 0, 0]]))
    assert_same(out["tgt"], torch.tensor([[4, 5, 3, 3], [4, 5, 6, 6]]))
    assert_same(out["labels"], torch.tensor([[7, 7, 7], [7, -100, -100]]))
    assert_same(out["lengths"], torch.tensor([3, 1]))
    assert_same(out["tgt_attention_mask"], torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]]))
    assert_same(out["tgt_lengths"], torch.tensor([2, 4]))


def test_dict_explicit_pad_value_beats_label_pad_value():
    out = PadCollate({"labels": -1}, label_pad_value=-100)(
        [{"x": [1, 2], "labels": [1, 2]}, {"x": [1], "labels": [1]}]
    )
    assert_same(out["labels"], torch.tensor([[1, 2], [1, -1]]))


def test_tokenizer_style_dict_keeps_its_own_attention_mask():
    batch = [
        {"input_ids": [101, 7, 102], "attention_mask": [1, 1, 1]},
        {"input_ids": [101, 102], "attention_mask": [1, 1]},
    ]
    out = PadCollate(pad_value=3, padding_side="left")(batch)
    assert list(out) == ["input_ids", "attention_mask", "lengths"]
    assert_same(out["input_ids"], torch.tensor([[101, 7, 102], [3, 101, 102]]))
    assert_same(out["attention_mask"], torch.tensor([[1, 1, 1], [0, 1, 1]]))
    assert_same(out["lengths"], torch.tensor([3, 2]))


def test_sequence_fields_stacks_fixed_size_tensors():
    batch = [
        {"image": torch.ones(3, 4, 4), "caption": [1, 2, 3]},
        {"image": torch.zeros(3, 4, 4), "caption": [4]},
    ]
    out = PadCollate(sequence_fields=["caption"])(batch)
    assert list(out) == ["image", "caption", "attention_mask", "lengths"]
    assert out["image"].shape == (2, 3, 4, 4)
    assert_same(out["attention_mask"], torch.tensor([[1, 1, 1], [1, 0, 0]]))
    batch[1]["image"] = torch.zeros(1, 4, 4)
    with pytest.raises(ValueError, match=r"field 'image': sample 1 .*stacked"):
        PadCollate(sequence_fields=["caption"])(batch)


def test_nd_dict_field_matches_pad_sequence():
    feats = seqs([6, 2, 4], (80,), torch.float32)
    out = PadCollate(padding_side="left")([{"feats": f, "y": 1} for f in feats])
    expected = pad_sequence(feats, batch_first=True, padding_side="left")
    assert_same(out["feats"], expected)
    assert_same(out["lengths"], torch.tensor([6, 2, 4]))


# -- collate_records -------------------------------------------------------------------------


def test_collate_records_field_by_field():
    records = [
        {"text": "a", "ids": [1, 2, 3], "vec": np.ones(2, np.float32), "y": 1, "p": 0.5},
        {"text": "b", "ids": [4], "vec": np.zeros(2, np.float32), "y": 0, "p": 1.5},
    ]
    out = collate_records(records, pad_value={"ids": -1})
    assert list(out) == ["text", "ids", "vec", "y", "p"]
    assert out["text"] == ["a", "b"]
    assert_same(out["ids"], torch.tensor([[1, 2, 3], [4, -1, -1]]))
    assert_same(out["vec"], torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    assert_same(out["y"], torch.tensor([1, 0]))
    assert_same(out["p"], torch.tensor([0.5, 1.5]))
    with pytest.raises(ValueError, match="empty batch"):
        collate_records([])


# -- errors ----------------------------------------------------------------------------------


def test_empty_batch():
    with pytest.raises(ValueError, match="empty batch"):
        pad_collate([])


@pytest.mark.parametrize(
    ("batch", "error", "pattern"),
    [
        ([{"a": [1], "b": 1}, {"a": [1]}], ValueError, r"sample 1 has keys.*missing: \['b'\]"),
        ([([1], 1), ([1], 1, 2)], ValueError, r"sample 1 has 3 fields but sample 0 has 2"),
        (
            [{"x": torch.zeros(2, 3)}, {"x": torch.zeros(2, 4)}],
            ValueError,
            r"field 'x': sample 1 has shape \(2, 4\) but sample 0 has shape \(2, 3\)",
        ),
        ([torch.zeros(2, 3), torch.zeros(2)], ValueError, r"sequence: sample 1 has shape \(2,\)"),
        ([{"x": [1, 2]}, {"x": "ab"}], TypeError, r"field 'x': sample 1 holds a str"),
        ([(torch.ones(2), 1), (torch.ones(2), "a")], TypeError, r"field 1: sample 1 holds a str"),
        ([{"x": 1}, {"x": [1]}], TypeError, r"field 'x': sample 1 holds a list"),
        ([torch.ones(2), (torch.ones(2), 1)], TypeError, r"sample 1 is a tuple"),
        ([{"x": [1]}, [1]], TypeError, r"sample 1 is a list.*sample 0 is a dict"),
        ([torch.tensor(1), torch.tensor(2)], TypeError, r"at least one dimension"),
        ([{"x": [[1, 2], [3]]}], ValueError, r"field 'x': sample 0 .*rectangular"),
        ([object()], TypeError, r"sample 0 is a object"),
    ],
)
def test_structure_errors_name_field_and_sample(batch, error, pattern):
    with pytest.raises(error, match=pattern):
        pad_collate(batch)


def test_option_errors():
    with pytest.raises(ValueError, match="padding_side must be 'left' or 'right', got 'up'"):
        PadCollate(padding_side="up")
    with pytest.raises(ValueError, match="truncation_side"):
        PadCollate(truncation_side="middle")
    with pytest.raises(ValueError, match="max_length must be None or a positive int, got 0"):
        PadCollate(max_length=0)
    with pytest.raises(ValueError, match=r"max_length \(10\) must be a multiple"):
        PadCollate(max_length=10, pad_to_multiple_of=8)
    with pytest.raises(TypeError, match=r"pad_value\['x'\] must be a number"):
        PadCollate({"x": "0"})
    with pytest.raises(TypeError, match="sequence_fields must be a list"):
        PadCollate(sequence_fields="input_ids")
    with pytest.raises(TypeError, match="pad_value is a mapping"):
        PadCollate({"x": 1})([torch.ones(2)])
    with pytest.raises(ValueError, match=r"pad_value names \['input_id'\]"):
        PadCollate({"input_id": 1})([{"input_ids": [1]}])
    with pytest.raises(ValueError, match=r"sequence_fields names \['tokens'\]"):
        PadCollate(sequence_fields=["tokens"])([{"input_ids": [1]}])
    with pytest.raises(TypeError, match=r"field 'y' is in sequence_fields but holds a number"):
        PadCollate(sequence_fields=["y"])([{"y": 1}])


# -- processes, pickling, imports ------------------------------------------------------------


class VarLenDataset(Dataset):
    def __init__(self, n: int = 24) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": torch.arange(1, i % 7 + 2), "label": i % 3, "name": f"s{i}"}


@pytest.mark.parametrize("collate", [pad_collate, PadCollate(label_pad_value=-100, max_length=4)])
def test_dataloader_with_two_workers(collate):
    loader = DataLoader(VarLenDataset(), batch_size=5, num_workers=2, collate_fn=collate)
    seen = []
    for batch in loader:
        ids, mask, lengths = batch["input_ids"], batch["attention_mask"], batch["lengths"]
        assert ids.dtype == torch.int64 and ids.shape == mask.shape
        assert torch.equal(mask.sum(1), lengths)
        seen += batch["name"]
    assert seen == [f"s{i}" for i in range(24)]


def test_pickle_round_trip_and_repr():
    collate = PadCollate({"x": 1}, padding_side="left", mask_dtype=torch.bool)
    clone = pickle.loads(pickle.dumps(collate))
    assert vars(clone) == vars(collate)
    assert pickle.loads(pickle.dumps(pad_collate)) is pad_collate
    assert "padding_side='left'" in repr(collate)


def test_collates_never_imports_datamodules():
    for path in sorted((ROOT / "collates").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n.split(".")[0] == "datamodules" for n in names), path


# -- property test ---------------------------------------------------------------------------


def reference(batch, pad, side, max_length, trunc_side, multiple):
    """Row-by-row reference built from plain slicing."""
    cut = []
    for t in batch:
        if max_length is not None and len(t) > max_length:
            t = t[:max_length] if trunc_side == "right" else t[len(t) - max_length :]
        cut.append(t)
    lengths = [len(t) for t in cut]
    width = max(lengths)
    if multiple:
        width = -(-width // multiple) * multiple
    out = torch.full((len(cut), width, *batch[0].shape[1:]), pad, dtype=batch[0].dtype)
    mask = torch.zeros(len(cut), width, dtype=torch.int64)
    for i, (t, n) in enumerate(zip(cut, lengths, strict=True)):
        start = 0 if side == "right" else width - n
        out[i, start : start + n] = t
        mask[i, start : start + n] = 1
    return out, mask, torch.tensor(lengths)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=8),
    trailing=st.sampled_from([(), (3,), (30,)]),
    side=st.sampled_from(["right", "left"]),
    trunc_side=st.sampled_from(["right", "left"]),
    multiple=st.sampled_from([None, 1, 4]),
    max_length=st.sampled_from([None, 8, 32]),
    pad=st.integers(-5, 5),
)
def test_property_matches_reference(lengths, trailing, side, trunc_side, multiple, max_length, pad):
    batch = seqs(lengths, trailing)
    collate = PadCollate(
        pad,
        padding_side=side,
        truncation_side=trunc_side,
        max_length=max_length,
        pad_to_multiple_of=multiple,
    )
    for got, want in zip(
        collate(batch),
        reference(batch, pad, side, max_length, trunc_side, multiple),
        strict=True,
    ):
        assert_same(got, want)
    if max_length is None and multiple is None:
        expected = pad_sequence(batch, batch_first=True, padding_value=pad, padding_side=side)
        assert_same(collate(batch)[0], expected)
