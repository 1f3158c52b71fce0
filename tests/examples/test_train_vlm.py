"""examples/train_vlm.py: conversations about the digits (one and two images) as tar shards, a
tiny vision-language model trained on them through ImageTextDataModule, and its held-out exact
match, run as a user runs it: a fresh interpreter."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import numpy as np
import torch

from examples.train_vlm import TinyVLM, answer_matches, conversations, split_scans
from tests import subprocesses

ROOT = Path(__file__).resolve().parents[2]


def test_the_splits_are_disjoint_and_every_digit_is_in_each() -> None:
    from sklearn.datasets import load_digits

    targets = load_digits().target
    parts = split_scans(targets)
    assert [len(parts[s]) for s in ("train", "val", "test")] == [1258, 179, 360]
    every = np.concatenate(list(parts.values()))
    assert len(np.unique(every)) == 1797
    assert all(set(targets[p].tolist()) == set(range(10)) for p in parts.values())


def test_each_pair_asks_about_two_different_digits_and_names_the_larger() -> None:
    targets = np.array([3, 7, 7, 1, 9, 0])
    records = conversations(np.arange(6), targets, pairs=3, seed=0)
    singles = [r for r in records if len(r["scans"]) == 1]
    pairs = [r for r in records if len(r["scans"]) == 2]
    assert sorted((r["scans"][0], r["answer"]) for r in singles) == [
        (i, str(d)) for i, d in enumerate(targets)
    ]
    assert len(pairs) == 18
    for r in pairs:
        first, second = targets[r["scans"]]
        assert first != second
        assert r["answer"] == ("the second" if second > first else "the first")


def test_image_features_land_on_the_image_tokens_in_pixel_values_order() -> None:
    torch.manual_seed(0)
    model = TinyVLM(vocab=10, image_token_id=9, image_tokens=4, dim=16, layers=1, heads=2).eval()
    input_ids = torch.tensor([[1, 9, 9, 9, 9, 2, 9, 9, 9, 9], [3, 3, 9, 9, 9, 9, 4, 0, 0, 0]])
    pixel_values = torch.randn(3, 3, 32, 32)  # row 0: images 0 and 1; row 1: image 2
    with torch.no_grad():
        mixed = model.embed_inputs(input_ids, pixel_values)
        features = model.encoder(pixel_values)
        text = model.embed(input_ids)
    torch.testing.assert_close(mixed[0, 1:5], features[0])
    torch.testing.assert_close(mixed[0, 6:10], features[1])
    torch.testing.assert_close(mixed[1, 2:6], features[2])
    keep = input_ids != 9
    torch.testing.assert_close(mixed[keep], text[keep])


def test_an_answer_counts_only_when_every_trained_token_is_right() -> None:
    # One row, two conversations: document 5 (one image: ids 9) and document 2 (two images).
    input_ids = torch.tensor([[9, 1, 4, 6, 9, 9, 1, 7, 8]])
    document_ids = torch.tensor([[5, 5, 5, 5, 2, 2, 2, 2, 2]])
    labels = torch.tensor([[-100, -100, 4, 6, -100, -100, -100, 7, 8]])
    batch = {"input_ids": input_ids, "labels": labels, "document_ids": document_ids}
    logits = torch.zeros(1, 9, 10)
    for t, target in enumerate([0, 4, 6, 0, 0, 0, 7, 3, 0]):  # position t predicts t + 1
        logits[0, t, target] = 1.0
    assert sorted(answer_matches(logits, batch, image_token_id=9, image_tokens=1)) == [
        (1, True),  # 4 and 6 right
        (2, False),  # 7 right, 8 wrong
    ]


def test_a_short_run_answers_held_out_questions_well_above_chance(tmp_path: Path) -> None:
    # As a user runs it: a fresh interpreter, from the repository's root.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the other core runs the other test worker
    command = [sys.executable, "examples/train_vlm.py", "--fast", "--cache", str(tmp_path)]
    done = subprocesses.run(command, cwd=ROOT, text=True, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    out = done.stdout
    logged = done.stderr  # the DataModule's summary, logged once as training starts
    assert "ImageTextDataModule" in logged and "max_images" in logged
    summaries = (out + logged).splitlines().count("ImageTextDataModule")
    assert summaries == 1, out[-3000:] + logged[-3000:]
    line = re.search(
        r"held-out exact match: (\d\.\d+) on (\d+) conversations about (\d+) never-seen scans; "
        r"'Which digit is this\?' (\d\.\d+) of (\d+) \(chance 0\.1\), "
        r"'Which is larger\?' (\d\.\d+) of (\d+) \(chance 0\.5\)",
        out,
    )
    assert line, out[-3000:]
    overall, records, scans, digit, digits, larger, pairs = line.groups()
    assert (int(records), int(scans), int(digits), int(pairs)) == (720, 360, 360, 360)
    assert float(digit) >= 0.35, line.group(0)  # 0.817 here; chance 0.1
    assert float(larger) >= 0.6, line.group(0)  # 0.831 here; chance 0.5
