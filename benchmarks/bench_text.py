"""TextDataModule: padding efficiency of length buckets and loader throughput, in one run.

Data: 50,000 samples whose lengths are drawn as ``exp(N(3.2, 0.8))`` rounded and clipped to
[1, 512] (median about 25 tokens), as random lowercase texts tokenized by the built-in
character vocabulary, batch 32. Three parts:

1. **Padding efficiency** (real tokens / padded tokens, median over epochs 0-2) of the train
   batches: shuffled fixed batches (``bucket=False``) against length buckets for several pool
   sizes, with how much the batches change between epochs (batches of epoch 1 identical to one
   of epoch 0; pairs of samples batched together in epoch 0 that are together again in epoch 1).
2. **Token budget** (``batch_by="tokens"``): batches per epoch, real and padded tokens per
   batch, efficiency and the largest padded batch.
3. **Loader throughput** in real tokens per second over whole epochs (1,563 batches each):
   the DataModule's train loader against ``DataLoader(shuffle=True, batch_size=32)`` over the
   same pre-tokenised samples with a ``pad_sequence`` collate (and with ``PadCollate``). Each
   loader runs one epoch per repeat, alternating; figures are medians, the ratio is the
   median of per-repeat ratios. A ratio above 1.0 means TextDataModule is faster.

Run: ``python benchmarks/bench_text.py [--samples 50000] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collates import PadCollate  # noqa: E402
from datamodules import TextDataModule  # noqa: E402
from datamodules.core.buckets import BucketBatchSampler  # noqa: E402

# Benchmarks print figures, not the DataModules' summaries (logged at INFO).
logging.getLogger("datamodules").setLevel(logging.WARNING)

BATCH = 32


def make_lengths(n: int, seed: int = 0) -> list[int]:
    """Lengths drawn as exp(N(3.2, 0.8)), rounded and clipped to [1, 512]."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.exp(torch.randn(n, generator=g) * 0.8 + 3.2).round().clamp(1, 512)
    return lengths.long().tolist()


def make_texts(lengths: list[int], seed: int = 0) -> list[str]:
    """Random lowercase texts of the given lengths."""
    rng = np.random.default_rng(seed)
    letters = rng.integers(97, 123, size=sum(lengths), dtype=np.uint8).tobytes().decode()
    ends = np.cumsum(lengths)
    return [letters[e - n : e] for n, e in zip(lengths, ends, strict=True)]


def pad_sequence_collate(batch: list[tuple[torch.Tensor, int]]) -> dict[str, torch.Tensor]:
    """The usual hand-written collate: pad_sequence, labels, mask, lengths."""
    ids = [x for x, _ in batch]
    lengths = torch.tensor([len(x) for x in ids])
    padded = pad_sequence(ids, batch_first=True, padding_value=0)
    mask = (torch.arange(padded.shape[1]) < lengths.unsqueeze(1)).long()
    labels = torch.tensor([y for _, y in batch])
    return {"input_ids": padded, "labels": labels, "attention_mask": mask, "lengths": lengths}


class DictSamples:
    """A per-sample dataset of ``{"input_ids", "labels"}`` dicts, for PadCollate."""

    def __init__(self, samples: list[tuple[torch.Tensor, int]]) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> dict[str, Any]:
        ids, label = self.samples[i]
        return {"input_ids": ids, "labels": label}


def epoch_tokens_per_second(loader: Any, epoch: int) -> tuple[float, int]:
    """Iterates one epoch; returns real tokens per second and the batch count."""
    if hasattr(loader.sampler, "set_epoch"):
        loader.sampler.set_epoch(epoch)
    start = time.perf_counter()
    tokens = batches = 0
    for batch in loader:
        tokens += int(batch["lengths"].sum())
        batches += 1
    return tokens / (time.perf_counter() - start), batches


def pair_codes(batches: list[torch.Tensor], n: int) -> np.ndarray:
    """Every unordered pair of samples batched together, as i * n + j codes (i < j)."""
    codes = []
    for batch in batches:
        b = np.sort(batch.numpy())
        i, j = np.triu_indices(len(b), k=1)
        codes.append(b[i] * n + b[j])
    return np.concatenate(codes)


