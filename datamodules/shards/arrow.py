"""Arrow IPC shards (``.arrow``) and Hugging Face ``save_to_disk`` folders.

An ``.arrow`` file is read through pyarrow in either of Arrow's IPC formats: the *stream*
format, which ``datasets.Dataset.save_to_disk`` writes (one ``data-0000K-of-0000N.arrow`` file
per shard), and the *file* format (``pyarrow.ipc.new_file``, Feather v2), told apart by the
file format's ``ARROW1`` magic. A local file is memory-mapped, so counting its rows and
skipping to a record read only metadata; a remote one is read through the remote layer
(:func:`~datamodules.remote.files.open_seekable_remote`).

:func:`read_arrow_batches` yields the rows ``[start, stop)`` as record batches of at most
4096 rows, the columns a stream gathers batches from, as Parquet's are; :func:`read_arrow`
the same rows as dicts; :func:`arrow_shape` the row count and column names the index keeps,
:func:`arrow_columns` the column names alone.

:func:`saved_dataset_files` reads a ``save_to_disk`` folder: its ``state.json`` names its data
files in order, so that the folder given where files are expected is the list of its shards.
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Iterator, Sequence
from typing import Any

from datamodules.remote.files import is_remote, local_path, open_seekable_remote
from datamodules.remote.retrying import RemoteOptions
from datamodules.shards.errors import ShardError

__all__ = [
    "BATCH_ROWS",
    "arrow_columns",
    "arrow_shape",
    "read_arrow",
    "read_arrow_batches",
    "saved_dataset_files",
]

#: The most rows of one record batch yielded (larger ones are sliced, as Parquet's are).
BATCH_ROWS = 4096
_FILE_MAGIC = b"ARROW1"


class _Opened:
    """An Arrow IPC shard opened for reading: ``batches()`` yields its record batches."""

    def __init__(self, path: str, options: RemoteOptions | None) -> None:
        import pyarrow as pa

        self.path = path
        try:
            if is_remote(path):
                self.source: Any = open_seekable_remote(path, options)
            else:
                self.source = pa.memory_map(local_path(path), "r")
            head = self.source.read(len(_FILE_MAGIC))
            self.source.seek(0)
            if head == _FILE_MAGIC:
                self.file: Any = pa.ipc.open_file(self.source)
                self.schema = self.file.schema
            else:
                self.file = None
                self.stream = pa.ipc.open_stream(self.source)
                self.schema = self.stream.schema
        except Exception as err:
            self.close()
            raise ShardError(
                path, None, f"cannot open Arrow shard ({type(err).__name__}: {err})"
            ) from err

    def batches(self) -> Iterator[Any]:
        try:
            if self.file is not None:
                for k in range(self.file.num_record_batches):
                    yield self.file.get_batch(k)
            else:
                yield from self.stream
        except Exception as err:
            raise ShardError(
                self.path, None, f"cannot read Arrow record batches ({type(err).__name__}: {err})"
            ) from err

    def close(self) -> None:
        source = getattr(self, "source", None)
        if source is not None:
            source.close()


def arrow_columns(path: str, options: RemoteOptions | None = None) -> list[str]:
    """The column names of an Arrow IPC shard (its schema only).

    Raises:
        ShardError: The file cannot be opened as Arrow IPC, naming it.
    """
    opened = _Opened(path, options)
    opened.close()
    return list(opened.schema.names)


def arrow_shape(path: str, options: RemoteOptions | None = None) -> tuple[int, tuple[str, ...]]:
    """``(rows, column names)`` of an Arrow IPC shard.

    Raises:
        ShardError: The file cannot be opened or read as Arrow IPC, naming it.
    """
    opened = _Opened(path, options)
    try:
        return sum(b.num_rows for b in opened.batches()), tuple(opened.schema.names)
    finally:
        opened.close()


def read_arrow_batches(
    path: str,
    start: int = 0,
    stop: int | None = None,
    columns: Sequence[str] | None = None,
    options: RemoteOptions | None = None,
) -> Iterator[Any]:
    """Yields the rows ``[start, stop)`` of an Arrow IPC shard as record batches of at most
    :data:`BATCH_ROWS` rows (only ``columns``, when given).

    Raises:
        ShardError: The file cannot be read, or lacks one of ``columns``, naming it.
    """
    opened = _Opened(path, options)
    try:
        if columns is not None:
            missing = [c for c in columns if c not in opened.schema.names]
            if missing:
                raise ShardError(
                    path, None, f"no column(s) {missing}; its columns are {opened.schema.names}"
                )
        row = 0
        for batch in opened.batches():
            first, row = row, row + batch.num_rows
            if row <= start:
                continue  # memory-mapped: a batch skipped is not read
            if stop is not None and first >= stop:
                return
            lo = max(start - first, 0)
            hi = batch.num_rows if stop is None else min(batch.num_rows, stop - first)
            if columns is not None:
                batch = batch.select(list(columns))
            for at in range(lo, hi, BATCH_ROWS):
                yield batch.slice(at, min(BATCH_ROWS, hi - at))
    finally:
        opened.close()


def read_arrow(
    path: str,
    start: int = 0,
    stop: int | None = None,
    columns: Sequence[str] | None = None,
    options: RemoteOptions | None = None,
) -> Iterator[dict[str, Any]]:
    """Yields the rows ``[start, stop)`` of an Arrow IPC shard as dicts."""
    for batch in read_arrow_batches(path, start, stop, columns, options):
        yield from batch.to_pylist()


def _remote_json(url: str, options: RemoteOptions | None) -> Any | None:
    """The parsed JSON file at ``url``, or None where it cannot be read (not there)."""
    try:
        with open_seekable_remote(url, options) as file:
            return json.loads(file.read())
    except (OSError, ValueError):
        return None


def _remote_saved_files(folder: str, options: RemoteOptions | None) -> list[str] | None:
    """:func:`saved_dataset_files` of a URL without an extension (two small reads at most)."""
    base = folder.rstrip("/")
    if posixpath.splitext(base)[1]:
        return None  # a file's URL
    state = _remote_json(f"{base}/state.json", options)
    if state is None:
        splits = _remote_json(f"{base}/dataset_dict.json", options)
        if isinstance(splits, dict) and splits.get("splits"):
            named = ", ".join(repr(f"{base}/{s}") for s in splits["splits"])
            raise ValueError(
                f"{folder!r} is a saved DatasetDict: give the folder of one of its splits "
                f"({named})."
            )
        return None
    try:
        files = [entry["filename"] for entry in state["_data_files"]]
    except (KeyError, TypeError) as err:
        raise ValueError(
            f"{base}/state.json: not the state.json of a saved dataset ({type(err).__name__}: "
            f"{err}); expected its '_data_files'."
        ) from None
    if not files:
        raise ValueError(f"{base}/state.json: the saved dataset names no data files.")
    return [f"{base}/{name}" for name in files]


def saved_dataset_files(folder: str, options: RemoteOptions | None = None) -> list[str] | None:
    """The data files of a ``datasets`` ``save_to_disk`` folder, in order (its
    ``state.json``'s ``_data_files``), local or a URL (read with ``options``); None for any
    other path.

    Raises:
        ValueError: The folder holds a ``DatasetDict`` (one folder per split: name one), or
            its ``state.json`` does not say its data files.
    """
    if is_remote(folder):
        return _remote_saved_files(folder, options)
    if not os.path.isdir(local_path(folder)):
        return None
    root = local_path(folder)
    if os.path.isfile(os.path.join(root, "dataset_dict.json")):
        splits = sorted(
            name
            for name in os.listdir(root)
            if os.path.isfile(os.path.join(root, name, "state.json"))
        )
        named = ", ".join(repr(os.path.join(folder, s)) for s in splits)
        raise ValueError(
            f"{folder!r} is a saved DatasetDict: give the folder of one of its splits ({named})."
        )
    state = os.path.join(root, "state.json")
    if not os.path.isfile(state):
        return None
    try:
        with open(state) as f:
            files = [entry["filename"] for entry in json.load(f)["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(
            f"{state}: not the state.json of a saved dataset ({type(err).__name__}: {err}); "
            "expected its '_data_files'."
        ) from None
    if not files:
        raise ValueError(f"{state}: the saved dataset names no data files.")
    return [os.path.join(folder, name) for name in files]
