"""A split of windows, gathered a whole batch per call from the mapped store.

:class:`WindowBatchView` turns a batch of window positions into the batch a forecasting model
takes, in transformers' time-series names: one gather of ``(batch, context + horizon)`` rows
from each mapped array, the scaler applied, missing values 0 with observed mask 0, steps
beyond the split hidden, calendar features looked up from the grid's table.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from datamodules.core.views import SplitView, Transform
from datamodules.time_series.store import SeriesStore
from datamodules.time_series.windows import WindowPlan

__all__ = ["WindowBatchView"]


class WindowBatchView(SplitView):
    """The windows of one split, a batch per ``view[positions]``.

    Args:
        store: The mapped store.
        plan: The split's windows.
        context_length: Steps of context.
        prediction_length: Steps of horizon.
        known: How many covariate columns are known in advance (the first ones).
        calendar: Whether to add the calendar features.
        multivariate: Whether the target is a list (values (B, T, C)) or one column (B, T).
        transform: Applied to each finished batch.
        drawn: Positions are windows of the whole plan drawn by the sampler
            (``windows_per_series``); the view's length is then the draws per epoch.

    A batch is cheap to gather (slices of mapped columns), so with workers eight batches
    travel as one message (``batches_per_message``; see :mod:`datamodules.core.loaders`):
    indexed with a list of position batches, the view returns the list of their batches.
    """

    batches_per_message = 8

    def __init__(
        self,
        store: SeriesStore,
        plan: WindowPlan,
        *,
        context_length: int,
        prediction_length: int,
        known: int,
        calendar: bool,
        multivariate: bool,
        transform: Transform | None = None,
        drawn: int | None = None,
    ) -> None:
        size = len(plan) if drawn is None else drawn
        super().__init__(torch.arange(size, dtype=torch.int64), transform)
        self.store, self.plan = store, plan
        self.context_length, self.prediction_length = context_length, prediction_length
        self.known, self.calendar, self.multivariate = known, calendar, multivariate

    def __getitem__(self, batch: torch.Tensor | list[torch.Tensor]) -> Any:
        if isinstance(batch, list):  # several batches for one worker message
            return [self[b] for b in batch]
        out = self.gather(batch.numpy())
        return self.transform(out) if self.transform is not None else out

    def gather(self, positions: np.ndarray) -> dict[str, torch.Tensor]:
        """The batch of windows at ``positions`` of the plan."""
        store, C, H = self.store, self.context_length, self.prediction_length
        series, start, limit = self.plan.locate(np.asarray(positions, dtype=np.int64))
        B, T = len(series), C + H
        steps = (start - C)[:, None] + np.arange(T, dtype=np.int64)[None, :]
        lengths = store.lengths[series]
        visible = (steps >= 0) & (steps < limit[:, None])
        rows = store.offsets[series][:, None] + np.clip(steps, 0, (lengths - 1)[:, None])
        flat = rows.reshape(-1)
        values = np.take(store.targets, flat, axis=0).reshape(B, T, -1)
        values[~visible] = np.nan
        observed = ~np.isnan(values)
        loc, scale = store.loc[series], store.scale[series]
        scaled = (values - loc[:, None, :]) / scale[:, None, :]
        scaled[~observed] = 0.0
        covariates = np.take(store.covariates, flat, axis=0).reshape(B, T, -1)
        covariates[~visible] = np.nan
        np.nan_to_num(covariates, copy=False)
        parts_past = [covariates[:, :C]]
        future_cov = covariates[:, C:].copy()
        future_cov[:, :, self.known :] = 0.0  # observed covariates: only in the past
        parts_future = [future_cov]
        if self.calendar and store.calendar.shape[1]:
            cells = store.grid_start[series][:, None] + steps
            table = np.take(store.calendar, cells.reshape(-1), axis=0).reshape(B, T, -1)
            parts_past.append(table[:, :C])
            parts_future.append(table[:, C:])
        if not self.multivariate:
            scaled, observed = scaled[..., 0], observed[..., 0]
            loc, scale = loc[:, 0], scale[:, 0]
        return {
            "past_values": torch.from_numpy(np.ascontiguousarray(scaled[:, :C])),
            "past_observed_mask": torch.from_numpy(np.ascontiguousarray(observed[:, :C])),
            "future_values": torch.from_numpy(np.ascontiguousarray(scaled[:, C:])),
            "future_observed_mask": torch.from_numpy(np.ascontiguousarray(observed[:, C:])),
            "past_time_features": torch.from_numpy(_join(parts_past)),
            "future_time_features": torch.from_numpy(_join(parts_future)),
            "static_categorical_features": torch.from_numpy(
                np.ascontiguousarray(store.static_categorical[series], dtype=np.int64)
            ),
            "static_real_features": torch.from_numpy(
                np.ascontiguousarray(store.static_real[series], dtype=np.float32)
            ),
            "series_index": torch.from_numpy(series),
            "loc": torch.from_numpy(np.ascontiguousarray(loc, dtype=np.float32)),
            "scale": torch.from_numpy(np.ascontiguousarray(scale, dtype=np.float32)),
            "window_start": torch.from_numpy(start - C),
        }


def _join(parts: list[np.ndarray]) -> np.ndarray:
    return np.ascontiguousarray(np.concatenate(parts, axis=2), dtype=np.float32)
