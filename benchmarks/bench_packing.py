"""Packing for language models: share of real tokens and loader throughput, in one run.

Data: ``benchmarks/bench_text.py``'s 50,000 lognormal lengths (``exp(N(3.2, 0.8))`` rounded,
clipped to [1, 512]; median about 25 tokens) as random lowercase texts, character vocabulary,
no labels. Two parts:

1. **Share of real tokens** (real tokens / the rows' capacity) of the train split's rows,
   median over epochs 0-2, for ``pack_mode="split"`` and ``"whole"`` and several
   ``seq_length``, with the time to plan one epoch (mean of epochs 3-5); beside it, the
   padding efficiency of length buckets (``batch_by="tokens"``, the same token budget per
   batch) on the same data.
2. **Loader throughput** in real tokens per second over whole epochs, ``num_workers=0``,
   about 4,096 token slots per batch: ``TextDataModule(packing=True)`` (8 rows of 512) in both
   modes; the bucketing loader (``batch_by="tokens", max_tokens=4096``, and
   ``batch_size=120`` samples: about as many real tokens per batch); and a plain
   ``DataLoader(shuffle=True, batch_size=120)`` over the same pre-tokenised samples (lists of
   ids, as a tokenizer returns them) with transformers' ``DataCollatorWithFlattening``, and
   with ``collates.PackCollate()`` (the same one-row layout). Each loader runs one epoch per
   repeat, alternating; real tokens per epoch are counted once, outside the timed loops;
   figures are medians, ratios the medians of per-repeat ratios.
3. **With workers**: the same three ``TextDataModule`` loaders with ``num_workers=2,
   persistent_workers=True`` and 8 rows of 2,048 (``max_tokens=16384`` for buckets), where
   a batch's tensors travel through the workers' shared-memory slots; with the slot
   counts (a batch that found no free slot goes PyTorch's usual way, a fresh segment).

4. **A blend of two token files**: the same documents' lengths as random token ids, written
   as two flat token files (uint16, eos 0; documents dealt alternately) and as one file of
   them all. ``TextDataModule(token_files=[Source(a, weight=[[0, 1], [2, 3]]),
   Source(b, weight=1)], packing=True)`` (one epoch: all the sources' rows, split by the
   schedule) against ``TextDataModule(token_files=one_file, packing=True)``, 8 rows of 512,
   0 and 2 workers; real tokens per second, alternating epochs, the ratio the median of
   per-repeat ratios (bar: the blend at least 0.95x one file).

Run: ``python benchmarks/bench_packing.py [--samples 50000] [--repeats 7] [--no-workers]
[--no-blend]`` (needs the ``bench`` extra for transformers; ``--only-blend``: part 4 alone).
"""

from __future__ import annotations

import argparse
import gc
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
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_text import make_lengths, make_texts  # noqa: E402

from collates import PackCollate  # noqa: E402
from datamodules import Source, TextDataModule  # noqa: E402
from datamodules.core.buckets import BucketBatchSampler  # noqa: E402
from datamodules.tokens.packing import PackPlanner  # noqa: E402

# Benchmarks print figures, not the DataModules' summaries (logged at INFO).
logging.getLogger("datamodules").setLevel(logging.WARNING)

ROWS, SEQ = 8, 512
BUDGET = ROWS * SEQ
FLAT_BATCH = 120  # samples per flattened batch: about BUDGET tokens at the mean length


def real_tokens(batch: dict[str, Any]) -> int:
    """Real tokens of a batch, whatever its layout."""
    if "lengths" in batch:
        return int(batch["lengths"].sum())
    if "attention_mask" in batch:
        return int(batch["attention_mask"].sum())
    return int(batch["input_ids"].numel())  # one flattened row: no padding


def epoch_tokens(loader: Any) -> tuple[int, int]:
    """Iterates one (untimed) epoch; returns its real tokens and batches."""
    tokens = batches = 0
    for batch in loader:
        tokens += real_tokens(batch)
        batches += 1
    return tokens, batches


