"""Fixture data of the preference tests: numbered pairs in TRL's record formats (multi-turn
prompts, strings and message lists), and TRL 1.16's own preparation of them as the reference."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

__all__ = ["messages_pairs", "string_pairs", "trl_batch", "trl_rows", "unpaired"]


def _prompt(rng: random.Random, i: int) -> list[dict[str, str]]:
    """A prompt of 1..3 user turns (earlier ones answered), some with a system message; the
    first question names the record's number."""
    messages = []
    if rng.random() < 0.3:
        messages.append({"role": "system", "content": "You add numbers."})
    turns = rng.randint(1, 3)
    for t in range(turns):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        head = f"id {i}: " if t == 0 else ""
        messages.append({"role": "user", "content": f"{head}What is {a} plus {b}?"})
        if t < turns - 1:
            messages.append({"role": "assistant", "content": f"{a + b}."})
    return messages


def messages_pairs(n: int, seed: int = 0, implicit: bool = False) -> list[dict[str, Any]]:
    """``n`` pairs of message lists: the right sum chosen, a wrong one (of other length)
    rejected; ``implicit``: chosen and rejected whole conversations, no ``prompt``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt = _prompt(rng, i)
        right = rng.randint(0, 198)
        chosen = [{"role": "assistant", "content": f"{right}."}]
        wrong = right + rng.randint(1, 9)
        rejected = [{"role": "assistant", "content": f"It is {wrong}, I think."}]
        if implicit:
            out.append({"chosen": prompt + chosen, "rejected": prompt + rejected})
        else:
            out.append({"prompt": prompt, "chosen": chosen, "rejected": rejected})
    return out


def string_pairs(n: int, seed: int = 0, implicit: bool = False) -> list[dict[str, Any]]:
    """``n`` pairs of strings (``implicit``: the prompt inside chosen and rejected)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        prompt = f"id {i}: what is {a} plus {b}?"
        chosen, rejected = f" {a + b}.", f" {a + b + rng.randint(1, 9)}, or so."
        if implicit:
            out.append({"chosen": prompt + chosen, "rejected": prompt + rejected})
        else:
            out.append({"prompt": prompt, "chosen": chosen, "rejected": rejected})
    return out


def unpaired(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` unpaired records (KTO): a prompt, a completion and whether it is right."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        good = rng.random() < 0.5
        answer = a + b if good else a + b + rng.randint(1, 9)
        out.append({
            "prompt": [{"role": "user", "content": f"id {i}: What is {a} plus {b}?"}],
            "completion": [{"role": "assistant", "content": f"{answer}."}],
            "label": good,
        })  # fmt: skip
    return out


def trl_rows(records: list[dict[str, Any]], tokenizer: Any) -> list[dict[str, Any]]:
    """What TRL 1.16's ``DPOTrainer`` prepares for ``records`` (its own ``_prepare_dataset``:
    prompt extraction, EOS, tokenization): ``prompt_ids``, ``chosen_ids``, ``rejected_ids``."""
    import datasets
    from trl.trainer.dpo_trainer import DPOTrainer

    trainer = SimpleNamespace(_tokenizer=tokenizer)
    args = SimpleNamespace(dataset_num_proc=None, max_length=None, truncation_mode="keep_start")
    dataset = datasets.Dataset.from_list(records)
    prepared = DPOTrainer._prepare_dataset(trainer, dataset, tokenizer, args, "train")
    keys = ("prompt_ids", "chosen_ids", "rejected_ids")
    return [{k: row[k] for k in keys} for row in prepared]


def trl_batch(rows: list[dict[str, Any]], pad_id: int) -> dict[str, Any]:
    """TRL's ``DataCollatorForPreference`` batch of prepared rows."""
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    return DataCollatorForPreference(pad_token_id=pad_id)(rows)
