"""PadCollate against the usual hand-written ``pad_sequence`` collate, in the same run.

Lengths are drawn as ``exp(N(3.2, 0.8))`` clipped to [1, 512] (median about 25 tokens), batches
of 32 int64 sequences; a last case pads float32 (T, 80) feature sequences of the same lengths,
where PadCollate also ends up in ``pad_sequence``. Each case collates the same pre-built batches
with both functions; each figure is a median over repeats
(the two alternate in every repeat; the ratio is the median of per-repeat ratios). One torch
thread, as in a DataLoader worker. A ratio above 1.0 means PadCollate is faster.

Run: ``python benchmarks/bench_pad_collate.py [--batches 300] [--repeats 7]``.
"""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collates import PadCollate  # noqa: E402

# Benchmarks print figures, not the DataModules' summaries (logged at INFO).
logging.getLogger("datamodules").setLevel(logging.WARNING)

BATCH = 32


def make_lengths(n: int, seed: int = 0) -> list[int]:
    """Lengths drawn as exp(N(3.2, 0.8)), rounded and clipped to [1, 512]."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.exp(torch.randn(n, generator=g) * 0.8 + 3.2).round().clamp(1, 512)
    return lengths.long().tolist()


def baseline(batch: list[torch.Tensor], side: str = "right", multiple: int | None = None) -> Any:
    """The usual collate: pad_sequence, lengths from len(), mask from arange < lengths."""
    lengths = torch.tensor([len(x) for x in batch])
    padded = pad_sequence(batch, batch_first=True, padding_value=0, padding_side=side)
    if multiple and padded.shape[1] % multiple:
        extra = multiple - padded.shape[1] % multiple
        padded = F.pad(padded, (0, extra) if side == "right" else (extra, 0))
    positions = torch.arange(padded.shape[1]).unsqueeze(0)
    if side == "right":
        mask = positions < lengths.unsqueeze(1)
    else:
        mask = positions >= (padded.shape[1] - lengths).unsqueeze(1)
    return padded, mask.long(), lengths


def baseline_dicts(batch: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """The usual dict collate: pad input_ids, stack labels, build mask and lengths."""
    ids = [s["input_ids"] for s in batch]
    padded, mask, lengths = baseline(ids)
    labels = torch.tensor([s["label"] for s in batch])
    return {"input_ids": padded, "label": labels, "attention_mask": mask, "lengths": lengths}


def seconds_per_batch(fn: Callable[[Any], Any], batches: list[Any]) -> float:
    start = time.perf_counter()
    for batch in batches:
        fn(batch)
    return (time.perf_counter() - start) / len(batches)


def compare(
    base: Callable[[Any], Any], ours: Callable[[Any], Any], batches: list[Any], repeats: int
) -> tuple[float, float, float]:
    """Median seconds per batch of each, and the median of per-repeat ratios base / ours.

    The two alternate within every repeat, so a burst of load on the machine hits both.
    """
    for batch in batches[:20]:  # warm-up
        base(batch)
        ours(batch)
    t_base, t_ours = [], []
    for _ in range(repeats):
        t_base.append(seconds_per_batch(base, batches))
        t_ours.append(seconds_per_batch(ours, batches))
    ratios = [b / o for b, o in zip(t_base, t_ours, strict=True)]
    return statistics.median(t_base), statistics.median(t_ours), statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)

    lengths = make_lengths(args.batches * BATCH)
    seqs = [torch.randint(1, 30_000, (n,)) for n in lengths]
    batches = [seqs[i : i + BATCH] for i in range(0, len(seqs), BATCH)]
    feats = [torch.randn(n, 80) for n in lengths]
    feat_batches = [feats[i : i + BATCH] for i in range(0, len(feats), BATCH)]
    dict_batches = [
        [{"input_ids": s, "label": j % 5} for j, s in enumerate(batch)] for batch in batches
    ]

    cases = [
        ("tensors, right", batches, baseline, PadCollate()),
        (
            "tensors, left",
            batches,
            lambda b: baseline(b, side="left"),
            PadCollate(padding_side="left"),
        ),
        (
            "tensors, multiple_of=8",
            batches,
            lambda b: baseline(b, multiple=8),
            PadCollate(pad_to_multiple_of=8),
        ),
        ("dicts {input_ids, label}", dict_batches, baseline_dicts, PadCollate()),
        ("float (T, 80) features", feat_batches, baseline, PadCollate()),
    ]
    # Check the outputs agree before timing them.
    for _, data, base, ours in cases:
        want, got = base(data[0]), ours(data[0])
        want = list(want.values()) if isinstance(want, dict) else list(want)
        got = list(got.values()) if isinstance(got, dict) else list(got)
        assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))

    print(
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, 1 thread; "
        f"{len(batches)} batches of {BATCH}, mean length {sum(lengths) / len(lengths):.1f}, "
        f"median of {args.repeats} repeats"
    )
    print(f"{'case':<26} {'pad_sequence us/batch':>22} {'PadCollate us/batch':>20} {'ratio':>7}")
    for name, data, base, ours in cases:
        t_base, t_ours, ratio = compare(base, ours, data, args.repeats)
        print(f"{name:<26} {t_base * 1e6:>22.1f} {t_ours * 1e6:>20.1f} {ratio:>6.2f}x")


if __name__ == "__main__":
    main()
