"""Tests for collates.packing: PackCollate / pack_collate, and collates.pack_plan."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from collates import PackCollate, pack_collate
from collates.pack_plan import best_fit_plan, split_plan
from tests.collates.packed_checks import assert_packed_invariants, piece_starts


def samples(lengths: list[int], seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 50, (n,), generator=g) for n in lengths]


LENGTHS = [5, 1, 12, 3, 7, 7, 2, 9, 4, 11, 6]


def real_pieces(batch: dict) -> list[tuple[int, int, int]]:
    """(document, position, token) of every real token, row after row."""
    real = batch["document_ids"] >= 0
    return list(
        zip(
            batch["document_ids"][real].tolist(),
            batch["position_ids"][real].tolist(),
            batch["input_ids"][real].tolist(),
            strict=True,
        )
    )


class TestSplit:
    @pytest.mark.parametrize("seq_length", [1, 4, 8, 13, 100])
    def test_rows_hold_the_samples_end_to_end(self, seq_length: int) -> None:
        data = samples(LENGTHS)
        batch = pack_collate(data, seq_length=seq_length, pad_id=0)
        assert_packed_invariants(batch)
        total = sum(LENGTHS)
        rows = -(-total // seq_length)
        assert batch["input_ids"].shape == (rows, seq_length)
        # Every token exactly once, in order, position ids counting on across rows.
        expected = [(d, p, int(t)) for d, s in enumerate(data) for p, t in enumerate(s)]
        assert real_pieces(batch) == expected
        # Only the last row is short.
        assert batch["attention_mask"][:-1].all()
        assert int(batch["attention_mask"][-1].sum()) == total - (rows - 1) * seq_length

    def test_documented_example(self) -> None:
        batch = pack_collate([[5, 6, 7], [8, 9]], seq_length=4)
        assert batch["input_ids"].tolist() == [[5, 6, 7, 8], [9, 0, 0, 0]]
        assert batch["position_ids"].tolist() == [[0, 1, 2, 0], [1, 0, 1, 2]]
        assert batch["document_ids"].tolist() == [[0, 0, 0, 1], [1, -1, -1, -1]]
        assert batch["labels"].tolist() == [[-100, 6, 7, -100], [-100, -100, -100, -100]]
        assert batch["cu_seqlens"].tolist() == [0, 3, 4, 5, 8]
        assert batch["max_seqlen"] == 3


class TestWhole:
    @pytest.mark.parametrize("seq_length", [12, 16, 40])
    def test_no_sample_is_split(self, seq_length: int) -> None:
        data = samples(LENGTHS, seed=1)
        batch = pack_collate(data, seq_length=seq_length, pack_mode="whole", pad_id=0)
        assert_packed_invariants(batch)
        docs = batch["document_ids"]
        for d, sample in enumerate(data):
            where = torch.nonzero(docs == d)
            assert len(set(where[:, 0].tolist())) == 1, f"sample {d} in one row"
            row, cols = int(where[0, 0]), where[:, 1]
            assert cols.tolist() == list(range(int(cols[0]), int(cols[0]) + len(sample)))
            assert torch.equal(batch["input_ids"][row, cols], sample)
            assert batch["position_ids"][row, cols].tolist() == list(range(len(sample)))
        # Best-fit decreasing reaches the lower bound on these lengths.
        assert batch["input_ids"].shape[0] == -(-sum(LENGTHS) // seq_length)

    def test_a_sample_longer_than_a_row_fails_naming_it(self) -> None:
        with pytest.raises(ValueError, match="sample 2 has 12 tokens.*seq_length=10"):
            pack_collate(samples(LENGTHS), seq_length=10, pack_mode="whole")


class TestFlattened:
    def test_one_row_like_data_collator_with_flattening(self) -> None:
        data = samples(LENGTHS, seed=2)
        batch = PackCollate()(data)
        assert_packed_invariants(batch)
        total = sum(LENGTHS)
        assert batch["input_ids"].shape == (1, total)
        assert batch["input_ids"][0].tolist() == torch.cat(data).tolist()
        assert batch["position_ids"][0].tolist() == [p for n in LENGTHS for p in range(n)]
        assert batch["cu_seqlens"].tolist() == [0, *np.cumsum(LENGTHS).tolist()]
        assert batch["max_seqlen"] == max(LENGTHS)

    def test_equals_transformers_data_collator_with_flattening(self) -> None:
        from transformers import DataCollatorWithFlattening

        data = samples(LENGTHS, seed=3)
        theirs = DataCollatorWithFlattening(return_tensors="pt")(
            [{"input_ids": s.tolist()} for s in data]
        )
        ours = pack_collate([{"input_ids": s} for s in data])
        for key in ("input_ids", "labels", "position_ids"):
            assert ours[key].tolist() == theirs[key].tolist(), key


class TestInputs:
    def test_tensors_lists_arrays_and_dicts_give_the_same_batch(self) -> None:
        data = samples(LENGTHS, seed=4)
        kinds = [
            data,
            [s.tolist() for s in data],
            [s.numpy().astype(np.int32) for s in data],
            [{"input_ids": s, "other": 1} for s in data],
        ]
        batches = [pack_collate(k, seq_length=8) for k in kinds]
        for other in batches[1:]:
            for key, value in batches[0].items():
                assert (
                    (value == other[key]) if key == "max_seqlen" else torch.equal(value, other[key])
                ), key

    def test_empty_samples_take_no_place(self) -> None:
        batch = pack_collate([[1, 2], [], [3]], seq_length=2)
        assert batch["input_ids"].tolist() == [[1, 2], [3, 0]]
        assert batch["document_ids"].tolist() == [[0, 0], [2, -1]]
        assert_packed_invariants(batch)

    @pytest.mark.parametrize(
        ("batch", "options", "error", "match"),
        [
            ([], {}, ValueError, "empty"),
            ([torch.ones(3)], {}, TypeError, "sample 0 .*float32.*integer"),
            ([torch.ones(2, 2, dtype=torch.long)], {}, TypeError, "shape \\(2, 2\\)"),
            ([[1, 2], "abc"], {}, TypeError, "sample 1 is str"),
            ([{"ids": [1]}], {}, KeyError, "without 'input_ids'"),
            ([[1, 2]], {"seq_length": 0}, ValueError, "seq_length=0"),
            ([[1, 2]], {"seq_length": 2.5}, TypeError, "seq_length=2.5"),
            ([[1, 2]], {"pack_mode": "greedy"}, ValueError, "pack_mode='greedy'"),
            ([[1, 2]], {"pad_id": None}, TypeError, "pad_id=None"),
        ],
    )
    def test_bad_input_fails_naming_it(self, batch, options, error, match) -> None:
        with pytest.raises(error, match=match):
            pack_collate(batch, **options)

    def test_bad_options_fail_at_construction(self) -> None:
        with pytest.raises(ValueError, match="seq_length=-1"):
            PackCollate(seq_length=-1)

    def test_works_as_a_dataloader_collate_fn_with_workers(self) -> None:
        data = samples(LENGTHS * 4, seed=5)
        loader = DataLoader(data, batch_size=6, collate_fn=PackCollate(8), num_workers=2)
        seen = []
        for batch in loader:
            assert_packed_invariants(batch)
            seen.append(int(batch["attention_mask"].sum()))
        assert sum(seen) == sum(LENGTHS) * 4


class TestPlans:
    def test_split_plan_cuts_every_seq_length_tokens(self) -> None:
        plan = split_plan(np.array(LENGTHS), 8)
        assert plan.num_rows == -(-sum(LENGTHS) // 8) and plan.num_tokens == sum(LENGTHS)
        per_row = np.add.reduceat(plan.length, plan.row_ptr[:-1])
        assert per_row[:-1].tolist() == [8] * (plan.num_rows - 1)
        for d, n in enumerate(LENGTHS):
            mine = plan.doc == d
            assert plan.length[mine].sum() == n
            assert plan.start[mine].tolist() == np.cumsum([0, *plan.length[mine][:-1]]).tolist()

    def test_best_fit_row_count_depends_only_on_the_lengths(self) -> None:
        rng = np.random.default_rng(0)
        lengths = rng.integers(1, 60, 500)
        counts = {best_fit_plan(rng.permutation(lengths), 64, pool=None).num_rows for _ in range(4)}
        assert len(counts) == 1


def labelled(lengths: list[int], seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Samples with prompt-masked labels: the first third of each sample is -100."""
    out = []
    for ids in samples(lengths, seed):
        labels = ids.clone()
        labels[: len(ids) // 3] = -100
        out.append({"input_ids": ids, "labels": labels})
    return out


def expected_labels(batch: dict, data: list[dict]) -> torch.Tensor:
    """Each real token's given label (found by its document and position), -100 at piece
    starts and padding."""
    docs, pos = batch["document_ids"], batch["position_ids"]
    want = torch.full_like(docs, -100)
    starts = piece_starts(batch)
    for r, c in zip(*torch.nonzero((docs >= 0) & ~starts, as_tuple=True), strict=True):
        want[r, c] = data[int(docs[r, c])]["labels"][int(pos[r, c])]
    return want


class TestGivenLabels:
    @pytest.mark.parametrize(
        "options",
        [{"seq_length": 8}, {"seq_length": 13, "pack_mode": "whole"}, {"seq_length": None}],
    )
    def test_given_labels_are_kept_with_minus_100_at_piece_starts(self, options) -> None:
        data = labelled(LENGTHS, seed=7)
        batch = pack_collate(data, **options)
        assert torch.equal(batch["labels"], expected_labels(batch, data))
        # The rest of the batch is what the same ids without labels give.
        plain = pack_collate([d["input_ids"] for d in data], **options)
        for key in ("input_ids", "position_ids", "document_ids", "attention_mask", "cu_seqlens"):
            assert torch.equal(batch[key], plain[key]), key
        # A masked prompt stays masked: no -100 of a sample became a label.
        assert int((batch["labels"] != -100).sum()) < int((plain["labels"] != -100).sum())

    def test_explicit_rows(self) -> None:
        data = [
            {"input_ids": [5, 6, 7], "labels": [-100, 6, 7]},
            {"input_ids": [8, 9, 4], "labels": [-100, -100, 4]},
        ]
        batch = PackCollate(seq_length=4, pack_mode="whole", pad_id=0)(data)
        assert batch["input_ids"].tolist() == [[5, 6, 7, 0], [8, 9, 4, 0]]
        assert batch["labels"].tolist() == [[-100, 6, 7, -100], [-100, -100, 4, -100]]
        split = pack_collate(data, seq_length=4)
        assert split["labels"].tolist() == [[-100, 6, 7, -100], [-100, 4, -100, -100]]

    def test_equals_transformers_data_collator_with_flattening_with_labels(self) -> None:
        from transformers import DataCollatorWithFlattening

        data = labelled(LENGTHS, seed=8)
        theirs = DataCollatorWithFlattening(return_tensors="pt")(
            [{k: v.tolist() for k, v in d.items()} for d in data]
        )
        ours = pack_collate(data)
        for key in ("input_ids", "labels", "position_ids"):
            assert ours[key].tolist() == theirs[key].tolist(), key

    def test_labels_in_some_samples_or_of_another_length_fail(self) -> None:
        with pytest.raises(ValueError, match="sample 1 has no 'labels' but sample 0 has"):
            pack_collate([{"input_ids": [1, 2], "labels": [1, 2]}, {"input_ids": [3]}])
        with pytest.raises(ValueError, match="sample 0 has 1 labels for 2 token ids"):
            pack_collate([{"input_ids": [1, 2], "labels": [2]}])
        with pytest.raises(TypeError, match="sample 0 is str"):
            pack_collate([{"input_ids": [1, 2], "labels": "ab"}])
