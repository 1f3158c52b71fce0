"""The series store: written once, memory-mapped by every later setup, rank and worker.

A store is a directory of ``.npy`` files plus ``meta.json``:

* ``targets.npy`` (N, C) and ``covariates.npy`` (N, K + O) float32: every series' steps laid
  end to end on its grid (NaN where a step is missing or a value is NaN);
* ``offsets.npy`` (S + 1): where each series starts; ``grid_start.npy`` (S): its first step's
  row in ``calendar.npy`` (G, F), the calendar features of the grid;
* ``static_categorical.npy`` (S, n) int64 codes (0: a category never seen in training),
  ``static_real.npy`` (S, m) float32;
* ``train_end.npy`` / ``val_end.npy`` (S): where each series' train and validation parts end
  (splits in time), ``fit_end.npy`` (S): the steps its scaler was fitted on;
* ``loc.npy`` / ``scale.npy`` (S, C): the fitted scalers;
* ``meta.json``: the series ids, the categorical vocabularies, the series left out and why.

:func:`build_store` writes one from :class:`~datamodules.time_series.inputs.LongColumns`
(sorted by an index, never a copy of the frame), into a temporary directory renamed into place;
:class:`SeriesStore` maps one. Stores are keyed by the data and the arguments that change
them (:func:`store_key`), so a later setup with the same inputs maps and reads nothing else.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from datamodules.time_series.calendar import calendar_names, calendar_table
from datamodules.time_series.inputs import LongColumns
from datamodules.time_series.layout import Layout, lay_out, take
from datamodules.time_series.series import check_numeric, fit_ranges, split_parts

__all__ = ["SeriesStore", "StoreSpec", "build_store", "store_key"]

#: Bumped when the layout of a store changes.
VERSION = 1


@dataclass
class StoreSpec:
    """The arguments that change what a store holds."""

    targets: list[str]
    known: list[str]
    observed: list[str]
    static_categorical: list[str]
    static_real: list[str]
    freq: str | None
    context_length: int
    prediction_length: int
    min_length: int
    scaler: str | None
    split_by: str
    val_split: float | int
    test_split: float | int
    split_seed: int
    splits: dict[str, list[int]] | None = None
    on_error: str = "raise"
    time_column: str | None = None
    id_column: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def store_key(data: str, spec: StoreSpec) -> str:
    """The store's name: the data's digest and the arguments that change the store."""
    text = json.dumps([VERSION, data, vars(spec)], sort_keys=True, default=str)
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:24]


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


class SeriesStore:
    """A mapped store (see the module docstring). Pickles as its path: workers remap it.

    Args:
        path: The store's directory.
    """

    ARRAYS = (
        "targets", "covariates", "offsets", "grid_start", "calendar", "static_categorical",
        "static_real", "train_end", "val_end", "fit_end", "loc", "scale",
    )  # fmt: skip

    def __init__(self, path: str) -> None:
        self.path = path
        with open(os.path.join(path, "meta.json")) as f:
            self.meta: dict[str, Any] = json.load(f)

    def __getattr__(self, name: str) -> Any:
        """Maps an array on first use (``targets``, ``offsets``, ...; ``lengths``)."""
        if name == "lengths":
            value = np.diff(self.offsets)
        elif name in SeriesStore.ARRAYS:
            mapped = np.load(os.path.join(self.path, f"{name}.npy"), mmap_mode="r")
            value = np.asarray(mapped)  # a plain ndarray: indexing skips np.memmap's layer
        else:
            raise AttributeError(name)
        setattr(self, name, value)
        return value

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "meta": self.meta}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path, self.meta = state["path"], state["meta"]

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def ids(self) -> list[Any]:
        """The series ids, in store order (read on first use)."""
        if "ids" not in self.meta:
            found = np.load(os.path.join(self.path, "ids.npy"), allow_pickle=False)
            self.meta["ids"] = found.tolist()
        return self.meta["ids"]

    @property
    def margin(self) -> int:
        """Calendar rows kept before each series' first step (for left-padded context)."""
        return int(self.meta["margin"])


