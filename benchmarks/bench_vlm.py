"""Conversations about images: packing under two budgets against first fit on tokens alone.

Data: ``--records`` conversations (default 100,000), each with 1-3 images (uniform) of
``--image-tokens`` positions each (default 64) and a text of lognormal length
(``exp(N(--mu, 0.8))`` rounded, clipped to [8, 4096]; ``--mu 5.0``: median 148 tokens), fixed
seed. Records over a budget (longer than a row) are counted and left out, as ``overlong``
would.

1. **Packing efficiency on both budgets**: rows of 2,048 tokens, ``max_images=16`` a batch,
   for several rows per batch (``--batch-sizes``). For :func:`collates.pack_budgets.budget_plan`
   (best fit over both budgets) and :func:`collates.pack_budgets.first_fit_plan` (first fit on
   tokens alone, in the order given, batches cut where the image budget would overflow: the
   common approach): batches, tokens per row slot (image positions included, and text alone),
   images per batch against ``max_images``,
   the lower bound on batches (``max(tokens / (rows * 2048), images / 16)``), and the time to
   plan all records (median of ``--repeats``; pools of 16,384 records, as the DataModules
   plan).
2. **Throughput with 2 workers** (records/s, images/s) on ``--loader-records`` generated
   records (default 4,000) in 8 tar shards of webdataset's layout (``0.jpg``, ``1.jpg``,
   ``2.jpg``: 1-3 JPEGs of 64x64, crops of scikit-learn's two sample photos; ``json``: the
   conversation, one user turn with a placeholder per image and one assistant turn, of
   lognormal length as above, in words the tokenizer knows). The tokenizer: a byte-level BPE
   trained here on those words, ChatML's tokens and ``<image>`` as special tokens, ChatML's
   template. Both loaders give each image 64 positions and read the same shards with 2
   workers; whole epochs after a warm-up one (``--epochs`` each, median over ``--repeats``,
   the two alternating):

   * ours: ``ImageTextDataModule(messages_key="json", image_key="0.jpg;1.jpg;2.jpg",
     image_tokens=64, packing=True, seq_length=2048, max_images=16, batch_size=2)`` (rows a
     batch), ``image_size=64``; its float conversion and normalisation counted on the CPU, as
     ``on_after_batch_transfer`` does it on the device (the main process runs torch on one
     thread, as each worker does). Its first setup (rendering the conversations into the
     store) is timed apart;
   * the baseline, the common hand-rolled loader: a ``torch.utils.data.DataLoader`` over
     ``webdataset.WebDataset`` of the same shards (2 workers, batches of 8 records: the records
     a batch of ours hold on average) whose collate renders each conversation with
     ``tokenizer.apply_chat_template(..., tokenize=False)`` and gives texts and PIL images to
     ``transformers.LlavaProcessor`` (a ``CLIPImageProcessor`` at 64, patch 8: each ``<image>``
     becomes 64 image tokens, images resized, rescaled and normalised), then sets ``labels``
     -100 at padding and at the image token, as Hugging Face's VLM fine-tuning scripts do.

   Checked: the first 200 records' ids in ours' store equal ``LlavaProcessor``'s for the same
   record, and each epoch of both holds the same records, images and tokens.

   Reported: records/s and images/s of both, as ratios to the baseline; both budgets'
   efficiencies of ours (from ``dm.summary()`` and from the batches), and the baseline's
   padding efficiency and images a batch (its batches are not bounded in images).

Run: ``python benchmarks/bench_vlm.py [--records 100000] [--repeats 3] [--mu 5.0]
[--batch-sizes 1 2 4 8] [--parts 1 2] [--loader-records 4000] [--epochs 3]`` (part two writes
its shards under the temp directory once).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_chat import CHATML, tokenizer_for  # noqa: E402

from collates.pack_budgets import BudgetPlan, budget_plan, first_fit_plan  # noqa: E402
from datamodules import ImageTextDataModule  # noqa: E402

# Benchmarks print figures, not the DataModules' summaries (logged at INFO).
logging.getLogger("datamodules").setLevel(logging.WARNING)

SEQ, MAX_IMAGES = 2048, 16
# Part two: rows a batch of ours, records a batch of the baseline (about what ours hold), workers.
ROWS, BASELINE_BATCH, WORKERS, SHARDS = 2, 8, 2, 8
IMAGE_SIZE, PATCH, IMAGE_TOKENS = 64, 8, 64  # (64 / 8) ** 2 = 64 positions an image
IMAGE_KEYS = ("0.jpg", "1.jpg", "2.jpg")
IMAGE = "<image>"
_WORDS = (
    "the a of and to in is on with left right top bottom red green blue small large photo "
    "picture image flower temple garden roof tree sky stone wall door window color shape "
    "which what where how many one two three four five more less than near far behind front "
    "shows there are it this that light dark bright old new round square tall short"
)
WORDS = tuple(_WORDS.split())


def conversations(
    n: int, mu: float, image_tokens: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Tokens (text + image positions) and images per record."""
    rng = np.random.default_rng(seed)
    text = np.clip(np.rint(np.exp(rng.normal(mu, 0.8, n))), 8, 4096).astype(np.int64)
    images = rng.integers(1, 4, n)
    return text + image_tokens * images, images