def mixing(sampler: BucketBatchSampler, n: int) -> tuple[float, float]:
    """Share of epoch-1 batches identical to an epoch-0 batch, and of pairs kept together."""
    first, second = sampler.epoch_batches(0), sampler.epoch_batches(1)
    same = {tuple(sorted(b.tolist())) for b in first} & {tuple(sorted(b.tolist())) for b in second}
    p0, p1 = pair_codes(first, n), pair_codes(second, n)
    kept = len(np.intersect1d(p0, p1, assume_unique=True)) / len(p0)
    return len(same) / len(second), kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    lengths = make_lengths(args.samples)
    texts = make_texts(lengths)
    labels = [i % 5 for i in range(len(texts))]
    start = time.perf_counter()
    dm = TextDataModule(texts, labels, val_split=0, batch_size=BATCH, num_workers=0)
    dm.setup("fit")
    setup_s = time.perf_counter() - start
    n = dm.split_size("train")
    encoded = dm.view("train").encoded
    print(
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs; {n} samples, mean length {np.mean(lengths):.1f}, median "
        f"{np.median(lengths):.0f}, max {max(lengths)}; setup (read + char vocabulary + "
        f"tokenize into one buffer) {setup_s:.2f} s"
    )

    # 1. Padding efficiency and mixing -------------------------------------------------------
    print(f"\n1. Padding efficiency, batch {BATCH} (median over epochs 0-2)")
    print(f"{'batches':<37} {'efficiency':>10} {'same batches':>13} {'pairs kept':>11}")
    rows: list[tuple[str, dict[str, Any]]] = [
        ("shuffled fixed (bucket=False)", {"bucket": False}),
        ("buckets, pool_batches=100", {"pool_batches": 100}),
        ("buckets, pool_batches=400", {"pool_batches": 400}),
        ("buckets, pool_batches=1000 (default)", {"pool_batches": 1000}),
    ]
    for name, kw in rows:
        sampler = BucketBatchSampler(encoded.lengths, BATCH, seed=42, **kw)
        eff = statistics.median(sampler.padding_efficiency(e) for e in range(3))
        same, kept = mixing(sampler, n)
        print(f"{name:<37} {eff:>10.3f} {same:>12.1%} {kept:>10.1%}")
    evaluation = BucketBatchSampler(encoded.lengths, BATCH, shuffle=False)
    print(f"{'eval_bucket=True (sorted, fixed)':<37} {evaluation.padding_efficiency(0):>10.3f}")

    # 2. Token budget -------------------------------------------------------------------------
    print("\n2. Token budget (batch_by='tokens', buckets, pool_batches=1000), epoch 0")
    print(
        f"{'max_tokens':>10} {'batches':>8} {'real tok/batch':>15} {'padded tok/batch':>17} "
        f"{'efficiency':>10} {'largest batch':>14}"
    )
    for budget in (1024, 2048, 4096):
        sampler = BucketBatchSampler(encoded.lengths, None, batch_by="tokens", max_tokens=budget)
        batches = sampler.epoch_batches(0)
        real = [int(encoded.lengths[b].sum()) for b in batches]
        padded = [len(b) * int(encoded.lengths[b].max()) for b in batches]
        print(
            f"{budget:>10} {len(batches):>8} {np.mean(real):>15.0f} {np.mean(padded):>17.0f} "
            f"{sum(real) / sum(padded):>10.3f} {max(padded):>14}"
        )

    # 3. Loader throughput --------------------------------------------------------------------
    samples = [(encoded.sample(i)["input_ids"], labels[i]) for i in range(n)]
    loaders = {
        "TextDataModule.train_dataloader()": dm.train_dataloader(),
        "DataLoader + pad_sequence collate": DataLoader(
            samples, batch_size=BATCH, shuffle=True, collate_fn=pad_sequence_collate
        ),
        "DataLoader + PadCollate": DataLoader(
            DictSamples(samples), batch_size=BATCH, shuffle=True, collate_fn=PadCollate()
        ),
    }
    counts = {name: len(loader) for name, loader in loaders.items()}
    assert len(set(counts.values())) == 1, counts
    for loader in loaders.values():  # warm-up
        for _, _ in zip(range(50), loader, strict=False):
            pass
    rates: dict[str, list[float]] = {name: [] for name in loaders}
    for repeat in range(args.repeats):
        for name, loader in loaders.items():
            rate, batches = epoch_tokens_per_second(loader, repeat)
            assert batches == counts[name]
            rates[name].append(rate)
    ours = rates["TextDataModule.train_dataloader()"]
    print(
        f"\n3. Loader throughput, {counts[next(iter(counts))]} batches of {BATCH} per epoch, "
        f"num_workers=0, median of {args.repeats} epochs"
    )
    print(f"{'loader':<36} {'real tokens/s':>14} {'batches/s':>10} {'TextDataModule is':>18}")
    total = sum(lengths)
    for name, values in rates.items():
        ratio = statistics.median(o / v for o, v in zip(ours, values, strict=True))
        rate = statistics.median(values)
        per_s = rate / total * counts[name]
        print(f"{name:<36} {rate:>14,.0f} {per_s:>10,.0f} {ratio:>17.2f}x")


if __name__ == "__main__":
    main()
