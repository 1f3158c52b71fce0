"""Time on a grid (steps at ``freq``, a pandas offset alias, or integers); calendar features.

:func:`grid_positions` places every row's time on one global grid of steps (position 0 at the
earliest time), refusing a time that is not a step of ``freq`` from there;
:func:`calendar_table` gives the calendar features of a run of grid positions (hour, day of
week, day of month, day of year, month, chosen from ``freq``), scaled to ``[-0.5, 0.5]`` as
GluonTS scales them, so a window's features are one gather from the table.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Grid", "calendar_names", "calendar_table", "check_freq", "grid_positions"]


def check_freq(freq: Any) -> Any:
    """The pandas offset of ``freq`` (a string such as ``"h"``, ``"D"``, ``"W-SAT"``,
    ``"MS"``), or None.

    Raises:
        TypeError: ``freq`` is not a string.
        ValueError: pandas does not know the alias.
    """
    if freq is None:
        return None
    if not isinstance(freq, str):
        raise TypeError(
            f"freq={freq!r} is not accepted: use a pandas offset alias ('h', 'D', 'W', 'MS', "
            "'QS', ...) or None (integer steps)."
        )
    from pandas.tseries.frequencies import to_offset

    try:
        return to_offset(freq)
    except ValueError as err:
        raise ValueError(
            f"freq={freq!r} is not accepted: use a pandas offset alias ('h', 'D', 'W', 'MS', "
            f"'QS', ...) or None (integer steps) ({err})."
        ) from None


class Grid:
    """A global grid of steps: position ``p`` is ``origin + p * freq`` (or integer ``p``).

    Args:
        offset: The pandas offset of ``freq``, or None for integer steps.
        origin: The time of position 0 (nanoseconds since the epoch, or an integer step).
    """

    def __init__(self, offset: Any, origin: int) -> None:
        self.offset = offset
        self.origin = int(origin)

    def timestamps(self, start: int, count: int) -> Any:
        """The times of positions ``start .. start + count - 1`` (a DatetimeIndex)."""
        import pandas as pd

        first = pd.Timestamp(self.origin, unit="ns")
        if start:
            first = first + start * self.offset
        return pd.date_range(first, periods=count, freq=self.offset)


def _tick_nanos(offset: Any) -> int | None:
    from pandas.tseries.offsets import Tick

    return int(offset.nanos) if isinstance(offset, Tick) else None


def grid_positions(
    time: np.ndarray,
    codes: np.ndarray,
    ids: list[Any],
    offset: Any,
    time_column: str,
    freq: str | None,
) -> tuple[np.ndarray, Grid]:
    """Every row's position on the global grid (int64) and the grid.

    Raises:
        ValueError: A datetime column without ``freq``, an integer column with ``freq``, or
            a time that is not a step of ``freq`` (naming the column, the series and the
            time).
        TypeError: The time column is neither datetimes nor integers.
    """
    kind = time.dtype.kind
    if kind == "M":
        if offset is None:
            raise ValueError(
                f"time_column={time_column!r} holds datetimes: give freq= (a pandas offset "
                "alias such as 'h', 'D', 'W-SUN', 'MS'), or integer steps with freq=None."
            )
        unit, ticks = np.datetime_data(time.dtype)
        per = _UNIT_NANOS.get(unit, 0) * ticks  # nanoseconds per tick of the column's unit
        raw = time.view(np.int64)
        if (raw == np.iinfo(np.int64).min).any():  # NaT
            row = int(np.flatnonzero(raw == np.iinfo(np.int64).min)[0])
            raise ValueError(
                f"time_column={time_column!r} is missing (NaT) at row {row} "
                f"(series {ids[codes[row]]!r})."
            )
        step = _tick_nanos(offset)
        if step is not None and per and step % per == 0:  # in the column's own unit: no copy
            low = int(raw.min())
            origin = low * per
            positions = raw - low
            bad = np.flatnonzero(positions % (step // per))
            positions //= step // per
            ns = _Nanos(raw, per)
        else:
            ns = time.astype("datetime64[ns]").view(np.int64)
            origin = int(ns.min())
        if step is not None and not (per and step % per == 0):
            positions, rest = np.divmod(ns - origin, step)
            bad = np.flatnonzero(rest)
        elif step is None:
            grid = Grid(offset, origin)
            first = grid.timestamps(0, 1)[0]
            if first.value != origin:
                bad = np.flatnonzero(ns == origin)
                positions = np.zeros(len(ns), dtype=np.int64)
            else:
                import pandas as pd

                count = len(pd.date_range(first, end=pd.Timestamp(int(ns.max())), freq=offset))
                stamps = grid.timestamps(0, count).asi8
                positions = np.searchsorted(stamps, ns)
                inside = np.minimum(positions, len(stamps) - 1)
                bad = np.flatnonzero(stamps[inside] != ns)
        if len(bad):
            row = int(bad[0])
            import pandas as pd

            raise ValueError(
                f"time_column={time_column!r}: {pd.Timestamp(int(ns[row]))} (series "
                f"{ids[codes[row]]!r}) is not a step of freq={freq!r} from the first time "
                f"{pd.Timestamp(origin)}: times must follow freq (missing steps are fine)."
            )
        return positions.astype(np.int64, copy=False), Grid(offset, origin)
    if kind in "iu":
        if offset is not None:
            raise ValueError(
                f"freq={freq!r} is for datetimes, but time_column={time_column!r} holds "
                "integers: give freq=None for integer steps, or datetimes."
            )
        steps = time.astype(np.int64, copy=False)
        origin = int(steps.min()) if len(steps) else 0
        return steps - origin, Grid(None, origin)
    raise TypeError(
        f"time_column={time_column!r} holds {time.dtype} values: use datetimes (with freq=) "
        "or integer steps."
    )


#: Calendar features: name -> (pandas attribute, lowest value, highest value).
_FEATURES = {
    "minute_of_hour": ("minute", 0, 59),
    "hour_of_day": ("hour", 0, 23),
    "day_of_week": ("day_of_week", 0, 6),
    "day_of_month": ("day", 1, 31),
    "day_of_year": ("day_of_year", 1, 366),
    "month_of_year": ("month", 1, 12),
}


#: Nanoseconds per unit of a datetime64 column.
_UNIT_NANOS = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}


class _Nanos:
    """A datetime column's values read as nanoseconds, one at a time (for messages)."""

    def __init__(self, raw: np.ndarray, per: int) -> None:
        self.raw, self.per = raw, per

    def __getitem__(self, row: int) -> int:
        return int(self.raw[row]) * self.per


