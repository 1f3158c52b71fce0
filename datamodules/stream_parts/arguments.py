"""Argument checks of StreamingDataModule: each raises early, naming the argument, the value and
what is accepted."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from datamodules.core.checks import (
    check_callable,
    check_choice,
    check_int,
    check_on_error,
    check_path,
    check_size,
    check_string,
)
from datamodules.core.hardware import TUNE
from datamodules.core.mixture import Source, check_sources
from datamodules.remote.credentials import restored_storage_options, save_without_credentials
from datamodules.remote.files import is_remote
from datamodules.remote.listing import check_not_pipe
from datamodules.remote.retrying import RemoteOptions, check_remote_options
from datamodules.shards.formats import FORMATS

__all__ = [
    "check_callable",
    "check_files",
    "check_mixing",
    "check_stream_arguments",
    "check_stream_split_arguments",
    "module_remote_options",
    "remote_options",
    "stream_work",
]


def check_files(value: Any, name: str) -> list[str] | list[Source] | None:
    """A ``*_files`` argument as a list of strings, or a checked list of Sources (None stays
    None). A source may also be given as the dict ``Source.to_plain()`` makes."""
    if value is None:
        return None
    if isinstance(value, (Source, Mapping)):
        value = [value]
    if isinstance(value, Sequence) and value and any(isinstance(v, Mapping) for v in value):
        # Sources as plain dicts: how checkpoints (and configs) hold them.
        value = [
            Source.from_plain(v, f"{name}[{i}]") if isinstance(v, Mapping) else v
            for i, v in enumerate(value)
        ]
    if isinstance(value, Sequence) and value and any(isinstance(v, Source) for v in value):
        if not all(isinstance(v, Source) for v in value):
            raise TypeError(f"{name}: give a list of Sources or of paths, not both: {value!r}.")
        return check_sources(value, name)
    items = [value] if isinstance(value, (str, os.PathLike)) else value
    ok = isinstance(items, Sequence) and all(isinstance(v, (str, os.PathLike)) for v in items)
    if not ok or not items:
        raise TypeError(
            f"{name}={value!r} is not accepted: use a path or URL, a glob, a directory, or a "
            "non-empty list of them."
        )
    paths = [os.fspath(v) for v in items]
    for path in paths:
        check_not_pipe(path, name)
    return paths


def check_stream_split_arguments(dm: Any) -> None:
    """Refuses the shared arguments that do not apply to a stream (random splits, the tuner)."""
    for name, value in (("val_split", dm.val_split), ("test_split", dm.test_split)):
        if value != 0:
            raise ValueError(
                f"{name}={value!r} does not apply to {type(dm).__name__}: a stream is not "
                f"split at random; give the records as {name[:-6]}_files= instead (leave "
                f"{name} at its default, 0)."
            )
    if dm.explicit_splits is not None or dm.stratify:
        name = "splits" if dm.explicit_splits is not None else "stratify"
        raise ValueError(
            f"{name}= does not apply to {type(dm).__name__}: give each split's shards as "
            "train_files=, val_files= and test_files=."
        )
    if dm.num_workers == TUNE:
        raise ValueError(
            f"num_workers='tune' is not accepted by {type(dm).__name__} (the tuner times "
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
    # None: the default of plain or image records
    check_int(shuffle_buffer, "shuffle_buffer", 0, allow_none=True)
    check_on_error(on_error)
    check_choice(fmt, "fmt", FORMATS, allow_none=True)
    if columns is not None and (
        isinstance(columns, str) or not all(isinstance(c, str) for c in columns)
    ):
        raise TypeError(f"columns={columns!r} is not accepted: use None or a list of names.")
    if not isinstance(index_cache, (bool, str, os.PathLike, type(None))):
        raise TypeError(
            f"index_cache={index_cache!r} is not accepted: use a directory, None or True "
            "(the default cache) or False (memory only)."
        )


def remote_options(
    storage_options: Any, retries: Any, timeout: Any, cache_dir: Any, cache_limit: Any,
    prefetch_shards: Any,
) -> tuple[RemoteOptions, int | None]:  # fmt: skip
    """Checks the remote-shard arguments; returns the read options and the cache limit."""
    options = check_remote_options(storage_options, retries, timeout)
    check_int(prefetch_shards, "prefetch_shards", 0)
    check_path(cache_dir, "cache_dir", "a directory or None", allow_none=True)
    limit = check_size(cache_limit, "cache_limit", allow_none=True)
    if limit is not None and cache_dir is None:
        raise ValueError(f"cache_limit={cache_limit!r} needs cache_dir= (where shards are kept).")
    return options, limit


def module_remote_options(
    module: Any, storage_options: Any, retries: Any, timeout: Any, cache_dir: Any, cache_limit: Any
) -> tuple[RemoteOptions, int | None]:
    """The remote options of a DataModule that reads its files by range (no shards fetched
    ahead): ``storage_options`` restored from a checkpoint's marker, checked with the rest
    (:func:`remote_options`), and kept out of ``module``'s saved hyperparameters where they
    hold credentials; returns the read options and the cache limit."""
    storage_options = restored_storage_options(storage_options)
    options, limit = remote_options(
        storage_options, retries, timeout, cache_dir, cache_limit, prefetch_shards=0
    )
    save_without_credentials(module, storage_options)
    return options, limit


def check_mixing(files: dict[str, Any], epoch_size: Any, source_key: Any) -> None:
    """Checks ``epoch_size`` and ``source_key`` against the splits that list Sources."""
    train = files.get("train")
    mixed_train = bool(train) and isinstance(train[0], Source)
    if epoch_size is not None:
        check_int(epoch_size, "epoch_size", 1)
        if not mixed_train or train[0].weight is None:
            raise ValueError(
                f"epoch_size={epoch_size!r} splits an epoch between weighted sources: give "
                "train_files=[Source(..., weight=...), ...] (or leave epoch_size unset)."
            )
    check_string(source_key, "source_key", "a field name or None", allow_none=True)
    for split, given in files.items():
        weighted = given and any(
            getattr(s, "weight", None) is not None or getattr(s, "repeat", None) is not None
            for s in given
        )
        if split != "train" and weighted and isinstance(given[0], Source):
            raise ValueError(
                f"{split}_files: every source of an evaluation split is read once; drop "
                "weight= and repeat= there."
            )


def stream_work(files: dict[str, Any]) -> str:
    """The kind of work of a stream's loaders for ``num_workers="auto"``: ``"io"`` when some
    shards are remote (the workers mostly wait on the network), else ``"decode"`` (parsing
    records is CPU work, as decoding images is)."""
    for given in files.values():
        for item in given or ():
            paths = item.files if isinstance(item, Source) else item
            for path in [paths] if isinstance(paths, str) else paths:
                if is_remote(str(path)):
                    return "io"
    return "decode"
