"""TimeSeriesDataModule against PyTorch Forecasting's TimeSeriesDataSet, on the same frame.

The data (``--series`` series, generated from a seed): lengths lognormal with mean 400 steps
(sigma 0.5, at least context + horizon = 192), hourly timestamps; one target, two known
covariates, one observed covariate and one static category; a long pandas frame with an
integer ``time_idx`` too (what PyTorch Forecasting indexes by). Context 168, horizon 24,
batch 128; every window at stride 1 trains (no validation part).

Both sides are set up alike: ours ``TimeSeriesDataModule(frame, ..., freq="h")`` (calendar
features and a standard scaler per series), theirs ``TimeSeriesDataSet(frame,
max_encoder_length=min_encoder_length=168, max_prediction_length=min_prediction_length=24,
static_categoricals, time_varying_known_reals, time_varying_unknown_reals,
target_normalizer=GroupNormalizer(groups=["series"]))`` and its ``to_dataloader(train=True)``.

Figures, each from this one run:

1. **Setup** (ours: frame to store; theirs: dataset construction): medians over ``--repeats``.
   Bar: ours at least 20x faster.
2. **Peak memory added by setup**: each setup in a fresh process; the frame is built, the
   process' peak RSS reset (``/proc/self/clear_refs``), the setup run, then its peak RSS
   (``VmHWM``, file-backed pages of our mapped store included) less the RSS before. Bar:
   ours at most a third of theirs.
3. **Windows per second**, 0 and 2 workers: ours over a whole epoch, theirs over
   ``--their-batches`` batches (their epoch takes many minutes), the first batches of each
   run not counted. Bar: ours at least 10x theirs.
4. **The same windows**: our set of (series, first future step) equals theirs
   (``decoded_index``); with ``scaler=None`` our values equal the raw slices of the frame.
5. **A second setup** maps the store: its time as a share of the first. Bar: at most 5%.
6. **The limit**: a bare NumPy gather of the same windows (values only, one contiguous
   float32 array, index arithmetic per batch), windows/s over the same epoch.

Run: ``python benchmarks/bench_time_series.py`` (about 10 minutes on 2 cores; needs
``pytorch-forecasting`` from the ``bench`` extra). ``--series 500 --repeats 1`` is quick.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONTEXT, HORIZON, BATCH = 168, 24, 128
logging.getLogger("datamodules").setLevel(logging.WARNING)
logging.getLogger("lightning").setLevel(logging.WARNING)
warnings.filterwarnings("ignore")


def make_frame(series: int, seed: int = 0) -> Any:
    """The long frame: a row per series and hour."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    sigma = 0.5
    lengths = rng.lognormal(np.log(400) - sigma**2 / 2, sigma, series).astype(np.int64)
    lengths = np.maximum(lengths, CONTEXT + HORIZON)
    ids = np.repeat(np.arange(series), lengths)
    starts = np.cumsum(lengths) - lengths
    step = np.arange(lengths.sum()) - np.repeat(starts, lengths)
    offset = rng.integers(0, 24 * 365, series)
    hours = step + np.repeat(offset, lengths)
    phase = np.repeat(rng.uniform(0, 6.28, series), lengths)
    target = (np.sin(hours * 2 * np.pi / 24 + phase) + rng.normal(0, 0.3, len(ids))).astype(
        np.float64
    ) * np.repeat(rng.uniform(1, 100, series), lengths)
    return pd.DataFrame(
        {
            "series": ids,
            "time": pd.Timestamp("2020-01-01") + pd.to_timedelta(hours, unit="h"),
            "time_idx": hours,
            "target": target,
            "price": rng.uniform(1, 2, len(ids)),
            "promo": rng.integers(0, 2, len(ids)).astype(np.float64),
            "visitors": rng.poisson(20, len(ids)).astype(np.float64),
            "group": pd.Categorical(np.repeat(rng.integers(0, 10, series), lengths).astype(str)),
        }
    )


