"""Whole files as Arrow tables of chosen columns, for readers that want columns, not records.

:func:`read_table` reads a Parquet, Arrow IPC, CSV or TSV file (local or remote, compressed
CSV too) into a ``pyarrow.Table`` holding only ``columns``: what a columnar consumer (the
time-series store) needs, with the file named when a column is missing. Parquet and Arrow go
through :mod:`~datamodules.shards.parquet` and :mod:`~datamodules.shards.arrow`; CSV / TSV is
parsed by pyarrow's CSV reader (types inferred per column), opened as every shard is opened.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from datamodules.remote.retrying import RemoteOptions
from datamodules.shards.errors import ShardError
from datamodules.shards.formats import detect_format

__all__ = ["TABLE_READS", "read_table"]

#: The formats :func:`read_table` reads.
TABLE_READS = ("parquet", "arrow", "csv", "tsv")


def _check_columns(path: str, have: Sequence[str], wanted: Sequence[str]) -> None:
    missing = [c for c in wanted if c not in have]
    if missing:
        raise ValueError(
            f"column {missing[0]!r} is not in {path}: its columns are {list(have)}; name an "
            "existing column."
        )


def read_table(path: str, columns: Sequence[str], options: RemoteOptions | None = None) -> Any:
    """The ``columns`` of a whole file as a ``pyarrow.Table``.

    Raises:
        ValueError: A column is missing (naming the file and its columns), or the file is
            not one of :data:`TABLE_READS`.
        ShardError: The file cannot be read.
    """
    import pyarrow as pa

    fmt, compression = detect_format(path)
    columns = list(columns)
    if fmt == "parquet":
        from datamodules.shards.parquet import parquet_batches, parquet_file

        with parquet_file(path, options) as pf:
            _check_columns(path, pf.schema_arrow.names, columns)
            batches = list(parquet_batches(pf, path, columns=columns))
            schema = pa.schema([pf.schema_arrow.field(c) for c in columns])
            return pa.Table.from_batches(batches, schema=schema)
    if fmt == "arrow":
        from datamodules.shards.arrow import arrow_columns, read_arrow_batches

        _check_columns(path, arrow_columns(path, options), columns)
        return pa.Table.from_batches(
            list(read_arrow_batches(path, columns=columns, options=options))
        )
    if fmt in ("csv", "tsv"):
        import pyarrow.csv as pacsv

        from datamodules.remote.files import decompress, open_binary

        try:
            with decompress(open_binary(path, 0, options), compression) as handle:
                parse = pacsv.ParseOptions(delimiter="," if fmt == "csv" else "\t")
                table = pacsv.read_csv(handle, parse_options=parse)
        except (OSError, pa.ArrowInvalid) as err:
            raise ShardError(path, None, f"cannot read {fmt.upper()} ({err})") from err
        _check_columns(path, table.column_names, columns)
        return table.select(columns)
    raise ValueError(f"{path!r} is a {fmt} file; tables are read from {', '.join(TABLE_READS)}.")
