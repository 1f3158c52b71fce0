"""Per-series arithmetic of the splits in time, and the checks of value columns.

* :func:`split_parts`: where each series' train and validation parts end when
  ``val_split`` / ``test_split`` are the last fraction (or count) of its steps;
* :func:`fit_ranges`: the steps each series' scaler is fitted on;
* :func:`check_numeric`: a value column as floats, or an error naming the column, the series
  and the value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["check_numeric", "fit_ranges", "part_size", "split_parts"]


def part_size(lengths: np.ndarray, split: float | int) -> np.ndarray:
    """Steps of each series a split takes: a count, or a fraction rounded (halves up)."""
    if isinstance(split, (int, np.integer)) and not isinstance(split, bool):
        return np.minimum(lengths, int(split))
    return np.floor(lengths * float(split) + 0.5).astype(np.int64)


def split_parts(
    lengths: np.ndarray, val_split: float | int, test_split: float | int, split_by: str
) -> tuple[np.ndarray, np.ndarray]:
    """``(train_end, val_end)`` per series: steps ``[0, train_end)`` train, ``[train_end,
    val_end)`` validate, ``[val_end, length)`` test. Splitting by series, every step of a
    series is in its series' split (both ends are the length)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if split_by == "series":
        return lengths.copy(), lengths.copy()
    test = part_size(lengths, test_split)
    val = np.minimum(part_size(lengths, val_split), lengths - test)
    return lengths - test - val, lengths - test


def fit_ranges(
    lengths: np.ndarray, train_end: np.ndarray, split_by: str, horizon: int
) -> np.ndarray:
    """The steps ``[0, end)`` each series' scaler is fitted on: its train part (in time), or
    all but the last ``horizon`` steps (by series: what no last window forecasts)."""
    if split_by == "series":
        return np.maximum(lengths - horizon, 0)
    return train_end.copy()


def check_numeric(
    values: np.ndarray, name: str, kind: str, codes: np.ndarray, ids: list[Any]
) -> np.ndarray:
    """``values`` as a float array (NaN for missing values).

    Raises:
        TypeError: A value that is not a number, naming the column, the series and the
            value.
    """
    if values.dtype.kind in "fiub":
        return values if values.dtype.kind == "f" else values.astype(np.float64)
    import pandas as pd

    out = np.empty(len(values), dtype=np.float64)
    for row, value in enumerate(values):
        if not isinstance(value, (str, bytes)) and pd.isna(value):
            out[row] = math.nan
            continue
        try:
            if isinstance(value, (str, bytes)):
                raise TypeError
            out[row] = float(value)
        except (TypeError, ValueError):
            raise TypeError(
                f"{kind} column {name!r} holds {value!r} (series {ids[codes[row]]!r}, row "
                f"{row}): {kind} values must be numbers (ints or floats; NaN or None where "
                "missing)."
            ) from None
    return out
