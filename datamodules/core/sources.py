"""Sources of a mixed split: ``Source(files, weight=, repeat=, name=)``, weights and schedules.

A weight is a number, or a *schedule*: ``[[epoch, weight], ...]`` points, the weight at epoch
``e`` linear between the points around it, the first weight before the first point and the
last after the last (:func:`weight_at`). A weight may be 0 in some epochs; an epoch whose
weights are all 0 is refused (:func:`check_sources`). Schedules are plain data (lists of
numbers), so checkpoints and configs hold them as they are. How many units each source gives
per epoch is :mod:`datamodules.core.mixture`'s.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from datamodules.core.checks import (
    check_not_pipe,
    check_number,
    check_string,
    is_number,
    rejected,
)
from datamodules.core.keywords import CheckedKeywords

__all__ = ["Source", "check_sources", "describe_weight", "last_point", "weight_at"]

#: What a weight may be: a number, or a schedule of ``[epoch, weight]`` points.
WEIGHT_ACCEPTED = "a number >= 0 or a schedule [[epoch, weight], ...]"


def _check_weight(value: Any, where: str) -> Any:
    """``value`` as a number or a schedule (a list of ``[epoch, weight]`` lists).

    Raises:
        TypeError: Neither a number nor a list, or a point that is not a list of numbers.
        ValueError: A number below 0 or not finite, an empty schedule, a point that is not
            ``[epoch, weight]``, an epoch or weight below 0, or epochs not increasing.
    """
    name = f"{where}: weight"
    if value is None:
        return None
    if is_number(value):
        if not math.isfinite(value) or value < 0:
            raise rejected(name, value, WEIGHT_ACCEPTED)
        return value
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise rejected(name, value, WEIGHT_ACCEPTED, TypeError)
    points: list[list[Any]] = []
    for point in value:
        if (
            not isinstance(point, Sequence)
            or isinstance(point, (str, bytes))
            or not all(is_number(x) for x in point)
        ):
            raise rejected(name, value, f"{WEIGHT_ACCEPTED} (points of numbers)", TypeError)
        if len(point) != 2 or not all(math.isfinite(x) and x >= 0 for x in point):
            raise rejected(name, value, f"{WEIGHT_ACCEPTED} (epochs and weights >= 0)")
        points.append([point[0], point[1]])
    if not points:
        raise rejected(name, value, f"{WEIGHT_ACCEPTED} (at least one point)")
    epochs = [p[0] for p in points]
    if any(b <= a for a, b in zip(epochs, epochs[1:], strict=False)):
        raise ValueError(
            f"{name}={value!r} is not accepted: the epochs of a schedule must increase, got "
            f"{epochs}."
        )
    return points


def weight_at(weight: Any, epoch: float) -> float:
    """The weight at ``epoch``: the number, or the schedule interpolated linearly (constant
    before its first point and after its last)."""
    if weight is None:
        return 0.0
    if is_number(weight):
        return float(weight)
    if epoch <= weight[0][0]:
        return float(weight[0][1])
    for (e0, w0), (e1, w1) in zip(weight, weight[1:], strict=False):
        if epoch < e1:
            return float(w0 + (w1 - w0) * (epoch - e0) / (e1 - e0))
    return float(weight[-1][1])


def describe_weight(weight: Any) -> str:
    """``"3"`` for a number, ``"[[0, 1], [5, 3]]"`` for a schedule (for summaries)."""
    if is_number(weight):
        return f"{weight:g}"
    return "[" + ", ".join(f"[{e:g}, {w:g}]" for e, w in weight) + "]"


def last_point(weight: Any) -> float:
    """The epoch of a schedule's last point (0 for a number)."""
    return float(weight[-1][0]) if weight is not None and not is_number(weight) else 0.0


