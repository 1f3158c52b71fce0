"""Every input form gives the same windows: pandas and Polars long frames, Parquet / CSV /
Arrow files (globs), wide frames, NumPy arrays, lists of arrays; integer steps; a store
written once and mapped by a later setup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest
import torch

from datamodules import TimeSeriesDataModule
from tests.datamodules.time_series.series_data import frame_datamodule, long_frame

KEYS = ("past_values", "past_observed_mask", "future_values", "future_observed_mask",
        "past_time_features", "future_time_features", "static_categorical_features",
        "static_real_features", "series_index", "loc", "scale", "window_start")  # fmt: skip


def batches(dm: TimeSeriesDataModule, split: str = "train") -> list[dict[str, torch.Tensor]]:
    dm.setup("fit")
    loader = dm.train_dataloader() if split == "train" else dm.val_dataloader()
    return list(loader)


def assert_same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert len(a) == len(b) and a
    for x, y in zip(a, b, strict=True):
        assert sorted(x) == sorted(KEYS)
        for key in KEYS:
            assert torch.equal(x[key], y[key]), key


def test_polars_parquet_csv_and_arrow_files_equal_pandas(tmp_path: Path) -> None:
    frame = long_frame()
    reference = batches(frame_datamodule(frame))
    assert_same(batches(frame_datamodule(pl.from_pandas(frame))), reference)
    halves = frame.iloc[: len(frame) // 2], frame.iloc[len(frame) // 2 :]
    for i, half in enumerate(halves):
        half.to_parquet(tmp_path / f"part-{i}.parquet")
        half.to_csv(tmp_path / f"part-{i}.csv", index=False)
        pl.from_pandas(half).write_ipc(tmp_path / f"part-{i}.arrow")
    for pattern in ("part-*.parquet", "part-*.arrow"):
        dm = frame_datamodule(None, files=str(tmp_path / pattern))
        assert_same(batches(dm), reference)
    csv = frame_datamodule(None, files=[tmp_path / "part-0.csv", tmp_path / "part-1.csv"])
    assert_same(batches(csv), reference)


def test_wide_frame_numpy_and_list_of_arrays() -> None:
    values = np.arange(3 * 20, dtype=float).reshape(3, 20)
    values[1, 4] = np.nan
    index = pd.date_range("2024-01-01", periods=20, freq="D")
    wide = pd.DataFrame(values.T, index=index, columns=["a", "b", "c"])
    kwargs = {"context_length": 5, "prediction_length": 2, "store": False, "num_workers": 0,
              "val_split": 0.1, "shuffle": False}  # fmt: skip
    from_wide = TimeSeriesDataModule(wide, freq="D", **kwargs)
    long = wide.reset_index(names="day").melt(id_vars="day", var_name="id", value_name="target")
    from_long = TimeSeriesDataModule(long, id_column="id", time_column="day", freq="D", **kwargs)
    assert_same(batches(from_wide), batches(from_long))
    assert from_wide.series_ids == ["a", "b", "c"]
    plain = dict(kwargs, time_features=False)
    from_array = batches(TimeSeriesDataModule(values, **plain))
    from_list = batches(TimeSeriesDataModule(list(values), **plain))
    assert_same(from_array, from_list)
    assert from_array[0]["past_time_features"].shape[-1] == 0
    for x, y in zip(from_array, batches(from_wide), strict=True):
        assert torch.equal(x["past_values"], y["past_values"])
    ragged = TimeSeriesDataModule([np.arange(12.0), np.arange(30.0)], **plain)
    ragged.setup("fit")
    assert ragged.store.lengths.tolist() == [12, 30]
    assert len(ragged.plan("train")) == (11 - 7 + 1) + (27 - 7 + 1)


def test_integer_time_steps_with_gaps() -> None:
    frame = pd.DataFrame({"id": [0] * 6 + [1] * 5, "t": [3, 4, 5, 7, 8, 9, 0, 1, 2, 3, 4],
                          "target": np.arange(11.0)})  # fmt: skip
    dm = TimeSeriesDataModule(frame, id_column="id", time_column="t", context_length=3,
                              prediction_length=1, scaler=None, val_split=0, store=False,
                              shuffle=False, num_workers=0)  # fmt: skip
    dm.setup("fit")
    assert dm.store.lengths.tolist() == [7, 5]
    batch = next(iter(dm.train_dataloader()))
    assert batch["past_values"][0].tolist() == [0.0, 1.0, 2.0]
    assert batch["past_observed_mask"][1].tolist() == [True, True, False]  # step 6 missing


def test_a_later_setup_maps_the_store_and_reads_nothing_else(tmp_path: Path) -> None:
    frame = long_frame()
    frame.to_parquet(tmp_path / "data.parquet")
    first = frame_datamodule(None, files=str(tmp_path / "data.parquet"), store=tmp_path / "s")
    reference = batches(first)
    stores = sorted(p.name for p in (tmp_path / "s").iterdir())
    assert len(stores) == 1
    # The files' versions name the store: a later setup maps it without opening the data.
    later = frame_datamodule(None, files=str(tmp_path / "data.parquet"), store=tmp_path / "s")
    later._columns = None  # reading the data would fail
    assert_same(batches(later), reference)
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == stores
    # Another argument that changes the store: another store.
    other = frame_datamodule(None, files=str(tmp_path / "data.parquet"), store=tmp_path / "s",
                             scaler="mean")  # fmt: skip
    other.setup("fit")
    assert len(list((tmp_path / "s").iterdir())) == 2


@pytest.mark.parametrize("kind", ["pandas", "polars"])
def test_in_memory_frames_key_the_store_by_their_values(kind: str, tmp_path: Path) -> None:
    frame = long_frame()
    convert = pl.from_pandas if kind == "polars" else (lambda f: f)
    frame_datamodule(convert(frame), store=tmp_path).setup("fit")
    frame_datamodule(convert(frame.copy()), store=tmp_path).setup("fit")
    assert len(list(tmp_path.iterdir())) == 1
    frame.loc[frame["value"].first_valid_index(), "value"] += 1
    frame_datamodule(convert(frame), store=tmp_path).setup("fit")
    assert len(list(tmp_path.iterdir())) == 2


def test_remote_files_over_http_and_a_warm_setup_reads_no_data(tmp_path: Path) -> None:
    from tests.counting_http import counting_server

    frame = long_frame()
    reference = batches(frame_datamodule(frame))
    halves = frame.iloc[: len(frame) // 2], frame.iloc[len(frame) // 2 :]
    halves[0].to_parquet(tmp_path / "a.parquet")
    halves[1].to_csv(tmp_path / "b.csv.gz", index=False)
    with counting_server(tmp_path) as server:
        urls = [f"{server.url}/a.parquet", f"{server.url}/b.csv.gz"]
        assert_same(batches(frame_datamodule(None, files=urls, store=tmp_path / "s")), reference)
        server.reset()
        assert_same(batches(frame_datamodule(None, files=urls, store=tmp_path / "s")), reference)
        gets = [r for r in server.log if r.path.endswith((".parquet", ".gz"))]
        assert server.total_bytes < 1000 and not gets  # versions only (HEAD), no data read


def test_categorical_columns_equal_their_strings() -> None:
    frame = long_frame()
    reference = batches(frame_datamodule(frame))
    as_category = frame.assign(kind=frame["kind"].astype("category"))
    assert_same(batches(frame_datamodule(as_category)), reference)
    polars_category = pl.from_pandas(frame).with_columns(pl.col("kind").cast(pl.Categorical))
    assert_same(batches(frame_datamodule(polars_category)), reference)