def timed(plan_of, tokens, images, batch_size: int, repeats: int) -> tuple[BudgetPlan, float]:
    """The plan and the median seconds to compute it."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        plan = plan_of(
            tokens, images, seq_length=SEQ, batch_size=batch_size, max_images=MAX_IMAGES, seed=0
        )
        seconds.append(time.perf_counter() - start)
    return plan, statistics.median(seconds)


def packing(args: argparse.Namespace) -> None:
    """Part one: the plans' efficiencies on both budgets and their times."""

    tokens, images = conversations(args.records, args.mu, args.image_tokens)
    print(
        f"{args.records:,} conversations, 1-3 images of {args.image_tokens} tokens, text "
        f"exp(N({args.mu}, 0.8)); rows of {SEQ} tokens, max_images={MAX_IMAGES} a batch; "
        f"median of {args.repeats}; machine: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}, Python {platform.python_version()}"
    )
    print("\n1. Packing efficiency on both budgets")
    header = (
        f"{'rows/batch':>10} {'packer':<28} {'batches':>8} {'bound':>7} {'tokens/slot':>11} "
        f"{'text/slot':>9} {'images/max':>10} {'plan s':>7} {'us/rec':>6}"
    )
    print(header)
    for batch_size in args.batch_sizes:
        plans = {}
        for name, plan_of in [
            ("budget_plan (both budgets)", budget_plan),
            ("first_fit_plan (tokens)", first_fit_plan),
        ]:
            plans[name] = timed(plan_of, tokens, images, batch_size, args.repeats)
        fits = np.setdiff1d(np.arange(len(tokens)), next(iter(plans.values()))[0].over)
        bound = int(
            np.ceil(max(tokens[fits].sum() / (batch_size * SEQ), images[fits].sum() / MAX_IMAGES))
        )
        for name, (plan, seconds) in plans.items():
            slots = plan.num_batches * batch_size * SEQ
            text = (tokens - args.image_tokens * images)[plan.rows.doc].sum() / slots
            print(
                f"{batch_size:>10} {name:<28} {plan.num_batches:>8,} {bound:>7,} "
                f"{plan.token_efficiency:>11.3f} {text:>9.3f} {plan.image_efficiency:>10.3f} "
                f"{seconds:>7.2f} {1e6 * seconds / len(fits):>6.1f}"
            )
        (ours, _), (first, _) = plans.values()
        print(
            f"{'':>10} {'ratio (first fit / ours)':<28} "
            f"{first.num_batches / ours.num_batches:>8.3f}x batches"
        )
    over = next(iter(plans.values()))[0].over
    print(f"records over a budget (left out, counted): {len(over):,}")


