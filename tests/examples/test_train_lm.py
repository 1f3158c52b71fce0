"""examples/train_lm.py: attention stays within documents, a short run trains with a real BPE
from the token store, and the second run maps the store instead of tokenizing."""

from __future__ import annotations

import math

import torch

from collates import pack_collate
from examples.train_lm import TinyLM, document_mask, main


def packed_row(a: list[int], b: list[int], c: list[int], width: int = 24) -> dict:
    return pack_collate([a, b, c], seq_length=width, pad_id=0)


def outputs(model: TinyLM, batch: dict) -> torch.Tensor:
    with torch.no_grad():
        return model(batch["input_ids"], batch["position_ids"], batch["document_ids"])


def test_a_tokens_output_ignores_the_other_documents_in_its_row() -> None:
    torch.manual_seed(0)
    model = TinyLM(dim=32, layers=2, heads=4).eval()
    a, b, c = list(range(10, 17)), list(range(40, 49)), list(range(70, 75))
    base = packed_row(a, b, c)
    assert base["input_ids"].shape == (1, 24)  # 21 tokens and 3 of padding in one row
    docs = base["document_ids"][0]
    out = outputs(model, base)
    # Another first document: the second and third documents' outputs do not change at all.
    other_a = outputs(model, packed_row([200 + i for i in range(7)], b, c))
    assert torch.equal(other_a[0, docs >= 1], out[0, docs >= 1])
    assert not torch.allclose(other_a[0, docs == 0], out[0, docs == 0])
    # Another last document: the first two do not change (and causality alone would not do
    # it for the third: the mask is what keeps the first two out of it).
    other_c = outputs(model, packed_row(a, b, [250, 251, 252, 253, 254]))
    assert torch.equal(other_c[0, (docs == 0) | (docs == 1)], out[0, (docs == 0) | (docs == 1)])
    # Without the block-diagonal mask (one document per row) the first document leaks.
    merged = dict(base, document_ids=torch.zeros_like(base["document_ids"]))
    merged_other = dict(
        packed_row([200 + i for i in range(7)], b, c), document_ids=merged["document_ids"]
    )
    assert not torch.allclose(
        outputs(model, merged)[0, 7:21], outputs(model, merged_other)[0, 7:21]
    )


def test_document_mask_is_block_diagonal_and_causal() -> None:
    mask = document_mask(torch.tensor([[0, 0, 1, 1, 1, -1]]))[0, 0]
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0],
            [0, 0, 1, 0, 0, 0],
            [0, 0, 1, 1, 0, 0],
            [0, 0, 1, 1, 1, 0],
            [0, 0, 0, 0, 0, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(mask, expected)


def test_a_short_run_trains_and_the_second_run_maps_the_store(capsys, tmp_path) -> None:
    argv = ["--max-steps", "60", "--max-files", "12", "--val-batches", "4", "--seq-length", "64",
            "--batch-size", "8", "--dim", "48", "--workers", "0", "--vocab", "512",
            "--cache", str(tmp_path)]  # fmt: skip
    figures = main(argv)
    assert figures["steps"] == 60 and figures["tokens_per_s"] > 0
    assert figures["val_loss"] < 0.85 * math.log(512), figures  # uniform tokens: log(512)
    printed = capsys.readouterr().out
    assert "tokenized into the token store" in printed and "512-id BPE" in printed
    assert "val loss" in printed and "real tokens/s" in printed
    again = main([*argv[:1], "1", *argv[2:]])  # one step: the second run starts at once
    assert "mapped the token store" in capsys.readouterr().out
    assert again["setup_seconds"] < figures["setup_seconds"]
