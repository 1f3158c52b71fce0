"""PreferenceDataModule against TRL's own preparation: 20,000 generated preference pairs.

The data: ``--pairs`` generated pairs, each a prompt of 1-3 user turns (the earlier ones
answered, a system message in a third of them) and a chosen and a rejected completion, each
message a run of words from a fixed list whose count is lognormal (user: median 18 words,
completions: median 45, sigma 0.9). The tokenizer: a byte-level BPE (8,000 ids) trained offline
with Hugging Face ``tokenizers`` on a sample of the messages, with ChatML's special tokens and
template.

Every figure comes from this one run (medians over ``--repeats``, the two sides alternating):

1. **First setup**: ``PreferenceDataModule(pairs, tokenizer=...)`` tokenizing into a new token
   store (``tokenize_workers="auto"``), against TRL 1.16's ``DPOTrainer`` preparation: its own
   ``_prepare_dataset`` (prompt extraction, EOS, tokenization: three ``apply_chat_template``
   per pair) over ``datasets.Dataset.from_list`` of the same records, with ``dataset_num_proc``
   equal to our workers. Bar: ours at least as fast. The ids are compared (all equal).
2. **Second setup**: a new DataModule mapping the store, as a share of the first. Bar <= 5%.
3. **Packed** (``packing=True, seq_length=2048``): real tokens / row tokens. Bar >= 0.98.
4. **Padded**: the padding share of an epoch of batches of 8 pairs, TRL's
   ``DataCollatorForPreference`` over a shuffled order (as a Trainer's sampler draws it) and
   ours (length buckets, the default).
5. **The epochs**: pairs/s of a whole train epoch, ours padded and packed (``num_workers=0``),
   and TRL's collator in a ``DataLoader`` (``num_workers=0``).

Run: ``python benchmarks/bench_preference.py`` (a few minutes on 2 cores; needs the ``bench``
extra for trl and datasets). ``--pairs 2000 --repeats 1`` gives a quick run.
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
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datamodules import PreferenceDataModule  # noqa: E402
from datamodules.conversations.store_build import render_workers  # noqa: E402

logging.getLogger("datamodules").setLevel(logging.WARNING)

SEQ = 2048
BATCH = 8
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
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


def preference_pairs(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` pairs with 1-3 turn prompts and lognormal message lengths."""
    rng = random.Random(seed)

    def text(median: float) -> str:
        count = max(1, int(rng.lognormvariate(np.log(median), 0.9)))
        return " ".join(rng.choices(WORDS, k=count)).capitalize() + "."

    out = []
    for _ in range(n):
        prompt = [{"role": "system", "content": text(10)}] if rng.random() < 1 / 3 else []
        turns = rng.randint(1, 3)
        for t in range(turns):
            prompt.append({"role": "user", "content": text(18)})
            if t < turns - 1:
                prompt.append({"role": "assistant", "content": text(45)})
        out.append({
            "prompt": prompt,
            "chosen": [{"role": "assistant", "content": text(45)}],
            "rejected": [{"role": "assistant", "content": text(45)}],
        })  # fmt: skip
    return out


def tokenizer_for(records: list[dict[str, Any]]) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=8000, special_tokens=SPECIAL, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    sample = [m["content"] for r in records[:2000] for m in r["prompt"] + r["chosen"]]
    raw.train_from_iterator(sample, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        chat_template=CHATML,
    )  # fmt: skip


def ours(records: list[Any], tokenizer: Any, cache: str, **kwargs: Any) -> PreferenceDataModule:
    options = {"batch_size": BATCH, "val_split": 0, "num_workers": 0, "token_cache": cache}
    return PreferenceDataModule(records, tokenizer=tokenizer, **{**options, **kwargs})


def first_setup(records: list[Any], tokenizer: Any, cache: str) -> tuple[float, Any]:
    shutil.rmtree(cache, ignore_errors=True)
    start = time.perf_counter()
    dm = ours(records, tokenizer, cache)
    dm.setup("fit")
    return time.perf_counter() - start, dm


def trl_preparation(records: list[Any], tokenizer: Any, workers: int) -> tuple[float, Any]:
    """TRL's ``DPOTrainer._prepare_dataset`` itself, on a trainer stub (it reads only the
    tokenizer's EOS from the trainer)."""
    import datasets
    from trl.trainer.dpo_trainer import DPOTrainer

    datasets.disable_progress_bars()
    datasets.disable_caching()
    trainer = SimpleNamespace(_tokenizer=tokenizer)
    config = SimpleNamespace(
        dataset_num_proc=workers or None, max_length=None, truncation_mode="keep_start"
    )
    start = time.perf_counter()
    dataset = datasets.Dataset.from_list(records)
    prepared = DPOTrainer._prepare_dataset(trainer, dataset, tokenizer, config, "train")
    return time.perf_counter() - start, prepared