def epoch_rate(loader: Any, epoch: int, tokens: int) -> float:
    """Iterates one epoch; returns real tokens per second.

    Every loader covers its data exactly once per epoch, so its real tokens per epoch are
    counted once (:func:`epoch_tokens`) and not inside the timed loop: counting them costs
    each layout differently (a sum over 120 lengths, or over 4,096 mask entries).

    The garbage collector is off while the epoch runs (as ``timeit`` does): the baselines'
    50,000 lists of ids otherwise make a full collection cost a quarter of a second, which
    lands on whichever loader happens to run then.
    """
    if hasattr(loader.sampler, "set_epoch"):
        loader.sampler.set_epoch(epoch)
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in loader:
            pass
        return tokens / (time.perf_counter() - start)
    finally:
        gc.enable()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-workers", action="store_true", help="skip part 3")
    parser.add_argument("--no-blend", action="store_true", help="skip part 4")
    parser.add_argument("--only-blend", action="store_true", help="part 4 alone")
    args = parser.parse_args()
    if args.only_blend:
        blend(make_lengths(args.samples), args.repeats)
        return

    lengths = make_lengths(args.samples)
    texts = make_texts(lengths)
    packed = {
        mode: TextDataModule(
            texts,
            packing=True,
            seq_length=SEQ,
            pack_mode=mode,
            batch_size=ROWS,
            val_split=0,
            num_workers=0,
        )
        for mode in ("split", "whole")
    }
    start = time.perf_counter()
    packed["split"].setup("fit")
    setup_s = time.perf_counter() - start
    encoded = packed["split"].view("train").encoded
    doc_lengths = encoded.lengths_np
    print(
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs; {len(texts)} documents, {int(doc_lengths.sum()):,} tokens, "
        f"mean length {np.mean(lengths):.1f}, max {max(lengths)}; setup {setup_s:.2f} s"
    )

    # 1. Share of real tokens ----------------------------------------------------------------
    print("\n1. Share of real tokens (real / rows x seq_length), median over epochs 0-2")
    print(f"{'layout':<40} {'rows':>7} {'real share':>11} {'split docs':>11} {'plan ms':>8}")
    for seq in (512, 1024, 2048):
        for mode in ("split", "whole"):
            planner = PackPlanner(doc_lengths, seq, mode, True, 42)
            plans = [planner.plan(e) for e in range(3)]
            t0 = time.perf_counter()
            for e in range(3, 6):  # epochs whose plans setup did not compute
                planner.plan(e)
            ms = (time.perf_counter() - t0) / 3 * 1000
            shares = [p.num_tokens / (p.num_rows * seq) for p in plans]
            split_docs = statistics.median(p.split_documents() for p in plans)
            name = f"packing, pack_mode={mode!r}, seq_length={seq}"
            print(
                f"{name:<40} {planner.num_rows:>7} {statistics.median(shares):>11.4f} "
                f"{split_docs:>11.0f} {ms:>8.0f}"
            )
    bucket = BucketBatchSampler(encoded.lengths, None, batch_by="tokens", max_tokens=BUDGET)
    eff = statistics.median(bucket.padding_efficiency(e) for e in range(3))
    print(f"{'length buckets, max_tokens=' + str(BUDGET):<40} {'':>7} {eff:>11.4f}")

    # 2. Loader throughput --------------------------------------------------------------------
    ids = [encoded.sample(i)["input_ids"].tolist() for i in range(len(encoded))]
    features = [{"input_ids": x} for x in ids]
    by_tokens = TextDataModule(
        texts, val_split=0, batch_by="tokens", max_tokens=BUDGET, num_workers=0
    )
    by_samples = TextDataModule(texts, val_split=0, batch_size=FLAT_BATCH, num_workers=0)
    loaders: dict[str, Any] = {
        "TextDataModule packing, split": packed["split"].train_dataloader(),
        "TextDataModule packing, whole": packed["whole"].train_dataloader(),
        f"TextDataModule buckets, max_tokens={BUDGET}": by_tokens.train_dataloader(),
        f"TextDataModule buckets, batch_size={FLAT_BATCH}": by_samples.train_dataloader(),
        "DataLoader + PackCollate()": DataLoader(
            features, batch_size=FLAT_BATCH, shuffle=True, collate_fn=PackCollate()
        ),
    }
    try:
        from transformers import DataCollatorWithFlattening

        loaders["DataLoader + DataCollatorWithFlattening"] = DataLoader(
            features,
            batch_size=FLAT_BATCH,
            shuffle=True,
            collate_fn=DataCollatorWithFlattening(return_tensors="pt"),
        )
    except ImportError:
        print("transformers is not installed (pip install -e '.[bench]'): its row is left out")
    tokens: dict[str, int] = {}
    counts: dict[str, int] = {}
    for name, loader in loaders.items():  # warm-up, and each loader's tokens per epoch
        tokens[name], counts[name] = epoch_tokens(loader)
    rates: dict[str, list[float]] = {name: [] for name in loaders}
    for repeat in range(args.repeats):
        for name, loader in loaders.items():
            rates[name].append(epoch_rate(loader, repeat, tokens[name]))
    ours = rates["TextDataModule packing, split"]
    print(
        f"\n2. Loader throughput, num_workers=0, about {BUDGET} token slots per batch, "
        f"median of {args.repeats} epochs"
    )
    print(f"{'loader':<42} {'batches':>8} {'real tokens/s':>14} {'packing (split) is':>19}")
    for name, values in rates.items():
        ratio = statistics.median(o / v for o, v in zip(ours, values, strict=True))
        print(f"{name:<42} {counts[name]:>8} {statistics.median(values):>14,.0f} {ratio:>18.2f}x")

    if not args.no_workers:
        with_workers(texts, args.repeats)
    if not args.no_blend:
        blend(lengths, args.repeats)


