"""examples/train_dpo.py: run as a user runs it (``--fast``, a fresh interpreter), the DPO loss
on packed preference batches lifts the held-out preference accuracy from 0.5 to 0.9 or more."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import torch

from examples.train_dpo import dpo_pairs, sequence_logps
from tests import subprocesses

ROOT = Path(__file__).resolve().parents[2]


def test_held_out_pairs_share_no_wrong_answer_with_the_dpo_pairs() -> None:
    questions = [(a, b) for a in range(4) for b in range(4)]

    def keys(pairs: list) -> set:
        return {(p["prompt"][-1]["content"], p["rejected"][0]["content"]) for p in pairs}

    trained = keys(dpo_pairs(questions, (-2, -1, 1, 2)))
    held = keys(dpo_pairs(questions, (-3, 3), seed=3))
    assert len(trained) > 40 and len(held) > 10 and not trained & held
    assert all(p["chosen"] != p["rejected"] for p in dpo_pairs(questions, (-3, -1, 1, 3)))


def test_sequence_logps_sum_each_segments_completion() -> None:
    class Uniform(torch.nn.Module):
        def forward(self, ids, positions, documents):  # every next token equally likely
            return torch.zeros(*ids.shape, 10)

    batch = {
        "input_ids": torch.tensor([[1, 2, 3, 4, 5, 6, 0, 0]]),
        "position_ids": torch.tensor([[0, 1, 2, 0, 1, 2, 0, 1]]),
        "document_ids": torch.tensor([[0, 0, 0, 1, 1, 1, -1, -1]]),
        "completion_mask": torch.tensor([[0, 1, 1, 0, 0, 1, 0, 0]]),
        "cu_seqlens": torch.tensor([0, 3, 6, 8], dtype=torch.int32),
    }
    got = sequence_logps(Uniform(), batch)
    step = -torch.log(torch.tensor(10.0))
    torch.testing.assert_close(got, torch.stack([2 * step, step, torch.tensor(0.0)]))


def test_a_fast_run_lifts_the_held_out_preference_accuracy(tmp_path: Path) -> None:
    # As a user runs it: a fresh interpreter, from the repository's root; the whole process
    # group is ended if it ever hangs.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the other core runs the other test worker
    command = [sys.executable, "examples/train_dpo.py", "--fast", "--cache", str(tmp_path)]
    done = subprocesses.run(command, cwd=ROOT, env=env)
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, err[-4000:]
    assert "PreferenceDataModule" in out and "packed into rows of 128" in out  # its summary
    line = re.search(
        r"held-out preference accuracy: (\d\.\d+) before DPO, (\d\.\d+) after 100 DPO steps", out
    )
    assert line, out[-3000:]
    before, after = map(float, line.groups())
    assert before == 0.5  # the policy starts as the reference: every reward 0, ties count half
    assert after >= 0.9, line.group(0)