def padding_share(batches: Any) -> tuple[float, int, float]:
    """(padding share of the ids, pairs, seconds) over an epoch of padded batches."""
    real = total = pairs = 0
    start = time.perf_counter()
    for batch in batches:
        mask = batch["attention_mask"]
        real += int(mask.sum())
        total += mask.numel()
        pairs += len(mask) // 2
    return 1 - real / total, pairs, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    records = preference_pairs(args.pairs)
    tokenizer = tokenizer_for(records)
    workers = render_workers("auto")
    root = tempfile.mkdtemp(prefix="bench-preference-")
    cache = os.path.join(root, "tokens")
    mine, theirs, seconds = [], [], []
    dm = prepared = None
    for _ in range(args.repeats):
        t, dm = first_setup(records, tokenizer, cache)
        mine.append(t)
        t, prepared = trl_preparation(records, tokenizer, workers)
        theirs.append(t)
    for _ in range(max(args.repeats, 3)):
        start = time.perf_counter()
        ours(records, tokenizer, cache).setup("fit")
        seconds.append(time.perf_counter() - start)
    first, trl_first, second = (statistics.median(x) for x in (mine, theirs, seconds))

    # The ids: every pair's chosen and rejected sequence and the prompt's length.
    docs = dm.documents("train")
    encoded, codes = docs.encoded, docs.trained
    equal = 0
    for i, row in enumerate(prepared):
        start, n = int(encoded.offsets_np[i]), int(encoded.lengths_np[i])
        ids = encoded.tokens_np[start : start + n].tolist()
        code = codes.tokens_np[start : start + n]
        prompt = row["prompt_ids"]
        chosen, rejected = prompt + row["chosen_ids"], prompt + row["rejected_ids"]
        equal += (
            ids == chosen + rejected
            and int((code[: len(chosen)] & 1).sum()) == len(row["chosen_ids"])
            and int((code[len(chosen) :] & 1).sum()) == len(row["rejected_ids"])
        )
    tokens = docs.num_tokens

    # Padded: our epoch against TRL's collator over a shuffled order.
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    ours_pad, ours_pairs, ours_s = padding_share(dm.train_dataloader())
    collator = DataCollatorForPreference(pad_token_id=dm.pad_id)
    rows = prepared.select_columns(["prompt_ids", "chosen_ids", "rejected_ids"])
    loader = torch.utils.data.DataLoader(
        rows, batch_size=BATCH, shuffle=True, collate_fn=collator,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    trl_pad, trl_pairs, trl_s = padding_share(loader)
    assert ours_pairs == trl_pairs == args.pairs

    # Packed.
    packed = ours(records, tokenizer, cache, packing=True, seq_length=SEQ, tokenize_workers=0)
    packed.setup("fit")
    planner = packed.planner("train")
    start, packed_pairs = time.perf_counter(), 0
    for batch in packed.train_dataloader():
        packed_pairs += len(batch["chosen_index"])
    packed_s = time.perf_counter() - start
    shutil.rmtree(root, ignore_errors=True)

    print(
        f"{args.pairs:,} pairs, {tokens:,} tokens (chosen and rejected sequences), {workers} "
        f"workers; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
    )
    print(f"pairs whose ids and completion masks equal TRL's: {equal:,} of {len(prepared):,}")
    print("| figure | PreferenceDataModule | TRL 1.16 (DPOTrainer's preparation, collator) | bar |")
    print("|---|---|---|---|")
    print(
        f"| first setup | {first:.2f} s ({tokens / first:,.0f} tokens/s) | {trl_first:.2f} s | "
        f"ours {trl_first / first:.2f}x TRL's speed (bar >= 1x) |"
    )
    print(f"| second setup | {second:.3f} s, {second / first:.1%} of the first | - | <= 5% |")
    print(
        f"| packed, {SEQ} a row | efficiency {planner.fill():.4f} ({planner.num_rows:,} rows, "
        f"{packed.kinds['pair']:,} pairs, {packed.split_datasets['train'].dropped} dropped "
        f"over {SEQ}) | - (no packing for DPO) | >= 0.98 |"
    )
    print(
        f"| padded, {BATCH} pairs a batch | padding {ours_pad:.1%} of the ids (length buckets) "
        f"| padding {trl_pad:.1%} (shuffled order) | reported |"
    )
    print(
        f"| an epoch, num_workers=0 | padded {ours_pairs / ours_s:,.0f} pairs/s, packed "
        f"{packed_pairs / packed_s:,.0f} pairs/s | {trl_pairs / trl_s:,.0f} pairs/s | - |"
    )


if __name__ == "__main__":
    main()
