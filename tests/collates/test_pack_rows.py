"""Row tables and batch gathers: every batch equals one built token by token from the plan."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from collates.pack_plan import PackPlan, best_fit_plan, split_plan
from collates.pack_rows import IGNORE_INDEX, LINE_FACTOR, LINE_SLACK, RowTable, gather_rows
from tests.collates.packed_checks import assert_packed_invariants

PAD = 7


def reference(
    tokens: np.ndarray, offsets: np.ndarray, plan: PackPlan, rows: list[int], width: int
) -> dict:
    """The batch of ``rows``, written one token at a time from the plan's pieces."""
    out = {k: [] for k in ("input_ids", "position_ids", "document_ids", "labels", "mask")}
    cu, longest = [0], 0
    for row in rows:
        ids, pos, docs, labels = [], [], [], []
        for p in range(plan.row_ptr[row], plan.row_ptr[row + 1]):
            doc, start, n = int(plan.doc[p]), int(plan.start[p]), int(plan.length[p])
            piece = tokens[offsets[doc] + start : offsets[doc] + start + n].tolist()
            ids += piece
            pos += list(range(start, start + n))
            docs += [doc] * n
            labels += [IGNORE_INDEX, *piece[1:]]
            cu.append(cu[-1] + n)
            longest = max(longest, n)
        pad = width - len(ids)
        if pad:
            cu.append(cu[-1] + pad)
            longest = max(longest, pad)
        out["mask"].append([1] * len(ids) + [0] * pad)
        out["input_ids"].append(ids + [PAD] * pad)
        out["position_ids"].append(pos + list(range(pad)))
        out["document_ids"].append(docs + [-1] * pad)
        out["labels"].append(labels + [IGNORE_INDEX] * pad)
    batch = {k: torch.tensor(v, dtype=torch.int64) for k, v in out.items()}
    batch["attention_mask"] = batch.pop("mask")
    batch["cu_seqlens"] = torch.tensor(cu, dtype=torch.int32)
    batch["max_seqlen"] = longest
    return batch


def corpus(lengths: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(10, 1000, int(lengths.sum())).astype(np.int32)
    return tokens, np.cumsum(lengths) - lengths


def assert_batches_match(plan: PackPlan, lengths: np.ndarray, width: int, seed: int) -> None:
    tokens, offsets = corpus(lengths, seed)
    table = RowTable.from_plan(plan, offsets, width)
    rng = np.random.default_rng(seed)
    batches = [rng.permutation(plan.num_rows)[:size].tolist() for size in (1, 3, 8, 8)]
    batches.append(list(range(plan.num_rows)))
    for rows in batches:
        ours = gather_rows(tokens, table, rows, PAD)
        theirs = reference(tokens, offsets, plan, rows, width)
        assert_packed_invariants(ours, PAD)
        assert ours["max_seqlen"] == theirs["max_seqlen"]
        for key in ("input_ids", "position_ids", "document_ids", "labels", "attention_mask"):
            assert ours[key].dtype == torch.int64 and ours[key].is_contiguous(), key
            assert torch.equal(ours[key], theirs[key]), key
        assert torch.equal(ours["cu_seqlens"], theirs["cu_seqlens"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_split_plans(seed: int) -> None:
    lengths = np.random.default_rng(seed).integers(0, 40, 300)  # some empty documents
    assert_batches_match(split_plan(lengths, 64), lengths, 64, seed)


@pytest.mark.parametrize("seed", [0, 1])
def test_whole_plans_pad_every_row_end(seed: int) -> None:
    lengths = np.random.default_rng(seed).integers(1, 50, 300)
    plan = best_fit_plan(lengths, 64)
    assert_batches_match(plan, lengths, 64, seed)


def test_rows_of_many_pieces_continue_in_extra_lines() -> None:
    # Most rows hold one full-row document; four hold 64 one-token documents each.
    lengths = np.array([64] * 300 + [1] * 200)
    plan = best_fit_plan(lengths, 64)
    tokens, offsets = corpus(lengths)
    table = RowTable.from_plan(plan, offsets, 64)
    pieces = np.diff(plan.row_ptr)
    mean = -(-(len(plan.doc) + plan.num_rows) // plan.num_rows)
    assert table.cells.shape[2] <= LINE_FACTOR * mean + LINE_SLACK < int(pieces.max())
    assert table.extra_lines, "the crowded rows continue in further lines"
    assert_batches_match(plan, lengths, 64, seed=0)
    crowded = sorted(table.extra_lines)
    ours = gather_rows(tokens, table, crowded[:3] + [0], PAD)
    theirs = reference(tokens, offsets, plan, crowded[:3] + [0], 64)
    assert torch.equal(ours["input_ids"], theirs["input_ids"])
    assert torch.equal(ours["cu_seqlens"], theirs["cu_seqlens"])


def test_one_flattened_row_and_an_all_padding_row() -> None:
    lengths = np.array([3, 0, 5, 2])
    tokens, offsets = corpus(lengths)
    flat = PackPlan(
        np.array([0, 2, 3]), np.zeros(3, np.int64), lengths[[0, 2, 3]], np.array([0, 3])
    )
    assert_batches_match(flat, lengths, 10, seed=0)
    empty = PackPlan(
        np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.array([0, 0])
    )
    batch = gather_rows(tokens, RowTable.from_plan(empty, offsets, 4), [0], PAD)
    assert batch["input_ids"].tolist() == [[PAD] * 4]
    assert batch["cu_seqlens"].tolist() == [0, 4] and batch["attention_mask"].sum() == 0


def test_a_row_longer_than_the_width_is_refused() -> None:
    lengths = np.array([5, 5])
    plan = PackPlan(np.array([0, 1]), np.zeros(2, np.int64), lengths, np.array([0, 2]))
    with pytest.raises(ValueError, match="a row holds 10 tokens, more than 8"):
        RowTable.from_plan(plan, np.array([0, 5]), 8)
