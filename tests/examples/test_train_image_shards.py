"""examples/train_image_shards.py: the digits become tar shards through the command line, and the
image-folder example's CNN trains from them to the accuracy of the image-folder example."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from examples.train_image_shards import main


def test_the_digits_train_from_tar_shards(tmp_path: Path, capsys) -> None:
    threads = torch.get_num_threads()
    # One intra-op thread: on a shared 2-core machine a second one only spins in its barriers
    # while the worker decodes (a tiny CNN gains nothing from it).
    torch.set_num_threads(1)
    try:
        figures = main(["--cache", str(tmp_path), "--epochs", "4", "--workers", "1"])
    finally:
        torch.set_num_threads(threads)
    assert figures["test_acc"] >= 0.95, figures
    assert figures["test_images"] == 359  # 20% of each digit's scans, held out
    out = tmp_path / "digit-shards"
    assert json.loads((out / "classes.json").read_text()) == [str(d) for d in range(10)]
    assert figures["shards"] == len(list(out.glob("*.tar"))) > 2
    assert "test accuracy:" in capsys.readouterr().out
