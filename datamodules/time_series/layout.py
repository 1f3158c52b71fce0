"""Where each row of the input goes in the store: series order, steps, lengths, gaps.

:func:`lay_out` sorts the rows by series and time (an index, never a copy of the columns), or
finds them sorted already (the usual frame) and sorts nothing; it refuses a duplicated
(series, time) pair, naming the series and the time. :class:`Layout` then says, per series,
where its rows start and how many there are, its first grid position and its length in steps
(gaps included), and per row (in sorted order) its step within its series.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from datamodules.time_series.calendar import Grid
from datamodules.time_series.inputs import LongColumns

__all__ = ["Layout", "lay_out", "take"]


@dataclass
class Layout:
    """The rows of :class:`~datamodules.time_series.inputs.LongColumns` in series order.

    Attributes:
        order: Row of the input at each sorted position, or None: the input is sorted.
        starts: Each present series' first sorted position.
        counts: Each present series' rows.
        present: Each present series' code.
        local: Per sorted row, its step within its series (0 at its first time).
        first: Each series' first position on the grid.
        lengths: Each series' length in steps, gaps included.
        grid: The time grid.
    """

    order: np.ndarray | None
    starts: np.ndarray
    counts: np.ndarray
    present: np.ndarray
    local: np.ndarray
    first: np.ndarray
    lengths: np.ndarray
    grid: Grid

    @property
    def gaps(self) -> bool:
        """Whether any series misses a step."""
        return bool((self.lengths != self.counts).any())


def take(values: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    """``values`` in sorted order (itself when the input is sorted)."""
    return values if order is None else values[order]


def _sorted(codes: np.ndarray, positions: np.ndarray | None) -> bool:
    """Whether the rows are in (series, time) order already, without a duplicate."""
    step = np.diff(codes)
    if (step < 0).any():
        return False
    if positions is None:
        return True
    return bool((np.diff(positions)[step == 0] > 0).all())


def lay_out(
    columns: LongColumns,
    grid_of: Callable[[np.ndarray, np.ndarray, list[Any]], tuple[np.ndarray, Grid]],
) -> Layout:
    """The layout of the rows (see :class:`Layout`).

    Raises:
        ValueError: The data holds no row, or a (series, time) pair is duplicated.
    """
    columns.factorize()
    codes, ids, n = columns.codes, columns.ids, columns.rows
    assert codes is not None and ids is not None
    if n == 0:
        raise ValueError("the data holds no series: nothing to train on.")
    grid = Grid(None, 0)
    positions = None
    if columns.time is not None:
        positions, grid = grid_of(columns.time, codes, ids)
    order = None
    if not _sorted(codes, positions):
        if positions is None:
            order = np.argsort(codes, kind="stable")
        else:
            order = np.lexsort((positions, codes))
    sorted_codes = take(codes, order)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(sorted_codes)) + 1]).astype(np.int64)
    present = sorted_codes[starts]
    del sorted_codes
    counts = np.diff(np.concatenate([starts, [n]])).astype(np.int64)
    if positions is None:
        first = np.zeros(len(starts), dtype=np.int64)
        local = np.arange(n, dtype=np.int64)
    else:
        local = take(positions, order)
        del positions
        if order is not None:
            same = np.flatnonzero((np.diff(take(codes, order)) == 0) & (np.diff(local) == 0))
            if len(same):
                row, other = int(order[same[0]]), int(order[same[0] + 1])
                raise ValueError(
                    f"series {ids[codes[row]]!r} has two rows at {columns.time_column}="
                    f"{columns.time[row]!r} (rows {row} and {other}): each (series, time) "
                    "pair must be unique."
                )
        first = local[starts].copy()
    local -= np.repeat(first if columns.time is not None else starts, counts)
    lengths = local[np.concatenate([starts[1:], [n]]) - 1] + 1
    return Layout(order, starts, counts, present, local, first, lengths, grid)
