"""Fine-tune a small causal LM on chat conversations, with the loss on the assistant's answers.

The data needs no download: conversations generated here, 1-3 arithmetic questions each
("What is 17 plus 5?" -> "22."), a system message in a third of them, over the numbers 0 to
``--max-number``. A fifth of the (a, b) pairs is held out: no training conversation asks about
them, and the held-out exact-match accuracy is measured on those questions, before and after
fine-tuning. The tokenizer: a byte-level BPE trained offline with Hugging Face ``tokenizers``
on the generated text, digits kept apart (so a sum is written digit by digit), with ChatML's
special tokens and template.

``ChatDataModule(packing=True)`` renders every conversation once into the token store, with
the loss on the assistant's tokens only (the answer and its ``<|im_end|>``), and packs whole
conversations into rows; the model (``examples/train_lm.py``'s ``TinyLM``) keeps attention
within each conversation from ``document_ids`` and restarts its rotary positions at each one
from ``position_ids``. The answers are generated greedily after the ChatML generation prompt,
up to ``<|im_end|>``.

Run: ``python examples/finetune_chat.py`` (3 minutes of training on 2 CPU cores; prints the
held-out accuracy before and after: 0.0% and 56.2% here); ``--max-minutes`` makes it shorter.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datamodules import ChatDataModule  # noqa: E402
from examples.train_lm import TinyLM, default_cache  # noqa: E402

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SYSTEM = "You are a calculator. Answer with the number."


def pairs(max_number: int, seed: int = 0) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Every (a, b) with a, b <= ``max_number``, split into train and held-out (a fifth)."""
    every = [(a, b) for a in range(max_number + 1) for b in range(max_number + 1)]
    random.Random(seed).shuffle(every)
    held = len(every) // 5
    return every[held:], every[:held]


def question(a: int, b: int) -> str:
    return f"What is {a} plus {b}?"


def conversations(train: list[tuple[int, int]], n: int, seed: int = 1) -> list[dict[str, Any]]:
    """``n`` conversations of 1-3 questions about the train pairs."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        messages = [{"role": "system", "content": SYSTEM}] if rng.random() < 1 / 3 else []
        for a, b in rng.sample(train, rng.randint(1, 3)):
            messages.append({"role": "user", "content": question(a, b)})
            messages.append({"role": "assistant", "content": f"{a + b}."})
        out.append({"messages": messages})
    return out


def chat_tokenizer(texts: Sequence[str]) -> Any:
    """A byte-level BPE (digits kept apart) with ChatML's tokens and template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(False)]
    )
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    raw.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        chat_template=CHATML,
    )  # fmt: skip


@torch.no_grad()
def accuracy(model: TinyLM, tokenizer: Any, held: list[tuple[int, int]]) -> float:
    """Exact-match accuracy of greedy answers to the held-out questions."""
    model.eval()
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    right = 0
    for a, b in held:
        messages = [{"role": "user", "content": question(a, b)}]
        ids = tokenizer.apply_chat_template(
            messages, tokenize=True, return_dict=True, add_generation_prompt=True
        )["input_ids"]
        answer: list[int] = []
        for _ in range(6):
            x = torch.tensor([ids + answer])
            positions = torch.arange(x.shape[1])[None]
            logits = model(x, positions, torch.zeros_like(x))
            token = int(logits[0, -1].argmax())
            if token == end:
                break
            answer.append(token)
        right += tokenizer.decode(answer).strip() == f"{a + b}."
    model.train()
    return right / len(held)


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Fine-tunes, prints and returns the held-out accuracy before and after."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-number", type=int, default=19)
    parser.add_argument("--conversations", type=int, default=20_000)
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-minutes", type=float, default=3.0)
    parser.add_argument("--max-steps", type=int, default=-1)
    parser.add_argument("--cache", type=Path, default=None, help="the token store")
    args = parser.parse_args(argv)
    pl.seed_everything(0, verbose=False)
    train, held = pairs(args.max_number)
    records = conversations(train, args.conversations)
    texts = [m["content"] for r in records[:2000] for m in r["messages"]]
    tokenizer = chat_tokenizer(texts + ["system user assistant"])
    cache = (args.cache or default_cache().parent / "finetune_chat") / "tokens"
    dm = ChatDataModule(
        records, tokenizer=tokenizer, packing=True, seq_length=args.seq_length,
        batch_size=args.batch_size, val_split=0.02, token_cache=cache, num_workers=0,
    )  # fmt: skip
    start = time.perf_counter()
    dm.setup("fit")
    store = dm.documents("train")
    print(
        f"{len(records):,} conversations ({len(train)} train pairs, {len(held)} held out), "
        f"{store.num_tokens:,} tokens, {store.trained_tokens:,} trained; setup "
        f"{time.perf_counter() - start:.2f} s ({'rendered into' if store.store.built else 'mapped'}"
        f" the token store)"
    )
    model = TinyLM(vocab=dm.vocab_size, dim=128, layers=2, heads=4, lr=3e-3)
    before = accuracy(model, tokenizer, held)
    trainer = pl.Trainer(
        max_time={"seconds": int(args.max_minutes * 60)},
        max_steps=args.max_steps,
        max_epochs=-1 if args.max_steps < 0 else None,
        accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(model, datamodule=dm)
    after = accuracy(model, tokenizer, held)
    print(
        f"held-out exact match ({len(held)} questions never trained on): {before:.1%} before, "
        f"{after:.1%} after {trainer.global_step} steps"
    )
    return {"before": before, "after": after, "steps": float(trainer.global_step)}


if __name__ == "__main__":
    main()