def calendar_names(offset: Any) -> list[str]:
    """The calendar features that vary at ``freq``: finer steps get more of them."""
    if offset is None:
        return []
    nanos = _tick_nanos(offset)
    hour, day = 3_600 * 10**9, 86_400 * 10**9
    if nanos is not None and nanos < hour:
        return list(_FEATURES)
    if nanos is not None and nanos < day:
        return list(_FEATURES)[1:]
    name = str(getattr(offset, "rule_code", ""))
    if (nanos is not None and nanos < 7 * day) or name in ("D", "B", "C"):
        return ["day_of_week", "day_of_month", "day_of_year", "month_of_year"]
    if nanos is not None or name.startswith("W"):
        return ["day_of_month", "day_of_year", "month_of_year"]
    if name.startswith(("M", "SM", "BM", "CBM")) or name.startswith(("Q", "BQ")):
        return ["month_of_year"]
    return []


def calendar_table(grid: Grid, start: int, count: int) -> np.ndarray:
    """float32 (count, F): the calendar features of grid positions ``start ..``."""
    names = calendar_names(grid.offset)
    if not names or count <= 0:
        return np.zeros((max(count, 0), len(names)), dtype=np.float32)
    stamps = grid.timestamps(start, count)
    out = np.empty((count, len(names)), dtype=np.float32)
    for j, name in enumerate(names):
        attribute, low, high = _FEATURES[name]
        values = np.asarray(getattr(stamps, attribute), dtype=np.float32)
        out[:, j] = (values - low) / (high - low) - 0.5
    return out
