"""Reading Parquet shards a row group at a time, never the whole file.

:class:`parquet_file` opens a local or remote Parquet file as a pyarrow ``ParquetFile``;
:func:`read_parquet` yields the rows ``[start, stop)`` as dicts, reading only the row groups
that hold them; :func:`read_parquet_batches` the same rows as Arrow record batches (columns),
and :func:`parquet_batches` those of a file already open.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from datamodules.remote.files import is_remote, local_path, open_seekable_remote
from datamodules.remote.retrying import RemoteOptions
from datamodules.shards.errors import ShardError

__all__ = ["parquet_batches", "parquet_file", "preload", "read_parquet", "read_parquet_batches"]


class parquet_file:
    """Context manager: a pyarrow ParquetFile over a local path or an fsspec file."""

    def __init__(self, path: str, options: RemoteOptions | None = None) -> None:
        self.path = path
        self.options = options
        self.handle: Any = None

    def __enter__(self) -> Any:
        import pyarrow.parquet as pq

        try:
            if is_remote(self.path):
                self.handle = open_seekable_remote(self.path, self.options)
                return pq.ParquetFile(self.handle)
            return pq.ParquetFile(local_path(self.path))
        except Exception as err:
            if self.handle is not None:
                self.handle.close()
            raise ShardError(
                self.path, None, f"cannot open Parquet shard ({type(err).__name__}: {err})"
            ) from err

    def __exit__(self, *exc: Any) -> None:
        if self.handle is not None:
            self.handle.close()


def preload() -> None:
    """Imports what reading a Parquet shard uses (pyarrow's Parquet reader), for a process
    that forks workers to do it before it forks."""
    import pyarrow.parquet  # noqa: F401


def read_parquet(
    path: str,
    start: int,
    stop: int | None,
    columns: Sequence[str] | None,
    options: RemoteOptions | None = None,
):
    """Yields the rows ``[start, stop)`` of a Parquet shard as dicts (only their row groups)."""
    for batch in read_parquet_batches(path, start, stop, columns, options):
        yield from batch.to_pylist()


def read_parquet_batches(
    path: str,
    start: int,
    stop: int | None,
    columns: Sequence[str] | None,
    options: RemoteOptions | None = None,
):
    """Yields the rows ``[start, stop)`` of a Parquet shard as Arrow record batches (only
    their row groups are read)."""
    with parquet_file(path, options) as pf:
        yield from parquet_batches(pf, path, start, stop, columns)


def parquet_batches(
    pf: Any,
    path: str,
    start: int = 0,
    stop: int | None = None,
    columns: Sequence[str] | None = None,
):
    """:func:`read_parquet_batches` of a file already open (a :class:`parquet_file`), for a
    reader that looks at its schema before it picks the columns: record batches of at most
    4096 rows, an error naming ``path``."""
    meta = pf.metadata
    stop = meta.num_rows if stop is None else min(stop, meta.num_rows)
    if start >= stop:
        return
    first, row = 0, 0
    groups = []
    for g in range(meta.num_row_groups):
        n = meta.row_group(g).num_rows
        if row + n > start and row < stop:
            if not groups:
                first = row
            groups.append(g)
        row += n
    skip, left = start - first, stop - start
    try:
        for batch in pf.iter_batches(
            batch_size=4096, row_groups=groups, columns=columns, use_threads=False
        ):
            if skip >= batch.num_rows:
                skip -= batch.num_rows
                continue
            if skip or batch.num_rows - skip > left:
                batch = batch.slice(skip, left)
                skip = 0
            left -= batch.num_rows
            yield batch
            if left <= 0:
                return
    except ShardError:
        raise
    except Exception as err:
        raise ShardError(
            path, None, f"cannot read Parquet row groups ({type(err).__name__}: {err})"
        ) from err
