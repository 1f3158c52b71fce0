"""Bad input, named early: the column, the series and what is accepted."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from datamodules import TimeSeriesDataModule
from tests.datamodules.time_series.series_data import frame_datamodule, long_frame


def setup_error(frame: pd.DataFrame, error: type[Exception], match: str, **kwargs: Any) -> None:
    dm = frame_datamodule(frame, **kwargs)
    with pytest.raises(error, match=match):
        dm.setup("fit")


def test_a_missing_column_is_named_with_the_columns_there_are() -> None:
    frame = long_frame().drop(columns=["minus"])
    setup_error(frame, ValueError, r"column 'minus' is not in the data: its columns are \['id'")


def test_a_duplicated_series_time_pair_is_named() -> None:
    frame = long_frame(gaps=False)
    frame = pd.concat([frame, frame[(frame["id"] == "s2") & (frame["time"].dt.hour == 7)]])
    setup_error(frame, ValueError, r"series 's2' has two rows at time=.*each \(series, time\) pair")


def test_a_time_off_freq_is_named_with_its_series() -> None:
    frame = long_frame(gaps=False)
    row = frame.index[(frame["id"] == "s1")][3]
    frame.loc[row, "time"] += pd.Timedelta(minutes=30)
    setup_error(
        frame, ValueError, r"time_column='time': .* \(series 's1'\) is not a step of freq='h'"
    )
    setup_error(long_frame(), ValueError, "holds datetimes: give freq=", freq=None)


def test_a_non_numeric_target_is_named_with_its_series_and_value() -> None:
    frame = long_frame(gaps=False)
    frame["value"] = frame["value"].astype(object)
    frame.loc[frame.index[frame["id"] == "s3"][0], "value"] = "n/a"
    setup_error(
        frame, TypeError, r"target column 'value' holds 'n/a' \(series 's3'.*must be numbers"
    )


def test_a_context_longer_than_every_series_is_named() -> None:
    setup_error(
        long_frame(),
        ValueError,
        r"context_length=60 \+ prediction_length=3 .* longer than every series: the longest, "
        r"'s3', has 52 steps.*min_length=",
        context_length=60,
    )


def test_a_static_column_varying_within_a_series_is_named() -> None:
    frame = long_frame()
    frame.loc[frame.index[frame["id"] == "s0"][0], "kind"] = "odd"
    setup_error(frame, ValueError, r"static_categorical column 'kind' varies within series 's0'")


def test_a_series_without_observed_train_values_is_named_or_skipped() -> None:
    frame = long_frame(gaps=False)
    s1 = frame["id"] == "s1"
    early = frame["time"] < frame.loc[s1, "time"].min() + pd.Timedelta(hours=28)
    frame.loc[s1 & early, "value"] = np.nan  # its train part: 28 of 31 steps
    setup_error(frame, ValueError, r"series 's1' has no observed value value in its train part")
    dm = frame_datamodule(frame, on_error="skip")
    dm.setup("fit")
    assert dm.series_ids == ["s0", "s2", "s3"]
    assert len(dm.skipped) == 1 and "no observed" in dm.skipped[0][1]
    assert "left out" in dm.summary()


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"context_length": 0}, ValueError, "context_length=0"),
        ({"prediction_length": 2.5}, TypeError, "prediction_length"),
        ({"stride": 0}, ValueError, "stride=0"),
        ({"windows_per_series": 0}, ValueError, "windows_per_series"),
        ({"min_length": 3}, ValueError, "min_length=3"),
        ({"scaler": "minmax"}, ValueError, "scaler='minmax'"),
        ({"split_by": "random"}, ValueError, "split_by='random'"),
        ({"eval_windows": "first"}, ValueError, "eval_windows='first'"),
        ({"target": 3}, TypeError, "target=3"),
        ({"target": []}, ValueError, "target=\\[\\]"),
        ({"known": "step,minus"}, ValueError, "column 'step,minus'"),
        ({"freq": "fortnightly"}, ValueError, "freq='fortnightly'"),
        ({"freq": 3600}, TypeError, "freq=3600"),
        ({"on_error": "ignore"}, ValueError, "on_error"),
        ({"store": 3}, TypeError, "store=3"),
        ({"splits": {"train": [0]}}, ValueError, "splits="),
        ({"stratify": True}, ValueError, "stratify=True"),
        ({"storage_options": 3}, TypeError, "storage_options=3"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, Any], error: type, named: str) -> None:
    with pytest.raises(error, match=named):
        frame_datamodule(**kwargs).setup("fit")


def test_data_of_another_type_and_no_data_are_refused() -> None:
    with pytest.raises(TypeError, match="data=dict is not accepted"):
        TimeSeriesDataModule({"a": 1}, context_length=2, prediction_length=1).setup("fit")
    with pytest.raises(ValueError, match="needs data"):
        TimeSeriesDataModule(context_length=2, prediction_length=1)
    with pytest.raises(ValueError, match=r"series 1 has shape \(4, 2\)"):
        TimeSeriesDataModule([np.zeros(4), np.zeros((4, 2))], context_length=2,
                             prediction_length=1, store=False).setup("fit")  # fmt: skip


def test_credentials_in_storage_options_are_never_saved() -> None:
    dm = TimeSeriesDataModule(
        files="s3://bucket/series.parquet", context_length=2, prediction_length=1,
        storage_options={"key": "AKIA-secret", "secret": "s", "anon": False},
    )  # fmt: skip
    assert "AKIA-secret" not in str(dict(dm.hparams))
    assert set(dm.unsaved_arguments) == {"storage_options.key", "storage_options.secret"}