@dataclass(frozen=True)
class Source(metaclass=CheckedKeywords):
    """One source of a mixed split.

    A mistyped keyword fails naming the nearest accepted one (``Source(wieght=2)``: "did you
    mean 'weight'?"), as the DataModules' do.

    Args:
        files: What the split takes: a path or URL, a glob, a directory, or a list of them
            (streams: shards; text: files, a Megatron prefix or a flat token file).
        weight: Its share of ``epoch_size`` (relative to the other sources' weights): a
            number, or a schedule ``[[epoch, weight], ...]`` (linear between the points,
            constant outside them; 0 allowed in some epochs).
        repeat: Passes over its units per epoch (0.25, 1, 3, ...).
        name: Its name in ``summary()``, ``quotas()``, the ``mix/<name>`` logs and
            ``source_key``; default: a short form of ``files``.
    """

    files: Any
    weight: float | list[list[float]] | None = None
    repeat: float | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        files = self.files
        single = isinstance(files, (str, os.PathLike))
        many = isinstance(files, Sequence) and not isinstance(files, (str, bytes))
        if not single and not (
            many and files and all(isinstance(f, (str, os.PathLike)) for f in files)
        ):
            raise TypeError(
                f"Source files={files!r} is not accepted: use a path or URL, a glob, a "
                "directory, or a non-empty list of them."
            )
        # Paths as strings: a Source equals its rebuilt self (see to_plain).
        object.__setattr__(
            self, "files", os.fspath(files) if single else [os.fspath(f) for f in files]
        )
        for path in [self.files] if single else self.files:
            check_not_pipe(path, "Source files")
        where = f"Source({self.files!r})"
        object.__setattr__(self, "weight", _check_weight(self.weight, where))
        check_number(self.repeat, f"{where}: repeat", 0, allow_none=True)
        if self.repeat is not None and not math.isfinite(self.repeat):
            raise rejected(f"{where}: repeat", self.repeat, "a finite number >= 0 or None")
        if self.weight is not None and self.repeat is not None:
            raise ValueError(
                f"{where} gives weight={self.weight!r} and repeat={self.repeat!r}: give one of "
                "them."
            )
        check_string(self.name, "Source name", allow_none=True)

    def to_plain(self) -> dict[str, Any]:
        """This source as plain data (how checkpoints keep it); ``Source(**d)`` rebuilds it,
        and a ``*_files`` list accepts such dicts in place of Sources."""
        return {"files": self.files, "weight": self.weight, "repeat": self.repeat,
                "name": self.name}  # fmt: skip

    @classmethod
    def from_plain(cls, value: Mapping[str, Any], where: str) -> Source:
        """Rebuilds a Source from :meth:`to_plain`'s dict (or one written in a config).

        Raises:
            ValueError: A key other than ``files``, ``weight``, ``repeat`` and ``name``, or
                no ``files``, naming ``where``.
        """
        unknown = sorted(set(value) - {"files", "weight", "repeat", "name"})
        if unknown or "files" not in value:
            problem = f"unknown keys {unknown}" if unknown else "no 'files' key"
            raise ValueError(
                f"{where}: {dict(value)!r} has {problem}: a source given as a dict has the keys "
                "'files' and optionally 'weight', 'repeat' and 'name'."
            )
        return cls(**value)

    @property
    def label(self) -> str:
        """The name, or a short form of the files."""
        if self.name is not None:
            return self.name
        files = self.files
        first = os.fspath(files if isinstance(files, (str, os.PathLike)) else files[0])
        short = first.rstrip("/").rsplit("/", 1)[-1] or first
        return short if isinstance(files, (str, os.PathLike)) else f"{short} (+{len(files) - 1})"

    @property
    def paths(self) -> list[str]:
        """The files as a list."""
        return [self.files] if isinstance(self.files, str) else list(self.files)

    def share(self) -> str:
        """How it takes part: ``"weight=3"``, ``"weight=[[0, 1], [4, 3]]"``, ``"repeat=2"``
        or ``"once per epoch"``."""
        if self.weight is not None:
            return f"weight={describe_weight(self.weight)}"
        if self.repeat is not None:
            return f"repeat={self.repeat:g}"
        return "once per epoch"


def check_sources(sources: Sequence[Source], name: str) -> list[Source]:
    """Checks a split's list of sources: all weights, all repeats, or neither; unique names;
    no epoch whose weights are all 0.

    Raises:
        ValueError: A mix of weighted, repeated and plain sources, a name given twice, or an
            epoch with every weight 0 (naming the epoch).
    """
    if not sources:
        raise ValueError(f"{name}=[]: give at least one Source.")
    kinds = {
        "weight": [s.label for s in sources if s.weight is not None],
        "repeat": [s.label for s in sources if s.repeat is not None],
        "neither": [s.label for s in sources if s.weight is None and s.repeat is None],
    }
    given = {k: v for k, v in kinds.items() if v}
    if len(given) > 1:
        parts = "; ".join(f"{kind}: {', '.join(labels)}" for kind, labels in given.items())
        raise ValueError(
            f"{name}: every source gives a weight, or every one a repeat, or none does; "
            f"these differ ({parts})."
        )
    labels = [s.label for s in sources]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise ValueError(f"{name}: the source name(s) {twice} are used twice: set name=.")
    if sources[0].weight is not None:
        last = math.ceil(max(last_point(s.weight) for s in sources))
        for epoch in range(last + 1):  # constant after the last point
            if not any(weight_at(s.weight, epoch) > 0 for s in sources):
                raise ValueError(
                    f"{name}: every source's weight is 0 in epoch {epoch} "
                    f"({', '.join(f'{s.label}: {s.share()}' for s in sources)}); give some "
                    "source a weight > 0 in every epoch."
                )
    return list(sources)
