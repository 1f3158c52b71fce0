"""The parts a stream DataModule is assembled from, built from its arguments in one place.

:func:`stream_parts` checks the remote options, keeps the credentials out of the saved
hyperparameters, and builds the :class:`~datamodules.stream_parts.splits.ShardSplits` and the
:class:`~datamodules.stream_parts.loaders.StreamLoaders` over them, so that every stream
DataModule (:class:`~datamodules.StreamingDataModule`, :class:`~datamodules.ImageTextDataModule`)
holds the same parts built the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from datamodules.remote.credentials import restored_storage_options, save_without_credentials
from datamodules.remote.retrying import RemoteOptions
from datamodules.stream_parts.arguments import remote_options
from datamodules.stream_parts.loaders import StreamLoaders
from datamodules.stream_parts.splits import ShardSplits

__all__ = ["stream_parts"]


def stream_parts(
    dm: Any,
    files: dict[str, Any],
    storage_options: Any,
    retries: Any,
    timeout: Any,
    cache_dir: Any,
    cache_limit: Any,
    prefetch_shards: Any,
    *,
    shuffle_buffer: int,
    on_error: str,
    fmt: str | None = None,
    columns: list[str] | None = None,
    index_cache: Any = None,
    epoch_size: int | None = None,
    source_key: str | None = None,
    eval_per_source: bool = False,
    count_records: Callable[[str], int] | None = None,
) -> tuple[RemoteOptions, ShardSplits, StreamLoaders]:
    """``(remote options, splits, loaders)`` of a stream DataModule ``dm``.

    Also sets ``dm.cache_dir``, ``dm.cache_limit`` (in bytes) and ``dm.prefetch_shards``, and
    saves ``storage_options`` without credentials in ``dm.hparams``
    (:mod:`datamodules.remote.credentials`).

    Raises:
        TypeError, ValueError: A bad remote option, naming it and what is accepted.
    """
    storage_options = restored_storage_options(storage_options)
    remote, limit = remote_options(
        storage_options, retries, timeout, cache_dir, cache_limit, prefetch_shards
    )
    save_without_credentials(dm, storage_options)
    dm.cache_dir, dm.cache_limit, dm.prefetch_shards = cache_dir, limit, prefetch_shards
    splits = ShardSplits(
        type(dm).__name__, files, remote=remote, fmt=fmt, on_error=on_error, columns=columns,
        index_cache=index_cache, epoch_size=epoch_size, skipped=dm._skips,
        count_records=count_records,
    )  # fmt: skip
    loaders = StreamLoaders(
        splits, shuffle_buffer=shuffle_buffer, cache_dir=cache_dir, cache_limit=limit,
        prefetch_shards=prefetch_shards, source_key=source_key, eval_per_source=eval_per_source,
    )  # fmt: skip
    return remote, splits, loaders
