"""examples/train_clip.py: image-caption pairs of the digits, a two-tower model trained on them
through ImageTextDataModule, and held-out digits classified zero-shot from class captions."""

from __future__ import annotations

from pathlib import Path

import torch

from examples.train_clip import main


def test_the_two_towers_classify_held_out_digits_zero_shot(tmp_path: Path, capsys) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # (as the other example tests: a tiny model on a shared machine)
    try:
        figures = main(["--cache", str(tmp_path), "--epochs", "4", "--workers", "1"])
    finally:
        torch.set_num_threads(threads)
    assert figures["held_out_images"] == 359  # 20% of each digit's scans
    assert figures["train_pairs"] == 1797 - 359
    assert figures["zero_shot_acc"] >= 0.8, figures  # chance: 0.1
    assert "zero-shot accuracy:" in capsys.readouterr().out
    assert len(list((tmp_path / "digit-pairs").glob("*.tar"))) == 5  # 4 train, 1 held out
