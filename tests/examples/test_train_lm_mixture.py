"""examples/train_lm_mixture.py: a short run on two sources (stdlib code and its docs) follows
its annealing schedule, logs the mix and a validation loss per source."""

from __future__ import annotations

import math

from examples.train_lm_mixture import documentation, main


def test_the_docs_source_is_documentation_text() -> None:
    docs = documentation(['"""A module."""\n\ndef f():\n    """Does f."""\n', "x = 1\n"])
    assert docs[0] == "A module.\n\nDoes f." and len(docs) >= 1


def test_a_short_run_anneals_the_mix_and_logs_a_loss_per_source(capsys, tmp_path) -> None:
    argv = ["--epochs", "2", "--rows", "32", "--seq-length", "64", "--batch-size", "8",
            "--dim", "32", "--max-files", "20", "--vocab", "300", "--val-batches", "2",
            "--workers", "0", "--cache", str(tmp_path)]  # fmt: skip
    figures = main(argv)
    history = figures["history"]
    assert [h["quotas"] for h in history] == [{"code": 8, "docs": 24}, {"code": 24, "docs": 8}]
    for h in history:
        assert set(h["val_loss"]) == {"code", "docs"}
        assert all(0 < v < math.log(figures["vocab"]) + 1 for v in h["val_loss"].values())
    assert figures["logged"] == ["mix/code", "mix/docs"]
    printed = capsys.readouterr().out
    assert "stdlib .py files" in printed and "pydoc_data topics" in printed
    assert "epoch 1: code 24 rows, docs 8 rows; val loss" in printed