def _ids_entry(directory: str, ids: list[Any]) -> dict[str, Any]:
    """Ids all ints or all strings go to ``ids.npy`` (no JSON to parse at every setup);
    others stay in ``meta.json``."""
    for kind in (int, str):
        if ids and all(type(i) is kind for i in ids):
            _write(directory, "ids", np.array(ids))
            return {}
    return {"ids": ids}


def _write(directory: str, name: str, array: np.ndarray) -> None:
    np.save(os.path.join(directory, f"{name}.npy"), np.ascontiguousarray(array))


def _open(directory: str, name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    return np.lib.format.open_memmap(
        os.path.join(directory, f"{name}.npy"), mode="w+", dtype=dtype, shape=shape
    )


def _static_values(
    values: np.ndarray, layout: Layout, name: str, ids: list[Any], kind: str
) -> np.ndarray:
    """One value per series of a static column, refusing one that varies within a series."""
    ordered = take(values, layout.order)
    first = ordered[layout.starts]
    same = ordered == np.repeat(first, layout.counts)
    if ordered.dtype.kind == "f":
        same |= np.isnan(ordered) & np.repeat(np.isnan(first), layout.counts)
    if not same.all():
        row = int(np.flatnonzero(~same)[0])
        series = int(np.searchsorted(layout.starts, row, side="right") - 1)
        raise ValueError(
            f"{kind} column {name!r} varies within series {ids[layout.present[series]]!r} "
            f"({first[series]!r} and {ordered[row]!r}): a static column holds one value per "
            "series."
        )
    return first


def build_store(
    columns: LongColumns, spec: StoreSpec, directory: str, grid_of: Any
) -> tuple[SeriesStore, list[tuple[str, str]]]:
    """Writes the store of ``columns`` under ``directory`` (renamed into place) and maps it.

    Args:
        columns: The rows.
        spec: The arguments that shape the store.
        directory: The store's final directory.
        grid_of: ``grid_of(time, codes, ids) -> (positions, Grid)`` (see
            :func:`~datamodules.time_series.calendar.grid_positions`).

    Returns:
        The mapped store and the series left out, as ``(where, why)`` pairs.

    Raises:
        ValueError: A duplicated (series, time) pair, a time off ``freq``, a static column
            that varies within a series, no series long enough, or (``on_error="raise"``) a
            series without an observed target value in its train part.
        TypeError: A non-numeric target, covariate or static real column.
    """
    columns.factorize()
    ids, codes = columns.ids, columns.codes
    numeric = {"target": spec.targets, "known": spec.known, "observed": spec.observed}
    for kind, names in {**numeric, "static_real": spec.static_real}.items():
        for name in names:
            if name in columns.categories:
                raise TypeError(
                    f"{kind} column {name!r} is categorical: {kind} values must be numbers."
                )
            columns.columns[name] = check_numeric(columns.columns[name], name, kind, codes, ids)
    layout = lay_out(columns, grid_of)
    lengths, present = layout.lengths, layout.present
    train_end, val_end = split_parts(lengths, spec.val_split, spec.test_split, spec.split_by)
    skipped: list[tuple[str, str]] = []
    keep = lengths >= spec.min_length
    if not keep.any():
        longest = int(np.argmax(lengths))
        raise ValueError(
            f"context_length={spec.context_length} + prediction_length="
            f"{spec.prediction_length} (min_length={spec.min_length}) is longer than every "
            f"series: the longest, {ids[present[longest]]!r}, has {int(lengths[longest])} "
            "steps. Use a shorter context_length or prediction_length, or min_length= down to "
            "prediction_length + 1 (windows then left-pad the context with observed 0)."
        )
    for s in np.flatnonzero(~keep).tolist():
        skipped.append(
            (f"series {ids[present[s]]!r}",
             f"{int(lengths[s])} steps, shorter than min_length={spec.min_length}")
        )  # fmt: skip
    held = fit_ranges(lengths, train_end, spec.split_by, spec.prediction_length)
    while True:  # again without the series that have nothing to fit on, under "skip"
        if not keep.any():
            why = "; ".join(w for _, w in skipped[:3])
            raise ValueError(f"every series was left out: {why}")
        fit_end = held.copy()
        train_series = np.ones(int(keep.sum()), dtype=bool)
        if spec.split_by == "series":  # the split the DataModule makes, over the kept series
            from datamodules.core.splits import compute_split_indices

            parts = compute_split_indices(
                int(keep.sum()), explicit=spec.splits, val_split=spec.val_split,
                test_split=spec.test_split, seed=spec.split_seed,
            )  # fmt: skip
            train_series[:] = False
            train_series[parts["train"].numpy()] = True
            fit_end[np.flatnonzero(keep)[train_series]] = lengths[keep][train_series]
        ends = {"train_end": train_end, "val_end": val_end, "fit_end": fit_end}
        try:
            return _write_store(columns, spec, directory, layout, keep, ends, skipped, train_series)
        except _Unobserved as unobserved:
            for s in unobserved.series.tolist():
                why = (
                    f"no observed {spec.targets[0] if len(spec.targets) == 1 else spec.targets} "
                    f"value in its train part (steps 0..{int(fit_end[s])} of "
                    f"{int(lengths[s])}; val_split={spec.val_split!r}, "
                    f"test_split={spec.test_split!r})"
                )
                if spec.on_error == "raise":
                    raise ValueError(
                        f"series {ids[present[s]]!r} has {why}: its scaler has nothing to fit "
                        "on. Give on_error='skip' to leave such series out (counted), or "
                        "smaller splits."
                    ) from None
                skipped.append((f"series {ids[present[s]]!r}", why))
            keep[unobserved.series] = False


class _Unobserved(Exception):
    """Series (indices among those present) without an observed target value where their
    scaler is fitted: found while writing, which then stops."""

    def __init__(self, series: np.ndarray) -> None:
        super().__init__(f"{len(series)} series without observed values")
        self.series = series


def _placement(layout: Layout, keep: np.ndarray, offsets: np.ndarray) -> tuple[Any, Any]:
    """``(source rows, store rows)`` of the kept rows; ``(None, None)`` when the input is
    sorted, gap-free and all kept (the columns are then copied as they are)."""
    if layout.order is None and keep.all() and not layout.gaps:
        return None, None
    series = np.repeat(np.arange(len(keep), dtype=np.int32), layout.counts)
    kept_rows = keep[series]
    new_code = (np.cumsum(keep) - 1).astype(np.int64)
    dense = offsets[new_code[series[kept_rows]]] + layout.local[kept_rows]
    del series
    if layout.order is None:
        source = None if kept_rows.all() else np.flatnonzero(kept_rows)
    else:
        source = layout.order[kept_rows]
    return source, dense


def _fill(target: np.ndarray, column: int, values: np.ndarray, source: Any, dense: Any) -> None:
    if dense is None:
        target[:, column] = values
    else:
        target[dense, column] = values if source is None else values[source]


def _write_store(
    columns: LongColumns, spec: StoreSpec, directory: str, layout: Layout, keep: np.ndarray,
    ends: dict[str, np.ndarray], skipped: list[tuple[str, str]], train_series: np.ndarray,
) -> tuple[SeriesStore, list[tuple[str, str]]]:  # fmt: skip
    ids = columns.ids
    kept = np.flatnonzero(keep)
    kept_lengths = layout.lengths[kept]
    offsets = np.concatenate([[0], np.cumsum(kept_lengths)]).astype(np.int64)
    source, dense = _placement(layout, keep, offsets)
    total, S = int(offsets[-1]), len(kept)
    fit_end = ends["fit_end"][kept]
    os.makedirs(os.path.dirname(directory) or ".", exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".building-", dir=os.path.dirname(directory) or ".")
    try:
        targets = _open(tmp, "targets", (total, len(spec.targets)), np.float32)
        if dense is not None:
            targets[:] = np.nan
        loc = np.zeros((S, len(spec.targets)), dtype=np.float32)
        scale = np.ones((S, len(spec.targets)), dtype=np.float32)
        seen = np.zeros(S, dtype=np.int64)
        for c, name in enumerate(spec.targets):
            _fill(targets, c, columns.columns[name], source, dense)
            fitted = _fit_scaler(targets[:, c], offsets, fit_end, spec.scaler)
            loc[:, c], scale[:, c], observed = fitted
            seen += observed
        del targets  # unmapped: the pages stay in the page cache, other mappings see them
        if not seen.all():
            raise _Unobserved(kept[seen == 0])
        dynamic = [*spec.known, *spec.observed]
        covariates = _open(tmp, "covariates", (total, len(dynamic)), np.float32)
        if dynamic and dense is not None:
            covariates[:] = np.nan
        for c, name in enumerate(dynamic):
            _fill(covariates, c, columns.columns[name], source, dense)
        del covariates, source, dense
        categorical = np.zeros((S, len(spec.static_categorical)), dtype=np.int64)
        vocabularies: dict[str, list[Any]] = {}
        for c, name in enumerate(spec.static_categorical):
            first = _static_values(columns.columns[name], layout, name, ids, "static_categorical")[
                kept
            ]
            if name in columns.categories:  # codes: their labels (a missing value: "nan")
                labels = np.array([*columns.categories[name], "nan"], dtype=object)
                first = labels[first.astype(np.int64)]
            categorical[:, c], vocabularies[name] = _encode(first, train_series)
        real = np.zeros((S, len(spec.static_real)), dtype=np.float32)
        for c, name in enumerate(spec.static_real):
            real[:, c] = _static_values(columns.columns[name], layout, name, ids, "static_real")[
                kept
            ]
        grid = layout.grid
        margin = spec.context_length + spec.prediction_length
        first_grid = layout.first[kept]
        low = int(first_grid.min()) - margin
        high = int((first_grid + kept_lengths).max()) + spec.prediction_length
        calendar = grid.offset is not None
        table = calendar_table(grid, low, high - low) if calendar else np.zeros((0, 0), np.float32)
        _write(tmp, "calendar", table)
        _write(tmp, "grid_start", (first_grid - low) if calendar else first_grid)
        _write(tmp, "offsets", offsets)
        _write(tmp, "static_categorical", categorical)
        _write(tmp, "static_real", real)
        for name, end in ends.items():
            _write(tmp, name, end[kept])
        _write(tmp, "loc", loc)
        _write(tmp, "scale", scale)
        meta = {
            "version": VERSION,
            **_ids_entry(tmp, [_plain(ids[layout.present[s]]) for s in kept]),
            "vocabularies": vocabularies,
            "skipped": skipped,
            "calendar": calendar_names(grid.offset),
            "origin": grid.origin,
            "calendar_start": low if calendar else 0,
            "margin": margin,
            "rows": columns.rows,
        }
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump(meta, f)
        try:
            os.rename(tmp, directory)
        except OSError:  # another process wrote the same store first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return SeriesStore(directory), skipped


def _encode(values: np.ndarray, fitted: np.ndarray) -> tuple[np.ndarray, list[Any]]:
    """Codes 1.. for the categories of the fitted series (sorted), 0 for any other."""
    import pandas as pd

    text = np.array([str(v) for v in values], dtype=object)
    vocabulary = sorted(set(text[fitted].tolist()))
    lookup = pd.Index(vocabulary)
    codes = lookup.get_indexer(text) + 1 if len(vocabulary) else np.zeros(len(text), np.int64)
    return codes.astype(np.int64), vocabulary


def _fit_scaler(
    values: np.ndarray, offsets: np.ndarray, fit_end: np.ndarray, scaler: str | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-series loc, scale and count of observed values over steps ``[0, fit_end)`` of
    each series (``values``: one store column, NaN where missing), from running sums."""
    count = len(fit_end)
    loc, scale = np.zeros(count), np.ones(count)
    seen = ~np.isnan(values)
    start, stop = offsets[:-1], offsets[:-1] + fit_end

    def sums(x: np.ndarray) -> np.ndarray:
        running = np.concatenate([[0.0], np.cumsum(x, dtype=np.float64)])
        return running[stop] - running[start]

    observed = sums(seen).astype(np.int64)
    if scaler is None:
        return loc, scale, observed
    clean = np.where(seen, values, 0).astype(np.float64)
    n = np.maximum(observed, 1)
    if scaler == "mean":
        scale = sums(np.abs(clean)) / n
    else:
        loc = sums(clean) / n
        scale = np.sqrt(np.maximum(sums(clean * clean) / n - loc * loc, 0))
    scale = np.where(scale > 1e-6 * np.maximum(np.abs(loc), 1), scale, 1.0)
    return loc, scale, observed