def ours(frame: Any, store: str, **kwargs: Any) -> Any:
    from datamodules import TimeSeriesDataModule

    options = {"batch_size": BATCH, "val_split": 0, "num_workers": 0, **kwargs}
    return TimeSeriesDataModule(
        frame, id_column="series", time_column="time", target="target",
        known=["price", "promo"], observed=["visitors"], static_categorical=["group"],
        freq="h", context_length=CONTEXT, prediction_length=HORIZON, store=store, **options,
    )  # fmt: skip


def theirs(frame: Any) -> Any:
    from pytorch_forecasting import TimeSeriesDataSet
    from pytorch_forecasting.data import GroupNormalizer

    return TimeSeriesDataSet(
        frame, time_idx="time_idx", target="target", group_ids=["series"],
        max_encoder_length=CONTEXT, min_encoder_length=CONTEXT,
        max_prediction_length=HORIZON, min_prediction_length=HORIZON,
        static_categoricals=["group"], time_varying_known_reals=["price", "promo"],
        time_varying_unknown_reals=["target", "visitors"],
        target_normalizer=GroupNormalizer(groups=["series"]),
        add_relative_time_idx=False, add_target_scales=False, add_encoder_length=False,
    )  # fmt: skip


def setup_once(side: str, frame: Any, store: str) -> float:
    start = time.perf_counter()
    if side == "ours":
        ours(frame, store).setup("fit")
    else:
        theirs(frame)
    return time.perf_counter() - start


def memory_child(side: str, series: int) -> None:
    """In a fresh process: the peak RSS that setup adds (bytes), printed as JSON."""
    frame = make_frame(series)
    store = tempfile.mkdtemp(prefix="bench-ts-")
    if side == "ours":
        import datamodules.time_series.datamodule  # noqa: F401  (imports are not setup)
    else:
        import pytorch_forecasting  # noqa: F401
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status("VmRSS")
    setup_once(side, frame, store)
    print(json.dumps({"added": _status("VmHWM") - before}))
    shutil.rmtree(store, ignore_errors=True)


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def peak_added(side: str, series: int) -> int:
    command = [sys.executable, __file__, "--memory-child", side, "--series", str(series)]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["added"]


def rate(loader: Any, limit: int | None, skip: int = 3) -> float:
    """Windows per second over ``limit`` batches (None: the epoch), the first ``skip`` not
    counted."""
    count, start = 0, None
    for i, batch in enumerate(loader):
        if i == skip:
            start, count = time.perf_counter(), 0
        count += len(batch["series_index"])
        if limit is not None and i + 1 >= limit + skip:
            break
    assert start is not None
    return count / (time.perf_counter() - start)


def bare_gather(frame: Any, dm: Any) -> float:
    """Windows/s of a bare NumPy gather of the same epoch's windows from one array."""
    values = frame["target"].to_numpy(np.float32)  # rows are contiguous per series here
    starts = np.cumsum(np.bincount(frame["series"].to_numpy())) - np.bincount(frame["series"])
    series, future = dm.plan("train").windows()
    first = starts[series] + future - CONTEXT
    order = np.random.default_rng(0).permutation(len(first))
    span = np.arange(CONTEXT + HORIZON)
    begin = time.perf_counter()
    for at in range(0, len(order), BATCH):
        rows = first[order[at : at + BATCH]]
        window = values[rows[:, None] + span]
        _ = window[:, :CONTEXT], window[:, CONTEXT:]
    return len(order) / (time.perf_counter() - begin)


