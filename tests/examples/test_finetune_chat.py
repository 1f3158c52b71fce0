"""examples/finetune_chat.py: a short run renders the conversations into the token store,
trains on the assistant's answers only, and the second run maps the store."""

from __future__ import annotations

from examples.finetune_chat import conversations, pairs, question
from examples.finetune_chat import main as finetune


def test_no_held_out_question_is_in_the_training_conversations() -> None:
    train, held = pairs(19)
    assert len(train) + len(held) == 400 and len(held) == 80
    asked = {m["content"] for r in conversations(train, 2000) for m in r["messages"]}
    assert not {question(a, b) for a, b in held} & asked


def test_a_short_run_trains_and_the_second_run_maps_the_store(capsys, tmp_path) -> None:
    argv = ["--max-steps", "20", "--conversations", "400", "--max-number", "9",
            "--seq-length", "128", "--batch-size", "8", "--cache", str(tmp_path)]  # fmt: skip
    figures = finetune(argv)
    assert figures["steps"] == 20 and 0 <= figures["before"] <= 1 and 0 <= figures["after"] <= 1
    printed = capsys.readouterr().out
    assert "rendered into the token store" in printed and "20 held out" in printed
    assert "held-out exact match (20 questions never trained on)" in printed
    finetune([*argv[:1], "1", *argv[2:]])
    assert "mapped the token store" in capsys.readouterr().out
