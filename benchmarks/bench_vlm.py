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
2. **Throughput with 2 workers** (records/s, images/s): needs ``ImageTextDataModule`` with
   ``messages_key`` and ``packing=True``; not measured by this script yet (it says so).

Run: ``python benchmarks/bench_vlm.py [--records 100000] [--repeats 3] [--mu 5.0]
[--batch-sizes 1 2 4 8]``.
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collates.pack_budgets import BudgetPlan, budget_plan, first_fit_plan  # noqa: E402

# Benchmarks print figures, not the DataModules' summaries (logged at INFO).
logging.getLogger("datamodules").setLevel(logging.WARNING)

SEQ, MAX_IMAGES = 2048, 16


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mu", type=float, default=5.0)
    parser.add_argument("--image-tokens", type=int, default=64)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()

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
    print(
        "\n2. Throughput with 2 workers: not measured here yet "
        "(needs ImageTextDataModule(messages_key=..., packing=True))."
    )


if __name__ == "__main__":
    main()