def same_windows(frame: Any, dm: Any, dataset: Any) -> tuple[bool, bool]:
    """(our windows equal theirs, our unscaled values equal the raw slices)."""
    index = dataset.decoded_index
    their = set(zip(index["series"].astype(int), index["time_idx_first_prediction"], strict=True))
    first_idx = frame.groupby("series")["time_idx"].min().to_numpy()
    series, future = dm.plan("train").windows()
    ids = np.asarray(dm.series_ids)[series]
    mine = set(zip(ids.tolist(), (first_idx[ids] + future).tolist(), strict=True))
    raw = ours(frame, dm.store_root, scaler=None, shuffle=False, time_features=False)
    raw.setup("fit")
    values = frame["target"].to_numpy(np.float32)
    starts = np.cumsum(np.bincount(frame["series"].to_numpy())) - np.bincount(frame["series"])
    equal = True
    for i, batch in enumerate(raw.train_dataloader()):
        got = np.concatenate([batch["past_values"], batch["future_values"]], 1)
        rows = starts[batch["series_index"].numpy()] + batch["window_start"].numpy()
        equal &= bool(np.array_equal(got, values[rows[:, None] + np.arange(CONTEXT + HORIZON)]))
        if i == 200:
            break
    return mine == their, equal


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--their-batches", type=int, default=150)
    parser.add_argument("--memory-child", choices=["ours", "theirs"], default=None)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child, args.series)
        return
    import pytorch_forecasting
    import torch

    import datamodules.time_series.datamodule  # noqa: F401  (imports are not setup)

    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, torch {torch.__version__}, pytorch-forecasting "
          f"{pytorch_forecasting.__version__}")  # fmt: skip
    print("load before:", os.getloadavg())
    frame = make_frame(args.series)
    lengths = frame.groupby("series").size()
    print(f"data: {args.series} series, {len(frame):,} rows, mean length {lengths.mean():.0f}")
    root = tempfile.mkdtemp(prefix="bench-ts-")
    firsts, seconds, theirs_times = [], [], []
    for r in range(args.repeats):
        store = os.path.join(root, f"r{r}")
        firsts.append(setup_once("ours", frame, store))
        seconds.append(setup_once("ours", frame, store))
        theirs_times.append(setup_once("theirs", frame, store))
    first, second, their = (statistics.median(x) for x in (firsts, seconds, theirs_times))
    print(f"setup: ours {first:.2f} s, theirs {their:.2f} s: {their / first:.1f}x")
    share = f"{second * 1000:.0f} ms = {second / first:.1%} of the first"
    print(f"second setup (maps the store): {share}")
    mine, their_mem = peak_added("ours", args.series), peak_added("theirs", args.series)
    print(f"peak memory added by setup: ours {mine / 2**20:.0f} MiB, theirs "
          f"{their_mem / 2**20:.0f} MiB: {mine / their_mem:.2f} of theirs")  # fmt: skip
    dm = ours(frame, os.path.join(root, "r0"))
    dm.setup("fit")
    dataset = theirs(frame)
    windows = dm.windows("train")
    print(f"windows: ours {windows:,}, theirs {len(dataset):,}")
    same, equal = same_windows(frame, dm, dataset)
    print(f"same (series, first future step) set as theirs: {same}; values equal raw: {equal}")
    for workers in (0, 2):
        mine_rate = rate(ours(frame, os.path.join(root, "r0"), num_workers=workers)
                         .train_dataloader(), None)  # fmt: skip
        loader = dataset.to_dataloader(train=True, batch_size=BATCH, num_workers=workers)
        their_rate = rate(_as_dicts(loader), args.their_batches)
        print(f"windows/s, {workers} workers: ours {mine_rate:,.0f} (an epoch), theirs "
              f"{their_rate:,.0f} ({args.their_batches} batches): "
              f"{mine_rate / their_rate:.1f}x")  # fmt: skip
    bare = bare_gather(frame, dm)
    print(f"bare NumPy gather of the same windows (values only): {bare:,.0f} windows/s")
    print("load after:", os.getloadavg())
    shutil.rmtree(root, ignore_errors=True)


def _as_dicts(loader: Any) -> Any:
    for x, _ in loader:
        yield {"series_index": x["groups"]}


if __name__ == "__main__":
    main()
