"""Fixture data of the chat tests: a local byte-level BPE with a ChatML template, and
generated arithmetic conversations (nothing downloaded)."""

from __future__ import annotations

import functools
import random
from typing import Any

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

__all__ = [
    "CHATML",
    "SPECIAL",
    "arithmetic",
    "chat_tokenizer",
    "raw_tokenizer",
    "tokenizer_config",
]

#: ChatML, as Qwen2.5 and TRL's examples render it (no generation marks).
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _corpus(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = [
        "what",
        "is",
        "plus",
        "minus",
        "times",
        "the",
        "answer",
        "sum",
        "of",
        "and",
        "please",
        "tell",
        "me",
    ]
    lines = []
    for _ in range(400):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        lines.append(f"What is {a} plus {b}? {a + b}. " + " ".join(rng.choices(words, k=6)))
    return lines + ["system user assistant\n"] * 20


@functools.cache
def raw_tokenizer() -> Tokenizer:
    """A byte-level BPE (about 300 ids) trained on generated sentences, with ChatML's
    special tokens."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    from tokenizers import decoders

    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_corpus(), trainer)
    return tokenizer


def chat_tokenizer(template: str | None = CHATML) -> Any:
    """The BPE as a transformers tokenizer with the ChatML template (or none)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=raw_tokenizer(),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=template,
    )


def arithmetic(n: int, seed: int = 0, max_turns: int = 3) -> list[dict[str, Any]]:
    """``n`` conversations of 1..max_turns arithmetic questions and answers, some with a
    system message: ``{"messages": [...], "id": i}``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        messages = []
        if rng.random() < 0.3:
            messages.append({"role": "system", "content": "You add numbers."})
        for _ in range(rng.randint(1, max_turns)):
            a, b = rng.randint(0, 99), rng.randint(0, 99)
            messages.append({"role": "user", "content": f"What is {a} plus {b}?"})
            messages.append({"role": "assistant", "content": f"{a + b}."})
        out.append({"messages": messages, "id": i})
    return out


def tokenizer_config(tokenizer: Any, path: Any) -> str:
    """A LightningCLI value (JSON) that builds ``tokenizer`` (a ``tokenizers.Tokenizer``) again
    from ``path``, where it is saved here: a ``PreTrainedTokenizerFast`` with ChatML's EOS and
    pad."""
    import json

    tokenizer.save(str(path))
    return json.dumps({
        "class_path": "transformers.PreTrainedTokenizerFast",
        "init_args": {"tokenizer_file": str(path), "eos_token": "<|im_end|>",
                      "pad_token": "<|endoftext|>"},
    })  # fmt: skip
