"""Argument checks of StreamingDataModule: each raises early, naming the argument, the value and
what is accepted."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from datamodules.core.hardware import TUNE
from datamodules.streaming.formats import FORMATS


def check_files(value: Any, name: str) -> list[str] | None:
    """A ``*_files`` argument as a list of strings (None stays None)."""
    if value is None:
        return None
    items = [value] if isinstance(value, (str, os.PathLike)) else value
    ok = isinstance(items, Sequence) and all(isinstance(v, (str, os.PathLike)) for v in items)
    if not ok or not items:
        raise TypeError(
            f"{name}={value!r} is not accepted: use a path or URL, a glob, a directory, or a "
            "non-empty list of them."
        )
    return [os.fspath(v) for v in items]


def check_callable(value: Any, name: str) -> None:
    """Raises unless ``value`` is callable or None."""
    if value is not None and not callable(value):
        raise TypeError(f"{name}={value!r} is not accepted: use a callable or None.")


def check_stream_split_arguments(dm: Any) -> None:
    """Refuses the shared arguments that do not apply to a stream (random splits, the tuner)."""
    for name, value in (("val_split", dm.val_split), ("test_split", dm.test_split)):
        if value != 0 and not (name == "val_split" and value == 0.1):  # 0.1: base default
            raise ValueError(
                f"{name}={value!r} does not apply to StreamingDataModule: a stream is not "
                f"split at random; give the records as {name[:-6]}_files= instead (leave "
                f"{name} unset or 0)."
            )
    if dm.explicit_splits is not None or dm.stratify:
        name = "splits" if dm.explicit_splits is not None else "stratify"
        raise ValueError(
            f"{name}= does not apply to StreamingDataModule: give each split's shards as "
            "train_files=, val_files= and test_files=."
        )
    if dm.num_workers == TUNE:
        raise ValueError(
            "num_workers='tune' is not accepted by StreamingDataModule (the tuner times "
            "index-sampled loaders): use an int or 'auto'."
        )


def check_stream_arguments(
    files: dict[str, list[str] | None],
    *,
    transform: Any,
    collate: Any,
    dataset_factory: Any,
    shuffle_buffer: Any,
    on_error: Any,
    fmt: Any,
    columns: Any,
    index_cache: Any,
) -> None:
    """Checks the arguments of :class:`~datamodules.StreamingDataModule` beyond the shared ones."""
    check_callable(transform, "transform")
    check_callable(collate, "collate")
    check_callable(dataset_factory, "dataset_factory")
    if dataset_factory is not None and any(v is not None for v in files.values()):
        raise ValueError(
            "give shard files (train_files=, val_files=, test_files=) or "
            "dataset_factory=, not both."
        )
    if dataset_factory is None and files["train"] is None:
        raise ValueError(
            "StreamingDataModule needs data: train_files= (paths, URLs or a glob of "
            ".jsonl/.txt/.csv/.parquet shards) or dataset_factory=."
        )
    if isinstance(shuffle_buffer, bool) or not isinstance(shuffle_buffer, int):
        raise TypeError(f"shuffle_buffer={shuffle_buffer!r} is not accepted: use an int >= 0.")
    if shuffle_buffer < 0:
        raise ValueError(f"shuffle_buffer={shuffle_buffer!r} is not accepted: use an int >= 0.")
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error={on_error!r} is not accepted: use 'raise' or 'skip'.")
    if fmt is not None and fmt not in FORMATS:
        raise ValueError(f"fmt={fmt!r} is not accepted: use None or one of {FORMATS}.")
    if columns is not None and (
        isinstance(columns, str) or not all(isinstance(c, str) for c in columns)
    ):
        raise TypeError(f"columns={columns!r} is not accepted: use None or a list of names.")
    if not isinstance(index_cache, (bool, str, os.PathLike, type(None))):
        raise TypeError(
            f"index_cache={index_cache!r} is not accepted: use a directory, None or True "
            "(the default cache) or False (memory only)."
        )
