"""TimeSeriesDataModule: forecasting windows over many series, never materialised.

The parts: the inputs (:mod:`~datamodules.time_series.inputs`) become long columns; the
store (:mod:`~datamodules.time_series.store`) is written once from them and mapped by every
later setup, rank and worker; a window plan per split
(:mod:`~datamodules.time_series.windows`) says which windows the split holds; the batch view
(:mod:`~datamodules.time_series.views`) gathers a batch of windows in one call; the samplers,
DDP shares, resume and loaders are core's.

Splits are in time: the last fraction (or count) of every series' steps validates (then
tests); ``split_by="series"`` holds out whole series instead (core's seeded split over the
series). ``dm.split_indices[split]`` holds the store indices of the series in each split.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from datamodules.core.base import BaseDataModule
from datamodules.core.build_once import build_once
from datamodules.core.checks import check_bool, check_choice, check_int, check_on_error, rejected
from datamodules.core.hardware import AUTO, GATHERED
from datamodules.core.keywords import shared_arguments
from datamodules.core.samplers import IndexBatchSampler
from datamodules.core.skipped import Skipped
from datamodules.core.splits import split_fingerprint
from datamodules.core.summary import counted
from datamodules.core.views import SplitView
from datamodules.remote.credentials import restored_storage_options, save_without_credentials
from datamodules.remote.retrying import check_remote_options
from datamodules.time_series.calendar import check_freq, grid_positions
from datamodules.time_series.digest import data_digest
from datamodules.time_series.inputs import LongColumns, read_columns
from datamodules.time_series.store import SeriesStore, StoreSpec, build_store, store_key
from datamodules.time_series.views import WindowBatchView
from datamodules.time_series.windows import WindowDrawSampler, WindowPlan, plan_windows

__all__ = ["TimeSeriesDataModule"]

SCALERS = ("standard", "mean", None)


def _names(value: Any, name: str, *, one: bool = False) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        if one and not value:
            raise rejected(name, value, "a column name or a non-empty list of them")
        return list(value)
    raise rejected(name, value, "a column name or a list of column names", TypeError)


def _plain_split(value: Any) -> int | float:
    """A split size as a Python int (a count) or float (a fraction): NumPy's keyed alike."""
    return int(value) if isinstance(value, (int, np.integer)) else float(value)


