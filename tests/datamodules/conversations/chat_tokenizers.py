"""Small byte-level BPE tokenizers and conversations for chat tests (trained here, no download).

:func:`chat_tokenizer` builds a GPT-2-style byte-level BPE (the pre-tokenizer of GPT-2 and
Llama 3) on a few KB of generated sentences, with the control tokens of TRL's shipped chat
templates added as special tokens, and wraps it as ``PreTrainedTokenizerFast`` with a template.
"""

from __future__ import annotations

import functools
import random
import re
from pathlib import Path
from typing import Any

__all__ = [
    "CHATML",
    "CONVERSATIONS",
    "TALK",
    "TRL_TEMPLATES",
    "chat_tokenizer",
    "transformers_mask",
    "trl_template",
    "words",
]

#: The ChatML template (Qwen's, without tools).
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


#: A conversation with a system message and two assistant turns.
TALK = [
    {"role": "system", "content": "be nice"},
    {"role": "user", "content": "what is two plus three"},
    {"role": "assistant", "content": "five."},
    {"role": "user", "content": "hello there"},
    {"role": "assistant", "content": "world yes\n\nno"},
]
#: One turn, two turns with a system message, three turns.
CONVERSATIONS = [
    TALK[1:3],
    TALK,
    [
        {"role": role, "content": text}
        for role, text in zip(
            ["user", "assistant"] * 3, ["a b", "c", "d", "e f", "g", "the end"], strict=True
        )
    ],
]


def transformers_mask(tok: Any, messages: list[dict], template: str) -> tuple[list[int], Any]:
    """``(input_ids, assistant_masks as a bool array)`` of transformers'
    ``apply_chat_template(..., return_assistant_tokens_mask=True)`` with ``template``."""
    import numpy as np

    out = tok.apply_chat_template(
        messages,
        chat_template=template,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    return out["input_ids"], np.array(out["assistant_masks"], dtype=bool)


def _trl_dir() -> Path:
    import trl

    return Path(trl.__file__).parent / "chat_templates"


TRL_TEMPLATES = _trl_dir()
_CONTROL = re.compile(r"<[|｜][^<>\s]{1,60}?[|｜]>")
_EXTRA = (
    "<s>", "</s>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<think>", "</think>",
    "<end_of_utterance>", "<BOS_TOKEN>", "<image>", "<fake_token_around_image>",
)  # fmt: skip
_TEXT = (
    "the cat sat on a mat and then it ran over hill to see what was there who are you what is "
    "two plus three answer five hello world please tell me about rivers mountains numbers are "
    "fun I think so yes no maybe because system user assistant tool"
)
WORDS = _TEXT.split()


def words(rng: random.Random, low: int, high: int) -> str:
    """A sentence of ``low``..``high`` words drawn by ``rng``."""
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def trl_template(name: str) -> str:
    """The text of TRL's shipped template ``name`` (``"llama3"``, ``"llama3_training"``...)."""
    return (TRL_TEMPLATES / f"{name}.jinja").read_text()


@functools.lru_cache(maxsize=1)
def _control_tokens() -> tuple[str, ...]:
    found = set(_EXTRA)
    for path in TRL_TEMPLATES.glob("*.jinja"):
        found.update(_CONTROL.findall(path.read_text()))
    return tuple(sorted(found))


@functools.lru_cache(maxsize=2)
def _backend(vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(0)
    lines = []
    for _ in range(400):  # turns ending "\n\n" as chat text does, so BPE learns "\n\n"
        lines.append(words(rng, 2, 12) + rng.choice([".\n\n", "?\n\n", "\n", ". ", "!\n\n"]))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(_control_tokens()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(["".join(lines[i : i + 20]) for i in range(0, 400, 20)], trainer)
    return tok.to_str()


def chat_tokenizer(chat_template: str | None = CHATML, *, vocab_size: int = 700) -> Any:
    """A ``PreTrainedTokenizerFast`` with ``chat_template`` (bos ``<s>``, eos ``</s>``, pad
    ``<|endoftext|>``), every control token of TRL's templates special."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_backend(vocab_size)),
        chat_template=chat_template,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<|endoftext|>",
    )