# --------------------------------------------------------------------------- part two
def photo_crops(n: int, seed: int = 0) -> list[bytes]:
    """``n`` JPEGs of ``IMAGE_SIZE`` x ``IMAGE_SIZE``: random 128x128 crops of scikit-learn's
    two sample photos, shrunk 2x."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        photo = photos[i % 2]
        top = rng.integers(0, photo.shape[0] - 128 + 1)
        left = rng.integers(0, photo.shape[1] - 128 + 1)
        crop = np.ascontiguousarray(photo[top : top + 128, left : left + 128])
        buffer = io.BytesIO()
        Image.fromarray(crop).resize((IMAGE_SIZE, IMAGE_SIZE)).save(buffer, "JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


def loader_records(n: int, mu: float, seed: int = 0) -> list[dict[str, Any]]:
    """Records as webdataset writes them: 1-3 JPEGs (``0.jpg``...) and a ``json`` conversation
    of ``exp(N(mu, 0.8))`` words (clipped to [8, 1500]: every record fits a row), a quarter
    in the question, a placeholder per image at its start."""
    rng = np.random.default_rng(seed)
    jpegs = photo_crops(256, seed)
    words = np.asarray(WORDS)
    lengths = np.clip(np.rint(np.exp(rng.normal(mu, 0.8, n))), 8, 1500).astype(np.int64)
    counts = rng.integers(1, 4, n)
    out = []
    for i in range(n):
        ask = max(2, int(lengths[i]) // 4)
        question = " ".join(rng.choice(words, ask)).capitalize() + "?"
        answer = " ".join(rng.choice(words, int(lengths[i]) - ask)).capitalize() + "."
        record: dict[str, Any] = {"__key__": f"{i:06d}"}
        for k in range(int(counts[i])):
            record[IMAGE_KEYS[k]] = jpegs[int(rng.integers(len(jpegs)))]
        record["json"] = {
            "messages": [
                {"role": "user", "content": IMAGE * int(counts[i]) + question},
                {"role": "assistant", "content": answer},
            ]
        }
        out.append(record)
    return out


def write_shards(root: Path, records: list[dict[str, Any]]) -> str:
    """The records in ``SHARDS`` tars (written once under ``root``); their brace pattern."""
    import webdataset as wds

    pattern = str(root / f"vlm-{{000000..{SHARDS - 1:06d}}}.tar")
    if (root / "complete").exists():
        return pattern
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    per_shard = -(-len(records) // SHARDS)
    with wds.ShardWriter(str(root / "vlm-%06d.tar"), maxcount=per_shard, verbose=0) as sink:
        for record in records:
            sink.write(record)
    (root / "complete").touch()
    return pattern


def vlm_tokenizer(records: list[dict[str, Any]]) -> Any:
    """bench_chat's byte-level BPE with ChatML, trained on these conversations, and ``<image>``
    added as one special token."""
    tok = tokenizer_for([record["json"] for record in records], CHATML)
    tok.add_special_tokens({"additional_special_tokens": [IMAGE]})
    return tok


class LlavaCollate:
    """The hand-rolled collate: chat template, ``LlavaProcessor`` (``<image>`` expanded, images
    resized, rescaled and normalised), labels -100 at padding and at the image token."""

    def __init__(self, tok: Any) -> None:
        from transformers import CLIPImageProcessor, LlavaProcessor

        images = CLIPImageProcessor(
            size={"shortest_edge": IMAGE_SIZE},
            crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        )
        self.tok = tok
        self.processor = LlavaProcessor(
            image_processor=images, tokenizer=tok, patch_size=PATCH,
            vision_feature_select_strategy="full", chat_template=CHATML,
        )  # fmt: skip
        self.image_id = self.processor.image_token_id

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        from PIL import Image

        texts, images = [], []
        for sample in samples:
            messages = json.loads(sample["json"])["messages"]
            texts.append(self.tok.apply_chat_template(messages, tokenize=False))
            for key in IMAGE_KEYS:
                if key in sample:
                    images.append(Image.open(io.BytesIO(sample[key])).convert("RGB"))
        out = self.processor(text=texts, images=images, padding=True, return_tensors="pt")
        labels = out["input_ids"].clone()
        labels[out["attention_mask"] == 0] = -100
        labels[labels == self.image_id] = -100
        return {**out, "labels": labels}


def same_ids(dm: ImageTextDataModule, records: list[dict[str, Any]], count: int) -> int:
    """How many of the first ``count`` stored records hold exactly the ids that
    ``LlavaProcessor`` gives for the same record (its conversation and images)."""
    from PIL import Image

    docs, collate = dm.dataset, LlavaCollate(dm.tokenizer)
    per_shard = -(-len(records) // SHARDS)
    same = 0
    for i in range(min(count, len(docs))):
        shard, _, number = docs.where(i).rpartition(", ")  # "<shard>.tar, <unit> N"
        record = records[int(shard[-10:-4]) * per_shard + int(number.split()[-1]) - 1]
        images = [
            Image.open(io.BytesIO(record[k])).convert("RGB") for k in IMAGE_KEYS if k in record
        ]
        text = collate.tok.apply_chat_template(record["json"]["messages"], tokenize=False)
        theirs = collate.processor(text=[text], images=images, return_tensors="np")["input_ids"][0]
        start, length = int(docs.starts[i]), int(docs.lengths[i])
        same += np.array_equal(docs.tokens_np[start : start + length], theirs)
    return same


def baseline_loader(pattern: str, tok: Any) -> Any:
    """``DataLoader`` over ``webdataset.WebDataset`` of the shards with :class:`LlavaCollate`."""
    import webdataset as wds
    from torch.utils.data import DataLoader

    dataset = wds.WebDataset(pattern, shardshuffle=False, empty_check=False).shuffle(1000)
    return DataLoader(
        dataset, batch_size=BASELINE_BATCH, num_workers=WORKERS, collate_fn=LlavaCollate(tok),
        persistent_workers=True,
    )  # fmt: skip


def ours(pattern: str, tok: Any, cache: Path) -> ImageTextDataModule:
    return ImageTextDataModule(
        pattern, messages_key="json", image_key=";".join(IMAGE_KEYS), tokenizer=tok,
        image_token=IMAGE, image_tokens=IMAGE_TOKENS, packing=True, seq_length=SEQ,
        max_images=MAX_IMAGES, image_size=IMAGE_SIZE, batch_size=ROWS, num_workers=WORKERS,
        token_cache=str(cache),
    )  # fmt: skip


class Epochs:
    """Whole passes over a loader: seconds, records, images, tokens, image positions, token
    slots, batches and the most images in one batch, per pass."""

    def __init__(self, loader: Any, packed: bool, convert: Any = None) -> None:
        self.loader, self.packed, self.convert = loader, packed, convert
        self.passes: list[dict[str, float]] = []

    def run(self, image_id: int, count: int = 1) -> None:
        for _ in range(count):
            tally = dict.fromkeys(
                ("records", "images", "tokens", "image_positions", "slots", "batches", "most"), 0
            )
            start = time.perf_counter()
            for batch in self.loader:
                if self.convert is not None:
                    batch = self.convert(batch)
                mask = batch["attention_mask"].bool()
                if self.packed:
                    documents = batch["document_ids"]
                    tally["records"] += sum(len(row[row >= 0].unique()) for row in documents)
                else:
                    tally["records"] += len(batch["input_ids"])
                n = len(batch["pixel_values"])
                tally["images"] += n
                tally["most"] = max(tally["most"], n)
                tally["tokens"] += int(mask.sum())
                tally["image_positions"] += int((mask & (batch["input_ids"] == image_id)).sum())
                tally["slots"] += batch["input_ids"].numel()
                tally["batches"] += 1
            tally["seconds"] = time.perf_counter() - start
            self.passes.append(tally)

    def median(self, key: str) -> float:
        return statistics.median(p[key] / p["seconds"] for p in self.passes)


def throughput(args: argparse.Namespace) -> None:
    """Part two: records/s and images/s of ours and of the hand-rolled loader, 2 workers."""
    # The main process only converts ours' images to float (the device's work in training):
    # one thread, as each worker has. With two, on 2 cores that the workers keep busy, torch's
    # intra-op threads contend: 16 images of 64x64 took 24 ms to convert instead of 0.05 ms.
    torch.set_num_threads(1)
    records = loader_records(args.loader_records, args.mu)
    pattern = write_shards(args.root / f"n{args.loader_records}-mu{args.mu}", records)
    tok = vlm_tokenizer(records)
    image_id = tok.convert_tokens_to_ids(IMAGE)
    total_images = sum(k in r for r in records for k in IMAGE_KEYS)
    cache = Path(tempfile.mkdtemp(prefix="bench-vlm-tokens-"))
    load = os.getloadavg()[0]
    start = time.perf_counter()
    dm = ours(pattern, tok, cache)
    dm.setup("fit")
    first_setup = time.perf_counter() - start
    start = time.perf_counter()
    again = ours(pattern, tok, cache)
    again.setup("fit")
    second_setup = time.perf_counter() - start
    checked = min(200, len(records))
    agree = same_ids(dm, records, checked)
    mine = Epochs(dm.train_dataloader(), True, lambda b: dm.on_after_batch_transfer(b, 0))
    theirs = Epochs(baseline_loader(pattern, tok), False)
    for side in (mine, theirs):  # warm-up: workers started, files in the page cache
        side.run(image_id)
        side.passes.clear()
    for _ in range(args.repeats):
        mine.run(image_id, args.epochs)
        theirs.run(image_id, args.epochs)
    shutil.rmtree(cache, ignore_errors=True)

    print(
        f"\n2. Throughput with {WORKERS} workers: {len(records):,} records ({total_images:,} "
        f"images of {IMAGE_SIZE}x{IMAGE_SIZE}, {IMAGE_TOKENS} positions each) in {SHARDS} "
        f"tars; {args.epochs} epochs x {args.repeats} repeats after a warm-up, median; load "
        f"{load:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    print(f"{'loader':<52}{'records/s':>10}{'images/s':>10}{'vs baseline':>13}")
    base = theirs.median("records")
    for name, side in [
        (f"DataLoader + LlavaProcessor collate ({BASELINE_BATCH} a batch)", theirs),
        (f"ImageTextDataModule packed ({ROWS} x {SEQ}, <= {MAX_IMAGES} images)", mine),
    ]:
        rate = side.median("records")
        print(f"{name:<52}{rate:>10,.0f}{side.median('images'):>10,.0f}{rate / base:>12.2f}x")
    last, other = mine.passes[-1], theirs.passes[-1]
    print(
        f"each epoch: ours {last['records']:,} records, {last['images']:,} images, "
        f"{last['tokens']:,} tokens; baseline {other['records']:,}, {other['images']:,}, "
        f"{other['tokens']:,}"
    )
    print(
        f"ours, first setup (rendering {len(records):,} conversations into the store, once): "
        f"{first_setup:.2f} s; a second setup (mapping it): {second_setup:.2f} s"
    )
    print(f"ids of the first {checked} records, ours vs LlavaProcessor's: {agree} the same")
    epoch_mine = statistics.median(p["seconds"] for p in mine.passes)
    epoch_theirs = statistics.median(p["seconds"] for p in theirs.passes)
    print(
        f"one epoch with ours' first setup: {first_setup + epoch_mine:.2f} s, the baseline's "
        f"epoch {epoch_theirs:.2f} s ({epoch_theirs / (first_setup + epoch_mine):.2f}x)"
    )
    slots = last["slots"]
    print(
        f"ours, from the batches: tokens per row slot {last['tokens'] / slots:.3f} (text "
        f"{(last['tokens'] - last['image_positions']) / slots:.3f}), images per batch / "
        f"{MAX_IMAGES} {last['images'] / (last['batches'] * MAX_IMAGES):.3f}, "
        f"{last['batches']:,} batches"
    )
    lines = [line.strip() for line in dm.summary().splitlines() if "efficien" in line]
    print("ours, dm.summary(): " + ("; ".join(lines) if lines else "(no efficiency line)"))
    print(
        f"baseline: padding efficiency {other['tokens'] / other['slots']:.3f}, "
        f"images a batch {other['images'] / other['batches']:.1f} "
        f"(at most {other['most']}: no image budget), {other['batches']:,} batches"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mu", type=float, default=5.0)
    parser.add_argument("--image-tokens", type=int, default=64)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--parts", type=int, nargs="+", default=[1, 2], choices=[1, 2])
    parser.add_argument("--loader-records", type=int, default=4_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "bench-vlm")
    args = parser.parse_args()
    if 1 in args.parts:
        packing(args)
    if 2 in args.parts:
        throughput(args)


if __name__ == "__main__":
    main()
