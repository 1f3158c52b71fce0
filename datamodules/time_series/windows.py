"""Which windows a split holds, without listing them, and how an epoch draws them.

A window is a series and the first step of its future (``future_start``): its context is the
``context_length`` steps before, its horizon the ``prediction_length`` steps from there. A
:class:`WindowPlan` holds, per series of a split, its last window's future start, its count of
windows (``stride`` apart, aligned to the last) and the step from which its future is hidden
(a validation window never shows a test step). Window ``i`` of the split is found by one
``searchsorted`` over the cumulative counts: nothing per window is stored.

:class:`WindowDrawSampler` is the train sampler of ``windows_per_series=k``: an epoch of
``k x series`` windows drawn from ``(seed, epoch)`` without replacement (passes over all
windows when the epoch asks for more), dealt to ranks, batched and resumed by
:class:`~datamodules.core.samplers.IndexBatchSampler`'s machinery.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from datamodules.core.samplers import IndexBatchSampler

__all__ = ["WindowDrawSampler", "WindowPlan", "plan_windows"]


class WindowPlan:
    """The windows of one split.

    Args:
        series: Store indices of the split's series that have at least one window.
        last: Future start of each one's last window.
        counts: Windows per series.
        limit: Steps from this one on are hidden (values 0, observed mask 0).
        stride: Steps between a series' windows.
    """

    def __init__(
        self,
        series: np.ndarray,
        last: np.ndarray,
        counts: np.ndarray,
        limit: np.ndarray,
        stride: int,
    ) -> None:
        self.series = series.astype(np.int64)
        self.last = last.astype(np.int64)
        self.counts = counts.astype(np.int64)
        self.limit = limit.astype(np.int64)
        self.stride = int(stride)
        self.cum = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.cum[-1])

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(series, future_start, limit)`` of windows ``ids`` (positions in the split)."""
        k = np.searchsorted(self.cum, ids, side="right") - 1
        back = self.counts[k] - 1 - (ids - self.cum[k])
        return self.series[k], self.last[k] - back * self.stride, self.limit[k]

    def windows(self) -> tuple[np.ndarray, np.ndarray]:
        """Every window as ``(series, future_start)`` arrays (for tests and benchmarks)."""
        series, start, _ = self.locate(np.arange(len(self), dtype=np.int64))
        return series, start


def _span(first: np.ndarray, last: np.ndarray, stride: int) -> np.ndarray:
    return np.where(last >= first, (last - first) // stride + 1, 0)


def plan_windows(
    split: str,
    series: np.ndarray,
    lengths: np.ndarray,
    train_end: np.ndarray,
    val_end: np.ndarray,
    *,
    split_by: str,
    prediction_length: int,
    min_length: int,
    stride: int,
    eval_windows: str,
) -> WindowPlan:
    """The windows of ``split`` over store series ``series``.

    Splitting in time, train windows end by each series' ``train_end``; validation windows
    forecast steps ``[train_end, val_end)``, test windows ``[val_end, length)``, each from the
    first step of its part at the earliest, hiding any step past its part. Splitting by
    series, each series' windows range over all its steps. Eval splits take each series'
    last window unless ``eval_windows="all"``.
    """
    H = prediction_length
    lengths, train_end, val_end = lengths[series], train_end[series], val_end[series]
    first = np.full(len(series), max(min_length - H, 1), dtype=np.int64)
    if split_by == "series":
        begin, end = first, lengths
    elif split == "train":
        begin, end = first, train_end
    elif split == "val":
        begin, end = np.maximum(first, train_end), val_end
    else:
        begin, end = np.maximum(first, val_end), lengths
    if split == "train" or split_by == "series":
        last = end - H
        if split != "train" and eval_windows == "last":
            begin = np.maximum(begin, last)
        counts = _span(begin, last, stride)
    else:
        last = np.maximum(begin, end - H)
        if eval_windows == "last":
            counts = (begin < end).astype(np.int64)
        else:
            counts = np.where(begin < end, (last - begin) // stride + 1, 0)
    has = counts > 0
    return WindowPlan(series[has], last[has], counts[has], end[has], stride)


class WindowDrawSampler(IndexBatchSampler):
    """Batches of an epoch of ``per_epoch`` windows drawn from all ``windows`` of the split.

    Epoch ``e`` draws from ``seed + e``: a random permutation of all windows, then another
    while the epoch needs more; its first ``per_epoch`` are the epoch, in that (shuffled)
    order, or sorted when ``shuffle=False``. Each series' share is in proportion to its count
    of windows. Ranks, batches, state and elastic resume are
    :class:`~datamodules.core.samplers.IndexBatchSampler`'s.

    Args:
        windows: Windows of the split.
        per_epoch: Windows per epoch.
        batch_size: Windows per batch on each rank.
        **kwargs: ``shuffle``, ``drop_last``, ``seed``, ``num_replicas``, ``rank``.
    """

    unit = "window"

    def __init__(self, windows: int, per_epoch: int, batch_size: int, **kwargs: Any) -> None:
        super().__init__(per_epoch, batch_size, **kwargs)
        self.windows = int(windows)

    def permutation(self, epoch: int) -> torch.Tensor:
        """The epoch's windows, in order (the same on every rank)."""
        generator = torch.Generator().manual_seed(self.seed + epoch)
        parts, left = [], self.dataset_size
        while left > 0:
            drawn = torch.randperm(self.windows, generator=generator)[:left]
            parts.append(drawn if self.shuffle else drawn.sort().values)
            left -= len(drawn)
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)

    def state_dict(self, consumed_batches: int | None = None) -> dict[str, Any]:
        """The base's state and the number of windows drawn from."""
        return {**super().state_dict(consumed_batches), "windows": self.windows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Refuses a checkpoint drawn from another number of windows, then restores."""
        if state.get("windows", self.windows) != self.windows:
            raise ValueError(
                f"cannot resume the window draws exactly: the checkpoint drew from "
                f"{state['windows']} windows, this run has {self.windows}; keep the data, "
                "context_length, prediction_length and stride as they were."
            )
        super().load_state_dict(state)