def with_workers(texts: list[str], repeats: int, rows: int = 8, seq: int = 2048) -> None:
    """Part 3: the DataModule loaders with two persistent workers."""
    common = {"val_split": 0, "num_workers": 2, "persistent_workers": True}
    loaders = {
        f"packing, split, {rows} x {seq}": TextDataModule(
            texts, packing=True, seq_length=seq, batch_size=rows, **common
        ).train_dataloader(),
        f"packing, whole, {rows} x {seq}": TextDataModule(
            texts, packing=True, seq_length=seq, pack_mode="whole", batch_size=rows, **common
        ).train_dataloader(),
        f"buckets, max_tokens={rows * seq}": TextDataModule(
            texts, batch_by="tokens", max_tokens=rows * seq, **common
        ).train_dataloader(),
    }
    tokens = {name: epoch_tokens(loader)[0] for name, loader in loaders.items()}
    rates: dict[str, list[float]] = {name: [] for name in loaders}
    for repeat in range(repeats):
        for name, loader in loaders.items():
            rates[name].append(epoch_rate(loader, repeat + 1, tokens[name]))
    ours = rates[next(iter(loaders))]
    print(f"\n3. With 2 persistent workers, median of {repeats} epochs")
    print(
        f"{'loader':<42} {'real tokens/s':>14} {'packing (split) is':>19} "
        f"{'pooled':>7} {'fallback':>9}"
    )
    for name, values in rates.items():
        ratio = statistics.median(o / v for o, v in zip(ours, values, strict=True))
        stats = loaders[name].batch_pool.stats()
        print(
            f"{name:<42} {statistics.median(values):>14,.0f} {ratio:>18.2f}x "
            f"{stats['pooled']:>7} {stats['fallback']:>9}"
        )


def blend(lengths: np.ndarray, repeats: int) -> None:
    """Part 4: a blend of two token files against one file of the same documents."""
    import tempfile

    rng = np.random.default_rng(0)
    docs = [np.append(rng.integers(1, 50_000, size=int(n)), 0) for n in lengths]
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name, part in (("one", docs), ("a", docs[0::2]), ("b", docs[1::2])):
            paths[name] = str(Path(tmp) / f"{name}.bin")
            np.concatenate(part).astype(np.uint16).tofile(paths[name])
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(
            f"\n4. A blend of two token files against one file, median of {repeats} epochs "
            f"(torch threads {torch.get_num_threads()}, load average {load})"
        )
        print(f"{'loader':<44} {'real tokens/s':>14} {'blend is':>9}")
        for workers in (0, 2):
            common = {"eos_id": 0, "vocab_size": 50_000, "packing": True, "seq_length": SEQ,
                      "batch_size": ROWS, "val_split": 0, "num_workers": workers}  # fmt: skip
            sources = [Source(paths["a"], weight=[[0, 1], [2, 3]], name="a"),
                       Source(paths["b"], weight=1, name="b")]  # fmt: skip
            loaders = {
                f"one token file, {workers} workers": TextDataModule(
                    token_files=paths["one"], **common
                ).train_dataloader(),
                f"blend of two (a schedule), {workers} workers": TextDataModule(
                    token_files=sources, **common
                ).train_dataloader(),
            }
            tokens = {name: epoch_tokens(loader)[0] for name, loader in loaders.items()}
            rates: dict[str, list[float]] = {name: [] for name in loaders}
            for repeat in range(repeats):
                for name, loader in loaders.items():
                    rates[name].append(epoch_rate(loader, repeat + 1, tokens[name]))
            one, mixed = rates.values()
            ratio = statistics.median(m / o for m, o in zip(mixed, one, strict=True))
            for name, values in rates.items():
                shown = f"{ratio:.3f}x" if "blend" in name else ""
                print(f"{name:<44} {statistics.median(values):>14,.0f} {shown:>9}")
            del loaders


if __name__ == "__main__":
    main()
