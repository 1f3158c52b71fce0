"""Tiny series for the time-series tests, built in code: long frames with gaps, NaN, covariates
and static columns, and equal-length series for the contract."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch

from datamodules import TimeSeriesDataModule

#: The contract's series: each exactly context + horizon steps, so one window per series.
CONTEXT, HORIZON, SERIES = 4, 2, 41


def equal_series(n: int = SERIES) -> list[np.ndarray]:
    """``n`` series of ``CONTEXT + HORIZON`` steps; series ``i`` holds ``1000 * i + step``."""
    return [1000.0 * i + np.arange(CONTEXT + HORIZON) for i in range(n)]


def series_ids(batch: dict[str, torch.Tensor]) -> list[int]:
    """The series of each window of a batch."""
    return batch["series_index"].tolist()


def contract_datamodule(**kwargs: Any) -> TimeSeriesDataModule:
    """Whole series held out (core's seeded split over series), one window each."""
    return TimeSeriesDataModule(
        equal_series(),
        context_length=CONTEXT,
        prediction_length=HORIZON,
        split_by="series",
        store=False,
        **kwargs,
    )


def ddp_datamodule(**kwargs: Any) -> tuple[TimeSeriesDataModule, Any]:
    """Factory for tests/ddp_runner.py, split in time: every series has context + 2 horizons
    of steps and its last horizon validates, so each has one train and one val window."""
    kwargs = {"val_split": HORIZON, "batch_size": 4, "num_workers": 0, **kwargs}
    data = [1000.0 * i + np.arange(CONTEXT + 2 * HORIZON) for i in range(SERIES)]
    dm = TimeSeriesDataModule(
        data, context_length=CONTEXT, prediction_length=HORIZON, store=False, **kwargs
    )
    return dm, series_ids


def long_frame(
    lengths: tuple[int, ...] = (40, 31, 25, 52), freq: str = "h", gaps: bool = True
) -> pd.DataFrame:
    """A long frame: series ``s{i}`` of ``lengths[i]`` steps at ``freq``, value ``100 * i +
    step``; a known covariate (the step), an observed one (minus the step), a category and a
    number per series; with ``gaps``, steps 5 and 6 of every series are missing rows and step
    9's value is NaN."""
    frames = []
    for i, n in enumerate(lengths):
        steps = np.arange(n)
        start = pd.Timestamp("2024-01-01") + i * pd.tseries.frequencies.to_offset(freq)
        frame = pd.DataFrame(
            {
                "id": f"s{i}",
                "time": pd.date_range(start, periods=n, freq=freq),
                "value": 100.0 * i + steps,
                "step": steps.astype(float),
                "minus": -steps.astype(float),
                "kind": "even" if i % 2 == 0 else "odd",
                "size": float(i),
            }
        )
        if gaps:
            frame.loc[9, "value"] = np.nan
            frame = frame.drop(index=[5, 6])
        frames.append(frame)
    return pd.concat(frames, ignore_index=True).sample(frac=1.0, random_state=0)


def frame_datamodule(frame: Any = ..., **kwargs: Any) -> TimeSeriesDataModule:
    """A DataModule over ``frame`` (default :func:`long_frame`; None with ``files=``) with every
    kind of column."""
    defaults: dict[str, Any] = {
        "id_column": "id",
        "time_column": "time",
        "target": "value",
        "known": ["step"],
        "observed": ["minus"],
        "static_categorical": ["kind"],
        "static_real": ["size"],
        "freq": "h",
        "context_length": 6,
        "prediction_length": 3,
        "store": False,
        "num_workers": 0,
        "batch_size": 8,
    }
    defaults.update(kwargs)
    return TimeSeriesDataModule(long_frame() if frame is ... else frame, **defaults)


def window_keys(batch: dict[str, torch.Tensor], context: int) -> list[tuple[int, int]]:
    """``(series, first future step)`` of each window of a batch."""
    starts = (batch["window_start"] + context).tolist()
    return list(zip(batch["series_index"].tolist(), starts, strict=True))
