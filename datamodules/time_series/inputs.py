"""What TimeSeriesDataModule accepts, turned into one shape: flat NumPy columns of long rows.

:func:`read_columns` takes any input the DataModule accepts (a long pandas or Polars frame, a
wide frame, a NumPy array of series x time, a list of 1-D (or time x channels) arrays, or
long-format Parquet / CSV / Arrow files through the shard layer) and returns
:class:`LongColumns`: one row per (series, step) with the series as integer codes, the time
column as NumPy values, and the value columns by name. Columns are taken from the frame
without copying where NumPy allows; nothing here sorts or fills (the store does).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["LongColumns", "column_names", "is_frame", "read_columns"]

#: The name the series id gets where the input has none (arrays, wide frames).
SERIES = "series"


@dataclass
class LongColumns:
    """Long-format rows: a series code, a time value and named columns per row.

    Attributes:
        codes: int64 series code per row, ``0 .. len(ids) - 1`` in sorted id order.
        ids: The series ids, in code order (strings, ints or column names).
        time: The time value per row (int64 steps or ``datetime64[ns]``), or None: the
            rows of each series are its consecutive steps, in order.
        columns: Value columns by name (one NumPy array per column, a row each).
        id_column: The name of the series column (for messages).
        time_column: The name of the time column (for messages).
        signature: What identifies the inputs cheaply (files: paths, sizes, versions).
    """

    codes: np.ndarray | None
    ids: list[Any] | None
    time: np.ndarray | None
    columns: dict[str, np.ndarray]
    id_column: str = SERIES
    time_column: str | None = None
    signature: list[Any] = field(default_factory=list)
    #: The labels of categorical columns, whose values are then int codes (-1: missing).
    categories: dict[str, list[Any]] = field(default_factory=dict)
    #: The id column's values, until :meth:`factorize` turns them into ``codes`` and ``ids``
    #: (a store that exists already is found without it).
    id_values: np.ndarray | None = None

    @property
    def rows(self) -> int:
        """The number of rows."""
        return len(self.codes if self.codes is not None else self.id_values)

    def factorize(self) -> None:
        """Sets ``codes`` and ``ids`` from ``id_values`` (once)."""
        if self.codes is None:
            self.codes, self.ids = _factorize(self.id_values)
            self.id_values = None


def is_frame(data: Any) -> str | None:
    """``"pandas"`` or ``"polars"`` for a DataFrame of either, else None."""
    module = type(data).__module__.split(".")[0]
    if module in ("pandas", "polars") and type(data).__name__ == "DataFrame":
        return module
    return None


def column_names(data: Any) -> list[str]:
    """The column names of a pandas or Polars frame."""
    return [str(c) for c in data.columns]


def _plain_id(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _factorize(values: np.ndarray) -> tuple[np.ndarray, list[Any]]:
    """Series codes in sorted id order (pandas' factorize, sorted)."""
    import pandas as pd

    codes, uniques = pd.factorize(values, sort=True)
    if (codes < 0).any():
        row = int(np.flatnonzero(codes < 0)[0])
        raise ValueError(f"the series id is missing (null) at row {row}.")
    return codes.astype(np.int64, copy=False), [_plain_id(u) for u in np.asarray(uniques)]


def _categorical(data: Any, kind: str, name: str) -> tuple[np.ndarray, list[Any]] | None:
    """A categorical column's codes and labels (no strings per row), else None."""
    if kind == "pandas":
        series = data[name]
        if str(series.dtype) != "category":
            return None
        labels = [_plain_id(v) for v in series.cat.categories.tolist()]
        return series.cat.codes.to_numpy(), labels
    import polars as pl

    column = data.get_column(name)
    if str(column.dtype) not in ("Categorical", "Enum") and not str(column.dtype).startswith(
        ("Categorical", "Enum")
    ):
        return None
    # Physical ids index a global string table: renumber those present, labels in order.
    present = column.drop_nulls().unique()
    if not len(present):
        return np.full(len(column), -1, dtype=np.int64), []
    ids = present.to_physical().cast(pl.Int64).to_numpy()
    table = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
    table[ids] = np.arange(len(ids))
    physical = column.to_physical().cast(pl.Int64).fill_null(-1).to_numpy()
    codes = np.where(physical >= 0, table[np.maximum(physical, 0)], -1)
    return codes, present.cast(pl.String).to_list()


def _numpy_column(data: Any, kind: str, name: str) -> np.ndarray:
    if kind == "pandas":
        series = data[name]
        if str(series.dtype) == "category":
            return series.to_numpy(dtype=object)
        if getattr(series.dtype, "tz", None) is not None:  # wall-clock time of its zone
            series = series.dt.tz_localize(None)
        if str(series.dtype).startswith("datetime64"):
            return series.to_numpy()
        if str(series.dtype) in ("string", "str") or series.dtype == object:
            return series.to_numpy(dtype=object)
        return series.to_numpy()
    column = data.get_column(name)
    if column.dtype.is_temporal():
        return column.to_numpy()
    return column.to_numpy()


def _long_frame(
    data: Any, kind: str, id_column: str | None, time_column: str | None, wanted: list[str]
) -> LongColumns:
    names = column_names(data)
    missing = [c for c in [id_column, time_column, *wanted] if c is not None and c not in names]
    if missing:
        raise ValueError(
            f"column {missing[0]!r} is not in the data: its columns are {names}; name an "
            "existing column (id_column, time_column, target, known, observed, "
            "static_categorical, static_real)."
        )
    if kind == "pandas":  # the columns by name, looked up once (pandas' get_loc is not free)
        data = {str(name): column for name, column in data.items()}
    values = None
    if id_column is None:
        rows = len(next(iter(data.values()))) if kind == "pandas" else len(data)
        codes, ids = np.zeros(rows, dtype=np.int64), [0]
    else:
        codes, ids, values = None, None, _numpy_column(data, kind, id_column)
    time = None if time_column is None else _numpy_column(data, kind, time_column)
    columns, categories = {}, {}
    for name in dict.fromkeys(wanted):
        found = _categorical(data, kind, name)
        if found is None:
            columns[name] = _numpy_column(data, kind, name)
        else:
            columns[name], categories[name] = found
    out = LongColumns(codes, ids, time, columns, id_column or SERIES, time_column)
    out.categories, out.id_values = categories, values
    return out


def _wide_frame(data: Any, kind: str, time_column: str | None, target: str) -> LongColumns:
    """A column per series (all but ``time_column``); time from that column or the index."""
    names = column_names(data)
    if time_column is not None and time_column not in names:
        raise ValueError(
            f"time_column={time_column!r} is not a column of the wide frame: its columns are "
            f"{names}."
        )
    series = [n for n in names if n != time_column]
    if not series:
        raise ValueError("the wide frame has no series columns (a column per series).")
    steps = len(data)
    if time_column is not None:
        time = _numpy_column(data, kind, time_column)
    elif kind == "pandas" and str(data.index.dtype).startswith("datetime64"):
        time = data.index.to_numpy().astype("datetime64[ns]")
    else:
        time = None
    values = [_numpy_column(data, kind, name) for name in series]
    flat = np.concatenate(values) if values else np.zeros(0)
    codes = np.repeat(np.arange(len(series), dtype=np.int64), steps)
    # Columns keep the frame's order; ids sort as the long codes do (by name).
    order = sorted(range(len(series)), key=lambda i: series[i])
    rank = np.empty(len(series), dtype=np.int64)
    rank[order] = np.arange(len(series))
    codes = rank[codes]
    tiled = None if time is None else np.tile(time, len(series))
    return LongColumns(
        codes, [series[i] for i in order], tiled, {target: flat}, SERIES, time_column
    )


def _arrays(data: Any, target: str | list[str]) -> LongColumns:
    """A 2-D array (series x time), a 1-D array (one series) or a list of arrays."""
    channels = len(target) if isinstance(target, list) else None
    if isinstance(data, np.ndarray):
        if data.ndim == 1 or (channels is not None and data.ndim == 2):
            data = [data]
        elif data.ndim in (2, 3):
            data = list(data)
        else:
            raise ValueError(
                f"data: a NumPy array of {data.ndim} dimensions is not accepted: use series x "
                "time (2-D), one series (1-D), or series x time x channels for a list target."
            )
    arrays = [np.asarray(a) for a in data]
    for i, array in enumerate(arrays):
        want = 1 if channels is None else 2
        if array.ndim != want or (channels is not None and array.shape[1] != channels):
            shape = "(time,)" if channels is None else f"(time, {channels})"
            raise ValueError(
                f"data: series {i} has shape {array.shape}; each array must be {shape} "
                f"for target={target!r}."
            )
    lengths = np.array([len(a) for a in arrays], dtype=np.int64)
    codes = np.repeat(np.arange(len(arrays), dtype=np.int64), lengths)
    flat = np.concatenate(arrays) if arrays else np.zeros(0)
    if channels is None:
        columns = {target: flat}
    else:
        columns = {name: flat[:, c] for c, name in enumerate(target)}
    return LongColumns(codes, list(range(len(arrays))), None, columns)


def _file_signature(paths: list[str], options: Any) -> list[Any]:
    from datamodules.remote.listing import file_version

    return [[p, file_version(p, options)] for p in paths]


def _files(
    files: Any, id_column: str | None, time_column: str | None, wanted: list[str], options: Any
) -> LongColumns:
    import pyarrow as pa

    from datamodules.shards.formats import expand_files
    from datamodules.shards.tables import read_table

    paths = expand_files(files if not isinstance(files, os.PathLike) else os.fspath(files), options)
    if not paths:
        raise ValueError(f"files={files!r} matches no file.")
    names = [c for c in dict.fromkeys([id_column, time_column, *wanted]) if c is not None]
    tables = [read_table(p, names, options) for p in paths]
    table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    del tables
    frame = table.to_pandas(split_blocks=True, self_destruct=True)
    del table
    out = _long_frame(frame, "pandas", id_column, time_column, wanted)
    out.signature = _file_signature(paths, options)
    return out


def read_columns(
    data: Any,
    files: Any,
    *,
    id_column: str | None,
    time_column: str | None,
    target: str | list[str],
    wanted: list[str],
    options: Any = None,
) -> LongColumns:
    """The rows of any accepted input as :class:`LongColumns`.

    Args:
        data: A frame (long, or wide when it has no ``target`` column and no ``id_column``),
            a NumPy array, a list of arrays, or None when ``files`` are given.
        files: Long-format Parquet / CSV / Arrow files (paths, globs, URLs), or None.
        id_column: The series column of long inputs (None: one series).
        time_column: The time column (None: rows are consecutive steps).
        target: The target column, or a list of them.
        wanted: Every value column to read (targets, covariates, static columns).
        options: Remote options for files.

    Raises:
        ValueError: A named column is missing, or an array has the wrong shape.
        TypeError: ``data`` is of a type that is not accepted.
    """
    targets = target if isinstance(target, list) else [target]
    if files is not None:
        return _files(files, id_column, time_column, wanted, options)
    kind = is_frame(data)
    if kind is not None:
        names = column_names(data)
        wide = id_column is None and not any(t in names for t in targets)
        if wide and not isinstance(target, list) and len(wanted) == 1:
            return _wide_frame(data, kind, time_column, target)
        return _long_frame(data, kind, id_column, time_column, wanted)
    if isinstance(data, np.ndarray) or (
        isinstance(data, (list, tuple)) and data and all(hasattr(a, "__len__") for a in data)
    ):
        if len(wanted) > len(targets):
            raise ValueError(
                "known, observed and static columns need a frame or files: arrays hold target "
                "values only."
            )
        return _arrays(data, target)
    raise TypeError(
        f"data={type(data).__name__} is not accepted: use a pandas or Polars DataFrame (long: "
        "a row per series and step; or wide: a column per series), a NumPy array (series x "
        "time), a list of 1-D arrays, or files= (Parquet / CSV / Arrow)."
    )