class TimeSeriesDataModule(BaseDataModule):
    """Forecasting windows over many series: ``TimeSeriesDataModule(frame, id_column=...,
    time_column=..., freq="h", context_length=168, prediction_length=24)``.

    Subclass for a dataset of your own by overriding :meth:`load_frame` (return the frame;
    no ``data`` argument is needed then).

    Args:
        data: A long pandas or Polars DataFrame (a row per series and step), a wide one (a
            column per series; time from ``time_column`` or a DatetimeIndex), a NumPy array
            (series x time, NaN where missing), or a list of 1-D arrays of any lengths. Not
            saved in checkpoints: give it again to ``load_from_checkpoint``.
        files: Long-format Parquet / CSV / TSV / Arrow files (paths, globs, directories,
            URLs) instead of ``data``, read through the shard layer.
        id_column: The series id column of long data (None: one series).
        time_column: Datetimes (with ``freq``) or integer steps (None: rows are consecutive
            steps in order). Missing steps are gaps (observed mask 0).
        target: The column to forecast (values (B, T)), or a list of columns (multivariate,
            values (B, T, C)).
        known: Covariates known in advance: in the past and future time features.
        observed: Covariates only observed: in the past time features (0 in the future).
        static_categorical: Per-series categories (int64 codes; 0 for one unseen in training).
        static_real: Per-series numbers.
        freq: A pandas offset alias (``"h"``, ``"D"``, ``"W-SAT"``, ``"MS"``, ``"QS"``) for a
            datetime time column; None for integer steps.
        context_length: Steps of context (``past_values``).
        prediction_length: Steps of horizon (``future_values``).
        stride: Steps between consecutive windows of a series.
        windows_per_series: None: every train window once per epoch; k: epochs of k x (number
            of series) windows drawn from (seed, epoch), each series in proportion to its
            windows.
        scaler: ``"standard"`` (mean, standard deviation), ``"mean"`` (mean absolute value) or
            None; fitted on each series' train part.
        time_features: Add calendar features from ``freq`` to the time features.
        min_length: Series shorter are left out (counted in :attr:`skipped`); default context
            + horizon; smaller values left-pad contexts with observed-mask 0.
        store: Where stores are kept (a directory; default ``$DATAMODULES_CACHE/time_series``),
            or False for a temporary store every setup.
        on_error: ``"raise"`` or ``"skip"`` (counted) for a series without an observed target
            value in its train part.
        split_by: ``"time"`` (the last steps of every series) or ``"series"`` (whole series).
        eval_windows: ``"last"`` (each series' last window in the split) or ``"all"``.
        storage_options: fsspec options for remote files (not saved when they hold keys).
    """

    fetch = GATHERED
    hparams_ignore = (*BaseDataModule.hparams_ignore, "data")

    def __init__(
        self,
        data: Any = None,
        *,
        files: str | os.PathLike | Sequence[Any] | None = None,
        id_column: str | None = None,
        time_column: str | None = None,
        target: str | Sequence[str] = "target",
        known: Sequence[str] = (),
        observed: Sequence[str] = (),
        static_categorical: Sequence[str] = (),
        static_real: Sequence[str] = (),
        freq: str | None = None,
        context_length: int,
        prediction_length: int,
        stride: int = 1,
        windows_per_series: int | None = None,
        scaler: str | None = "standard",
        time_features: bool = True,
        min_length: int | None = None,
        store: str | os.PathLike | bool | None = None,
        on_error: str = "raise",
        split_by: str = "time",
        eval_windows: str = "last",
        storage_options: dict[str, Any] | None = None,
        batch_size: int = 32,
        val_split: int | float = 0.1,
        test_split: int | float = 0.0,
        split_seed: int = 42,
        splits: Mapping[str, Any] | None = None,
        stratify: bool = False,
        num_workers: int | str = AUTO,
        pin_memory: bool | str = AUTO,
        persistent_workers: bool | str = AUTO,
        prefetch_factor: int | str | None = AUTO,
        shuffle: bool = True,
        drop_last: bool = False,
        shuffle_seed: int | None = None,
        train_transforms: Callable[[Any], Any] | None = None,
        eval_transforms: Callable[[Any], Any] | None = None,
        reuse_batch_memory: bool = True,
    ) -> None:
        super().__init__(**shared_arguments(locals()))
        check_int(context_length, "context_length", 1)
        check_int(prediction_length, "prediction_length", 1)
        check_int(stride, "stride", 1)
        check_int(windows_per_series, "windows_per_series", 1, allow_none=True)
        check_int(min_length, "min_length", prediction_length + 1, allow_none=True)
        check_choice(scaler, "scaler", SCALERS)
        check_bool(time_features, "time_features")
        check_on_error(on_error)
        check_choice(split_by, "split_by", ("time", "series"))
        check_choice(eval_windows, "eval_windows", ("last", "all"))
        for name, value in (("id_column", id_column), ("time_column", time_column)):
            if value is not None and not isinstance(value, str):
                raise rejected(name, value, "a column name or None", TypeError)
        self.targets = _names(target, "target", one=True)
        self.multivariate = not isinstance(target, str)
        self.known = _names(known, "known")
        self.observed = _names(observed, "observed")
        self.static_categorical = _names(static_categorical, "static_categorical")
        self.static_real = _names(static_real, "static_real")
        self.offset = check_freq(freq)
        if split_by == "time" and splits is not None:
            raise rejected(
                "splits", "<given>", "None when splitting in time (split_by='series' takes "
                "explicit series indices)",
            )  # fmt: skip
        if stratify:
            raise rejected("stratify", stratify, "False: series have no class labels")
        if store is not None and store is not False and not isinstance(store, (str, os.PathLike)):
            raise rejected(
                "store", store, "a directory, None (the default cache) or False", TypeError
            )
        overridden = type(self).load_frame is not TimeSeriesDataModule.load_frame
        if data is None and files is None and not overridden:
            raise ValueError(
                "TimeSeriesDataModule needs data: pass data= (a DataFrame, an array, a list of "
                "arrays) or files= (Parquet / CSV / Arrow), or override load_frame()."
            )
        if data is not None and files is not None:
            raise ValueError("give data or files, not both.")
        self.data, self.files = data, files
        self.id_column, self.time_column, self.freq = id_column, time_column, freq
        self.context_length, self.prediction_length = context_length, prediction_length
        self.stride, self.windows_per_series = stride, windows_per_series
        self.scaler, self.time_features, self.on_error = scaler, time_features, on_error
        self.min_length = context_length + prediction_length if min_length is None else min_length
        self.store_root = store
        self.split_by, self.eval_windows = split_by, eval_windows
        storage_options = restored_storage_options(storage_options)
        check_remote_options(storage_options, 5, 60.0)
        save_without_credentials(self, storage_options)
        self.storage_options = storage_options
        self.store: SeriesStore | None = None
        self._skipped = Skipped()
        self._plans: dict[str, WindowPlan] = {}
        self._temporary: tempfile.TemporaryDirectory | None = None

    # ------------------------------------------------------------------ extension point
    def load_frame(self) -> Any:
        """Returns the data: what ``data=`` accepts (a long or wide frame, an array, a list of
        arrays). Override it in a subclass for a dataset of your own; the default returns
        ``data``."""
        return self.data

    # ------------------------------------------------------------------ the store
    def _spec(self) -> StoreSpec:
        splits = None
        if self.explicit_splits is not None:
            splits = {k: [int(i) for i in v] for k, v in self.explicit_splits.items()}
        return StoreSpec(
            targets=self.targets, known=self.known, observed=self.observed,
            static_categorical=self.static_categorical, static_real=self.static_real,
            freq=self.freq, context_length=self.context_length,
            prediction_length=self.prediction_length, min_length=self.min_length,
            scaler=self.scaler, split_by=self.split_by, val_split=_plain_split(self.val_split),
            test_split=_plain_split(self.test_split), split_seed=self.split_seed, splits=splits,
            on_error=self.on_error, time_column=self.time_column, id_column=self.id_column,
        )  # fmt: skip

    def _columns(self) -> LongColumns:
        options = None
        if self.files is not None:
            options = check_remote_options(self.storage_options, 5, 60.0)
        data = None if self.files is not None else self.load_frame()
        wanted = [*self.targets, *self.known, *self.observed]
        wanted += [*self.static_categorical, *self.static_real]
        return read_columns(
            data, self.files, id_column=self.id_column, time_column=self.time_column,
            target=self.targets if self.multivariate else self.targets[0], wanted=wanted,
            options=options,
        )  # fmt: skip

    def _file_digest(self) -> str | None:
        """The files' versions, read before any file is: a mapped store reads nothing else."""
        if self.files is None:
            return None
        import json

        from datamodules.remote.listing import file_version
        from datamodules.shards.formats import expand_files

        options = check_remote_options(self.storage_options, 5, 60.0)
        spec = self.files if not isinstance(self.files, os.PathLike) else os.fspath(self.files)
        paths = expand_files(spec, options)
        signature = [[p, file_version(p, options)] for p in paths]
        text = json.dumps(signature, sort_keys=True, default=str).encode()
        return hashlib.sha1(text, usedforsecurity=False).hexdigest()

    def _root(self) -> str:
        if self.store_root is False:
            if self._temporary is None:
                self._temporary = tempfile.TemporaryDirectory(prefix="time-series-")
            return self._temporary.name
        if self.store_root is None:
            from datamodules.remote.listing import cache_root

            return cache_root("time_series")
        return os.fspath(self.store_root)

    def build_dataset(self) -> SeriesStore:
        """Maps the store of this data and these arguments, writing it first when missing."""
        spec = self._spec()
        digest = self._file_digest()
        columns = None
        if digest is None:
            columns = self._columns()
            digest = data_digest(columns)
        key = store_key(digest, spec)
        path = os.path.join(self._root(), key)
        offset, name = self.offset, self.time_column or "time"

        def grid_of(time: np.ndarray, codes: np.ndarray, ids: list[Any]) -> Any:
            return grid_positions(time, codes, ids, offset, name, self.freq)

        def build() -> None:
            build_store(columns if columns is not None else self._columns(), spec, path, grid_of)

        build_once(path, build)
        columns = None  # the frame's columns are not kept
        store = SeriesStore(path)
        self.store = store
        self._skipped = Skipped()
        pairs = [tuple(p) for p in store.meta["skipped"]]
        if pairs:
            self._skipped.add("series", len(pairs), pairs)
        return store

    # ------------------------------------------------------------------ setup and splits
    def setup(self, stage: str | None = None) -> None:
        """Maps (or writes) the store and makes the splits, once."""
        if self.split_indices is not None:
            return
        pending, self._pending_fingerprint = self._pending_fingerprint, None
        if self.split_by == "series":
            super().setup(stage)
        else:
            store = self.build_dataset()
            everything = np.arange(len(store))
            lengths = store.lengths
            indices = {
                "train": everything,
                "val": everything[np.asarray(store.val_end) > np.asarray(store.train_end)],
                "test": everything[lengths > np.asarray(store.val_end)],
            }
            self.dataset = store
            self.split_datasets = {name: store for name in indices}
            self.split_indices = {
                k: torch.from_numpy(v.astype(np.int64)) for k, v in indices.items()
            }
            self.fingerprint = split_fingerprint(len(store), self.split_indices)
        assert self.store is not None and self.fingerprint is not None
        text = f"{self.fingerprint}:{os.path.basename(self.store.path)}"
        self.fingerprint = hashlib.sha256(text.encode()).hexdigest()[:16]
        if not len(self.plan("train")):
            raise ValueError(
                f"no training window: no series has context_length={self.context_length} + "
                f"prediction_length={self.prediction_length} steps in its train part with "
                f"val_split={self.val_split!r} and test_split={self.test_split!r}; use smaller "
                "splits, a shorter context, or min_length= to left-pad."
            )
        if pending is not None:
            self._check_fingerprint(pending)

    def plan(self, split: str) -> WindowPlan:
        """The windows of ``split`` (``"train"``, ``"val"``, ``"test"``)."""
        indices = self._require_setup()
        if split not in self._plans:
            store = self.store
            assert store is not None
            self._plans[split] = plan_windows(
                split, indices[split].numpy(), store.lengths, np.asarray(store.train_end),
                np.asarray(store.val_end), split_by=self.split_by,
                prediction_length=self.prediction_length, min_length=self.min_length,
                stride=self.stride, eval_windows=self.eval_windows,
            )  # fmt: skip
        return self._plans[split]

    def windows(self, split: str) -> int:
        """The number of windows of ``split`` (per epoch with ``windows_per_series``: train's
        draws)."""
        return len(self.view(split))

    def make_view(self, split: str, dataset: Any, indices: torch.Tensor) -> SplitView:
        plan = self.plan(split)
        drawn = None
        if split == "train" and self.windows_per_series is not None:
            drawn = self.windows_per_series * len(plan.series)
        return WindowBatchView(
            dataset, plan, context_length=self.context_length,
            prediction_length=self.prediction_length, known=len(self.known),
            calendar=self.time_features, multivariate=self.multivariate,
            transform=self.transform_for(split), drawn=drawn,
        )  # fmt: skip

    def make_sampler(self, split: str, view: SplitView, rank: int, world: int) -> IndexBatchSampler:
        if split == "train" and self.windows_per_series is not None:
            assert isinstance(view, WindowBatchView)
            return WindowDrawSampler(
                len(view.plan), len(view), self.batch_size, shuffle=self.shuffle,
                drop_last=self.drop_last, seed=self.shuffle_seed, num_replicas=world, rank=rank,
            )  # fmt: skip
        return super().make_sampler(split, view, rank, world)

    # ------------------------------------------------------------------ results
    def inverse_transform(self, values: torch.Tensor, batch: Mapping[str, Any]) -> torch.Tensor:
        """Undoes the scaler: ``values * scale + loc`` of the batch's series.

        Args:
            values: Scaled values of the batch's windows: (B, T) or (B, ..., T) for one target
                column, (B, T, C) or (B, ..., T, C) for a list of columns (e.g. samples of a
                probabilistic forecast between B and T).
            batch: The batch the values belong to (its ``loc`` and ``scale``).
        """
        loc = batch["loc"].to(values.device, values.dtype)
        scale = batch["scale"].to(values.device, values.dtype)
        keep = 1 if not self.multivariate else 2
        shape = (loc.shape[0],) + (1,) * (values.dim() - keep) + tuple(loc.shape[1:])
        return values * scale.reshape(shape) + loc.reshape(shape)

    @property
    def series_ids(self) -> list[Any]:
        """The id of each series, by ``series_index``."""
        self._require_setup()
        assert self.store is not None
        return list(self.store.ids)

    @property
    def cardinalities(self) -> list[int]:
        """Embedding sizes of the static categorical columns (categories + 1 for unseen)."""
        self._require_setup()
        assert self.store is not None
        vocab = self.store.meta["vocabularies"]
        return [len(vocab[name]) + 1 for name in self.static_categorical]

    @property
    def time_feature_names(self) -> list[str]:
        """The columns of ``past_time_features`` / ``future_time_features``, in order."""
        self._require_setup()
        assert self.store is not None
        calendar = list(self.store.meta["calendar"]) if self.time_features else []
        return [*self.known, *self.observed, *calendar]

    @property
    def skipped(self) -> Skipped:
        """Series left out (too short, or nothing observed under ``on_error="skip"``)."""
        return self._skipped

    def describe_data(self) -> list[str]:
        """Per split, its series and windows (for ``python -m datamodules inspect``)."""
        indices = self._require_setup()
        return [
            f"  {split}: {counted(len(indices[split]), 'series', 'series')}, "
            f"{counted(len(self.plan(split)), 'window')}"
            for split in ("train", "val", "test")
        ]

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_temporary"] = None
        return state

    def extra_summary(self) -> list[str]:
        """The store, the series and the windows of each split."""
        lines = [
            f"  windows: context {self.context_length} + horizon {self.prediction_length}, "
            f"stride {self.stride}, split by {self.split_by}, eval windows {self.eval_windows!r}"
        ]
        if self.split_indices is None or self.store is None:
            return lines
        lines.append(f"  store: {counted(len(self.store), 'series', 'series')} ({self.store.path})")
        for split in ("train", "val", "test"):
            if len(self.split_indices[split]):
                lines.append(f"  {split}: {counted(len(self.plan(split)), 'window')}")
        if self.windows_per_series is not None:
            lines.append(f"  train epoch: {len(self.view('train'))} windows drawn")
        if len(self._skipped):
            lines.append(f"  left out: {self._skipped.summary().splitlines()[0]}")
        return lines
