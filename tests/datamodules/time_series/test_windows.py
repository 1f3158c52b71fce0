"""Windows: exact sets per split, no training horizon touching a held-out step in any split mode,
values equal to the raw slices, gaps and NaN masked, draws per epoch, resume."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.datamodules.contract import assert_resume_mid_epoch_is_exact
from tests.datamodules.time_series.series_data import frame_datamodule, long_frame, window_keys

LENGTHS = (40, 31, 25, 52)
C, H = 6, 3


def parts(length: int, val: float | int = 0.2, test: int = 5) -> tuple[int, int]:
    """(train_end, val_end) as the docs define them: the last fraction (or count) of steps."""
    v = int(np.floor(length * val + 0.5)) if isinstance(val, float) else val
    return length - v - test, length - test


def loader_keys(loader: Any) -> list[tuple[int, int]]:
    return [key for batch in loader for key in window_keys(batch, C)]


@pytest.mark.parametrize("workers", [0, 2])
def test_every_window_once_per_epoch_exactly_the_expected_ones(workers: int) -> None:
    dm = frame_datamodule(val_split=0.2, test_split=5, num_workers=workers)
    dm.setup("fit")
    expected = {"train": [], "val": [], "test": []}
    for s, length in enumerate(LENGTHS):
        train_end, val_end = parts(length)
        expected["train"] += [(s, f) for f in range(C, train_end - H + 1)]
        expected["val"].append((s, max(train_end, val_end - H)))
        expected["test"].append((s, max(val_end, length - H)))
    loader = dm.train_dataloader()
    for epoch in range(2):
        seen = loader_keys(loader)
        assert Counter(seen) == Counter(expected["train"]), epoch
    assert sorted(loader_keys(dm.val_dataloader())) == expected["val"]
    assert sorted(loader_keys(dm.test_dataloader())) == expected["test"]


def leaks(dm: Any, keys: list[tuple[int, int]], split_by: str) -> list[tuple[int, int]]:
    """Train windows whose context or horizon reaches a step held out from training."""
    held_out_series = set(dm.split_indices["val"].tolist() + dm.split_indices["test"].tolist())
    train_end = np.asarray(dm.store.train_end)
    bad = []
    for s, f in keys:
        if split_by == "series" and s in held_out_series:
            bad.append((s, f))
        if split_by == "time" and f + H > train_end[s]:
            bad.append((s, f))
    return bad


@pytest.mark.parametrize(
    "kwargs",
    [
        {"split_by": "time", "stride": 1},
        {"split_by": "time", "stride": 4},
        {"split_by": "time", "windows_per_series": 5},
        {"split_by": "time", "eval_windows": "all", "val_split": 7, "test_split": 0.25},
        {"split_by": "time", "min_length": 5},
        {"split_by": "series", "val_split": 1, "test_split": 1},
        {"split_by": "series", "val_split": 1, "windows_per_series": 3, "test_split": 1},
        {"split_by": "series", "val_split": 1, "test_split": 1, "eval_windows": "all"},
    ],
)
def test_no_training_window_touches_a_held_out_step(kwargs: dict[str, Any]) -> None:
    kwargs = {"val_split": 0.2, "test_split": 5, **kwargs}
    dm = frame_datamodule(**kwargs)
    dm.setup("fit")
    loader = dm.train_dataloader()
    for _ in range(2):
        keys = loader_keys(loader)
        assert keys and not leaks(dm, keys, kwargs["split_by"])
    if kwargs["split_by"] == "time":
        # Eval windows forecast only steps of their own part; later steps are hidden.
        for split, loader in (("val", dm.val_dataloader()), ("test", dm.test_dataloader())):
            for batch in loader:
                for row, (s, f) in enumerate(window_keys(batch, C)):
                    lo = int(dm.store.train_end[s] if split == "val" else dm.store.val_end[s])
                    hi = int(dm.store.val_end[s] if split == "val" else dm.store.lengths[s])
                    assert lo <= f < hi
                    shown = batch["future_observed_mask"][row]
                    assert not shown[max(hi - f, 0) :].any()
    else:
        train = set(dm.split_indices["train"].tolist())
        assert {s for s, _ in loader_keys(dm.val_dataloader())}.isdisjoint(train)


def test_values_are_the_raw_slices_gaps_and_nan_masked() -> None:
    frame = long_frame()
    dm = frame_datamodule(frame, scaler=None, val_split=0, stride=1, shuffle=False)
    dm.setup("fit")
    raw = {}
    for s, sid in enumerate(dm.series_ids):
        rows = frame[frame["id"] == sid]
        steps = ((rows["time"] - rows["time"].min()) / np.timedelta64(1, "h")).astype(int)
        full = np.full(LENGTHS[s], np.nan)
        full[steps.to_numpy()] = rows["value"].to_numpy()
        raw[s] = full
    checked = 0
    for batch in dm.train_dataloader():
        values = torch.cat([batch["past_values"], batch["future_values"]], 1).numpy()
        mask = torch.cat([batch["past_observed_mask"], batch["future_observed_mask"]], 1).numpy()
        for row, (s, f) in enumerate(window_keys(batch, C)):
            want = raw[s][f - C : f + H]
            assert np.array_equal(mask[row], ~np.isnan(want))
            assert np.array_equal(values[row], np.nan_to_num(want).astype(np.float32))
            checked += 1
    assert checked == dm.windows("train")
    assert np.isnan(raw[0][[5, 6, 9]]).all()  # the gaps and the NaN the fixture made


def test_covariates_calendar_static_and_scaler() -> None:
    dm = frame_datamodule(val_split=0.2, test_split=5, shuffle=False)
    dm.setup("fit")
    assert dm.time_feature_names == [
        "step", "minus", "hour_of_day", "day_of_week", "day_of_month", "day_of_year",
        "month_of_year",
    ]  # fmt: skip
    batch = next(iter(dm.train_dataloader()))
    steps = batch["window_start"][:, None] + torch.arange(C + H)
    past, future = batch["past_time_features"], batch["future_time_features"]
    known = torch.cat([past[..., 0], future[..., 0]], 1)
    # The known covariate is the step itself (0 at the missing rows 5 and 6).
    gap = (steps == 5) | (steps == 6)
    assert torch.equal(known[~gap], steps[~gap].float()) and not known[gap].any()
    assert torch.equal(past[..., 1][~gap[:, :C]], -steps[:, :C][~gap[:, :C]].float())
    assert not future[..., 1].any()  # observed covariates stay in the past
    hour = (steps + batch["series_index"][:, None]) % 24  # series i starts at hour i
    assert torch.allclose(torch.cat([past[..., 2], future[..., 2]], 1), hour / 23 - 0.5)
    assert dm.cardinalities == [3]
    assert batch["static_categorical_features"].dtype == torch.int64
    kinds = batch["static_categorical_features"][:, 0]
    assert torch.equal(kinds, 1 + batch["series_index"] % 2)  # "even" -> 1, "odd" -> 2
    assert torch.equal(batch["static_real_features"][:, 0], batch["series_index"].float())
    # Standard scaler over each series' observed train steps only.
    for s, length in enumerate(LENGTHS):
        train_end, _ = parts(length)
        values = 100.0 * s + np.array([t for t in range(train_end) if t not in (5, 6, 9)])
        assert np.isclose(dm.store.loc[s, 0], values.mean(), rtol=1e-5)
        assert np.isclose(dm.store.scale[s, 0], values.std(), rtol=1e-4)
    restored = dm.inverse_transform(batch["past_values"], batch)
    raw = 100.0 * batch["series_index"][:, None] + steps[:, :C]
    seen = batch["past_observed_mask"]
    assert torch.allclose(restored[seen], raw[seen].float(), atol=1e-3)


def test_mean_scaler_and_multivariate_targets() -> None:
    frame = long_frame(gaps=False)
    frame["double"] = 2 * frame["value"]
    dm = frame_datamodule(frame, target=["value", "double"], scaler="mean", val_split=0)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["past_values"].shape == (8, C, 2) and batch["future_values"].shape == (8, H, 2)
    assert batch["loc"].shape == (8, 2) and not batch["loc"].any()
    restored = dm.inverse_transform(batch["future_values"], batch)
    assert torch.allclose(restored[..., 1], 2 * restored[..., 0], rtol=1e-5)
    samples = batch["future_values"][:, None].expand(-1, 5, -1, -1)  # (B, samples, H, C)
    assert torch.allclose(dm.inverse_transform(samples, batch)[:, 3], restored)


def test_windows_per_series_draws_each_epoch_from_seed_and_epoch() -> None:
    dm = frame_datamodule(val_split=0.2, test_split=5, windows_per_series=4)
    dm.setup("fit")
    total = len(dm.plan("train"))
    assert dm.windows("train") == 16 < total
    loader = dm.train_dataloader()
    epochs = [loader_keys(loader) for _ in range(3)]
    assert all(len(e) == len(set(e)) == 16 for e in epochs)
    assert len({tuple(sorted(e)) for e in epochs}) == 3
    again = frame_datamodule(val_split=0.2, test_split=5, windows_per_series=4)
    assert loader_keys(again.train_dataloader()) == epochs[0]
    # Two ranks: disjoint halves of the same draw, as many batches each.
    view = dm.view("train")
    shares = [dm.make_sampler("train", view, rank, 2) for rank in (0, 1)]
    ids = [torch.cat(list(s)).tolist() for s in shares]
    assert not set(ids[0]) & set(ids[1]) and len(ids[0]) == len(ids[1]) == 8
    # More draws than windows: whole passes, each window as often as the others (+-1).
    many = frame_datamodule(val_split=0.2, test_split=5, windows_per_series=total)
    counts = Counter(loader_keys(many.train_dataloader()))
    assert len(counts) == total and set(counts.values()) == {4}


def test_windows_per_series_resumes_mid_epoch_exactly_on_another_worker_count(
    tmp_path: Path,
) -> None:
    workers = iter([0, 2, 2])  # the checkpoints are taken with 0 workers, resumed with 2

    def make() -> Any:
        return frame_datamodule(
            val_split=0.2, test_split=5, windows_per_series=6, batch_size=4,
            num_workers=next(workers),
        )  # fmt: skip

    reference = assert_resume_mid_epoch_is_exact(
        make, lambda b: window_keys(b, C), tmp_path, steps=lambda n: (2,)
    )
    assert len(reference[0]) == 6


def test_short_series_left_out_and_counted_or_left_padded() -> None:
    frame = long_frame(lengths=(40, 8, 25), gaps=False)
    dm = frame_datamodule(frame, val_split=0, test_split=0)
    dm.setup("fit")
    assert dm.series_ids == ["s0", "s2"] and len(dm.skipped) == 1
    assert "s1" in dm.skipped[0][0] and "shorter than min_length=9" in dm.skipped[0][1]
    padded = frame_datamodule(frame, val_split=0, test_split=0, min_length=5, shuffle=False)
    padded.setup("fit")
    assert padded.series_ids == ["s0", "s1", "s2"] and not len(padded.skipped)
    batch = next(iter(padded.train_dataloader()))
    first = window_keys(batch, C)[0]
    assert first == (0, 2)  # context starts 4 steps before the series: hidden
    assert batch["past_observed_mask"][0].tolist() == [False] * 4 + [True] * 2
    assert not batch["past_values"][0, :4].any()
