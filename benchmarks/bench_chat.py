"""ChatDataModule against TRL's own pipeline: 20,000 ChatML conversations packed to 1,024.

The data: ``--conversations`` generated conversations of 1-4 turns (a system message in a
third of them), each message a run of words from a fixed word list whose count is lognormal
(user: median 18 words, assistant: median 45, sigma 0.9), so that a few conversations are
longer than a row. The tokenizer: a byte-level BPE (8,000 ids) trained offline with Hugging
Face ``tokenizers`` on a sample of those messages, with ChatML's special tokens. The
template: ChatML, as Qwen2.5 writes it; TRL's side uses the same template with
``{% generation %}`` marks (the ids are the same, checked), since
``return_assistant_tokens_mask`` needs them.

Every figure comes from this one run (medians over ``--repeats``, the two pipelines
alternating):

1. **First setup**: ``ChatDataModule(conversations, packing=True, seq_length=1024)`` rendering
   into a new token store (``tokenize_workers="auto"``) and planning the rows, against
   ``datasets.Dataset.from_list`` + ``map(apply_chat_template(..., tokenize=True,
   return_dict=True, return_assistant_tokens_mask=True))`` (``num_proc`` = our workers) +
   ``trl.pack_dataset(strategy="bfd")``. Bar: ours at least as fast.
2. **Second setup**: a new DataModule mapping the store, as a share of the first. Bar <= 5%.
3. **Packing efficiency** (real tokens / row tokens): ours and TRL's BFD. Bar: ours no more
   than 0.01 below.
4. **Tokens cut**: TRL truncates a conversation longer than a row and drops the rest without
   a word; ours drops it whole (``overlong="drop"``) and says so: both counts.
5. **The packed epoch**: tokens/s of a whole train epoch, ``batch_size=8``, ``num_workers=0``.

Run: ``python benchmarks/bench_chat.py`` (a few minutes on 2 cores; needs the ``bench``
extra for trl and datasets). ``--conversations 2000 --repeats 1`` gives a quick run.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datamodules import ChatDataModule  # noqa: E402
from datamodules.conversations.store_build import render_workers  # noqa: E402

# Benchmarks print figures, not the DataModules' summaries (logged at INFO).
logging.getLogger("datamodules").setLevel(logging.WARNING)

SEQ = 1024
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
#: The same rendering with generation marks around each assistant turn's content and end.
CHATML_MARKED = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}{% generation %}"
    "{{ message['content'] + '<|im_end|>' + '\n' }}{% endgeneration %}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_WORDS = (
    "the of and to in is that it for on with as was at by be this from or have an are not "
    "but all which one their were can there more so if about up out what when time only "
    "model data train loss batch token layer value number answer question first second "
    "because example result three seven eleven twenty plus minus times equal"
)
WORDS = tuple(_WORDS.split())


def conversations(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)

    def text(median: float) -> str:
        count = max(1, int(rng.lognormvariate(np.log(median), 0.9)))
        return " ".join(rng.choices(WORDS, k=count)).capitalize() + "."

    out = []
    for _ in range(n):
        messages = [{"role": "system", "content": text(10)}] if rng.random() < 1 / 3 else []
        for _ in range(rng.randint(1, 4)):
            messages.append({"role": "user", "content": text(18)})
            messages.append({"role": "assistant", "content": text(45)})
        out.append({"messages": messages})
    return out


def tokenizer_for(records: list[dict[str, Any]], template: str) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=8000, special_tokens=SPECIAL, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    sample = [m["content"] for r in records[:2000] for m in r["messages"]]
    raw.train_from_iterator(sample, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        chat_template=template,
    )  # fmt: skip


def ours(records: list[Any], tokenizer: Any, cache: str, **kwargs: Any) -> ChatDataModule:
    options = {"packing": True, "seq_length": SEQ, "batch_size": 8, "val_split": 0}
    options.update(num_workers=0, token_cache=cache, **kwargs)
    return ChatDataModule(records, tokenizer=tokenizer, **options)


def first_setup(records: list[Any], tokenizer: Any, cache: str) -> tuple[float, ChatDataModule]:
    shutil.rmtree(cache, ignore_errors=True)
    start = time.perf_counter()
    dm = ours(records, tokenizer, cache)
    dm.setup("fit")
    dm.planner("train")
    return time.perf_counter() - start, dm


def trl_pipeline(records: list[Any], tokenizer: Any, workers: int) -> tuple[float, Any, Any]:
    import datasets
    from trl import pack_dataset

    datasets.disable_progress_bars()
    datasets.disable_caching()
    start = time.perf_counter()
    dataset = datasets.Dataset.from_list(records)

    def render(example: dict[str, Any]) -> dict[str, Any]:
        out = tokenizer.apply_chat_template(
            example["messages"], tokenize=True, return_dict=True,
            return_assistant_tokens_mask=True,
        )  # fmt: skip
        return {"input_ids": out["input_ids"], "assistant_masks": out["assistant_masks"]}

    rendered = dataset.map(render, remove_columns=["messages"], num_proc=workers or None)
    packed = pack_dataset(rendered, SEQ, strategy="bfd")
    return time.perf_counter() - start, rendered, packed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    records = conversations(args.conversations)
    tokenizer = tokenizer_for(records, CHATML)
    marked = tokenizer_for(records, CHATML_MARKED)
    for r in records[:50]:  # the same ids from both templates
        a = tokenizer.apply_chat_template(r["messages"], tokenize=True, return_dict=True)
        b = marked.apply_chat_template(r["messages"], tokenize=True, return_dict=True)
        assert a["input_ids"] == b["input_ids"]
    workers = render_workers("auto")
    root = tempfile.mkdtemp(prefix="bench-chat-")
    cache = os.path.join(root, "tokens")
    mine, theirs, seconds = [], [], []
    dm = rendered = packed = None
    for _ in range(args.repeats):
        t, dm = first_setup(records, tokenizer, cache)
        mine.append(t)
        t, rendered, packed = trl_pipeline(records, marked, workers)
        theirs.append(t)
    for _ in range(max(args.repeats, 3)):
        start = time.perf_counter()
        again = ours(records, tokenizer, cache)
        again.setup("fit")
        again.planner("train")
        seconds.append(time.perf_counter() - start)
    first, trl_first, second = (statistics.median(x) for x in (mine, theirs, seconds))

    # The masks agree where both keep a conversation whole (TRL's reference mask).
    docs = dm.documents("train")
    store = docs.store
    lengths = store.encoded.lengths_np
    starts = store.encoded.offsets_np
    masks = rendered["assistant_masks"]
    agree = sum(
        np.array_equal(store.trained[starts[i] : starts[i] + lengths[i]], np.asarray(masks[i]))
        for i in range(min(len(masks), 2000))
    )
    # Efficiency and what is cut.
    planner = dm.planner("train")
    trl_rows = len(packed)
    trl_fill = sum(sum(row) for row in packed["seq_lengths"]) / (trl_rows * SEQ)
    full = np.asarray([len(x) for x in rendered["input_ids"]])
    trl_cut = int(np.maximum(full - SEQ, 0).sum())
    trl_cut_convs = int((full > SEQ).sum())
    dropped_tokens = int(lengths[lengths > SEQ].sum())
    # The packed epoch.
    tokens, start = 0, time.perf_counter()
    for batch in dm.train_dataloader():
        tokens += int(batch["attention_mask"].sum())
    epoch_s = time.perf_counter() - start
    shutil.rmtree(root, ignore_errors=True)

    print(
        f"{args.conversations:,} conversations, {int(lengths.sum()):,} tokens, {workers} render "
        f"workers; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
    )
    checked = min(len(masks), 2000)
    print(f"masks equal to transformers' on the marked template: {agree} of {checked}")
    print("| figure | ChatDataModule | TRL (datasets.map + pack_dataset bfd) | bar |")
    print("|---|---|---|---|")
    print(
        f"| first setup | {first:.2f} s ({int(lengths.sum()) / first:,.0f} tokens/s) | "
        f"{trl_first:.2f} s | ours {trl_first / first:.2f}x TRL's speed (bar >= 1x) |"
    )
    print(f"| second setup | {second:.3f} s, {second / first:.1%} of the first | - | <= 5% |")
    print(
        f"| packing efficiency | {planner.fill():.4f} ({planner.num_rows:,} rows) | "
        f"{trl_fill:.4f} ({trl_rows:,} rows) | ours >= TRL - 0.01 |"
    )
    print(
        f"| tokens cut | 0 ({docs.overlong} conversations over {SEQ} dropped, "
        f"{dropped_tokens:,} tokens, counted and warned) | {trl_cut:,} tokens of "
        f"{trl_cut_convs} conversations, silently | - |"
    )
    print(f"| packed epoch | {tokens / epoch_s:,.0f} tokens/s ({epoch_s:.2f} s) | - | - |")


if __name__ == "__main__":
    main()
