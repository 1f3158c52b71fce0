"""Reading a shard's records ``[start, stop)``, whatever its format: the shard layer's entry.

:func:`read_records` yields records (dicts, JSON values, strings); :func:`read_blocks` yields
the records of a JSONL or Parquet shard as blocks of columns, for the columnar path of streams.
Both read only what they must: with a :class:`~datamodules.shards.shard_index.ShardIndex`, an
uncompressed line shard is opened at a kept offset close before ``start``; Parquet skips whole
row groups; tar seeks to a record's first member; compressed shards decompress from the start.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from datamodules.core.skipped import Skipped
from datamodules.remote.retrying import RemoteOptions
from datamodules.shards.arrow import read_arrow, read_arrow_batches
from datamodules.shards.delimited import DELIMITERS, csv_header, csv_rows
from datamodules.shards.errors import OnError, RecordError, ShardError, check_on_error
from datamodules.shards.formats import TABLE_FORMATS, detect_format
from datamodules.shards.jsonl import json_reason, jsonl_blocks, read_jsonl
from datamodules.shards.lines import ShardLines, cannot_read_past, stop_at_damage
from datamodules.shards.parquet import read_parquet, read_parquet_batches
from datamodules.shards.tar import read_tar
from datamodules.shards.txt import read_txt

if TYPE_CHECKING:
    from datamodules.shards.shard_index import ShardIndex

__all__ = ["COLUMNAR", "read_blocks", "read_records"]

_third = itemgetter(2)


def read_records(
    path: str,
    fmt: str | None = None,
    on_error: OnError = "raise",
    start: int = 0,
    stop: int | None = None,
    index: ShardIndex | None = None,
    counter: Skipped | None = None,
    columns: Sequence[str] | None = None,
    options: RemoteOptions | None = None,
) -> Iterator[Any]:
    """Yields the records ``[start, stop)`` of a shard, reading only what it must.

    Record ``i`` is the ``i``-th record a full read yields under ``on_error`` (so under
    ``"skip"`` bad records do not take a position). With an ``index`` from
    :func:`index_shard` a reader of an uncompressed line format seeks close to ``start``;
    Parquet skips whole row groups; compressed shards decompress from the beginning.

    Args:
        path: Path or URL.
        fmt: Format; inferred from the extension if None.
        on_error: ``"raise"`` or ``"skip"`` bad records.
        start: First record.
        stop: One past the last record (None: to the end).
        index: The shard's index (same ``on_error``), for seeking.
        counter: Receives skipped records.
        columns: Parquet and Arrow only: the columns to read (None: all).
        options: How remote shards are opened: storage options, retries, timeout.

    Yields:
        dicts (JSON objects, CSV rows, Parquet and Arrow rows, tar records), any JSON value, or
        strings (text).

    Raises:
        RecordError: A bad record under ``"raise"``.
        ShardError: The shard cannot be opened or decoded.
    """
    check_on_error(on_error)
    fmt, compression = detect_format(path, fmt)
    if start < 0 or (stop is not None and stop < start):
        raise ValueError(f"read_records({path!r}): bad range start={start}, stop={stop}.")
    if stop == start:
        return
    if fmt == "parquet":
        yield from read_parquet(path, start, stop, columns, options)
        return
    if fmt == "arrow":
        yield from read_arrow(path, start, stop, columns, options)
        return
    if fmt == "tar":
        yield from read_tar(path, compression, on_error, start, stop, index, counter, options)
        return
    lines, skip, header = _lines_at(path, fmt, compression, on_error, start, index, options)
    try:
        n = None if stop is None else stop - start
        if fmt in DELIMITERS:
            rows = csv_rows(lines, on_error, counter, skip, header, DELIMITERS[fmt])
            yield from islice(map(_third, rows), n)
        else:
            reader = read_jsonl if fmt == "jsonl" else read_txt
            yield from islice(reader(lines, on_error, counter, skip), n)
    except ShardError as error:  # damage past a line (CSV: the other formats stop in the reader)
        if not stop_at_damage(error, on_error, counter):
            raise
    finally:
        lines.close()


def _lines_at(
    path: str,
    fmt: str,
    compression: str | None,
    on_error: str,
    start: int,
    index: ShardIndex | None,
    options: RemoteOptions | None,
) -> tuple[ShardLines, int, list[str] | None]:
    """A line shard opened as close before record ``start`` as its index allows: the lines,
    the records left to skip, and the CSV header when the read starts past it."""
    if index is not None and index.on_error != on_error:
        raise ValueError(
            f"the index of {path!r} was made with on_error={index.on_error!r}, not "
            f"{on_error!r}; the record positions differ."
        )
    offset, line, skip = 0, 0, start
    header = None
    if index is not None and index.every and start >= index.every and index.offsets:
        slot = min(start // index.every, len(index.offsets) - 1)
        offset, line = index.offsets[slot], index.lines[slot] - 1
        skip = start - slot * index.every
        if fmt in DELIMITERS:
            header = csv_header(path, compression, options, DELIMITERS[fmt])
    size = getattr(index, "size", None)  # spares a remote read the wait for its first answer
    return ShardLines(path, compression, offset, line, options, size), skip, header


#: The formats whose records a stream can read as columns (:func:`read_blocks`).
COLUMNAR = ("jsonl", "parquet", "arrow")


def read_blocks(
    path: str,
    fmt: str | None = None,
    on_error: OnError = "raise",
    start: int = 0,
    stop: int | None = None,
    index: ShardIndex | None = None,
    counter: Skipped | None = None,
    columns: Sequence[str] | None = None,
    options: RemoteOptions | None = None,
) -> Iterator[tuple[Any, list[Any] | None]]:
    """The records ``[start, stop)`` of a Parquet, Arrow or JSONL shard in blocks of consecutive
    records: ``(arrow table, None)``, or ``(None, records)`` for a JSONL block that only reads
    exactly line by line (see :mod:`~datamodules.shards.jsonl`). The same records,
    positions and errors as :func:`read_records`.
    """
    check_on_error(on_error)
    fmt, compression = detect_format(path, fmt)
    if fmt not in COLUMNAR:
        raise ValueError(f"read_blocks({path!r}): {fmt} shards are read as records.")
    if start < 0 or (stop is not None and stop < start):
        raise ValueError(f"read_blocks({path!r}): bad range start={start}, stop={stop}.")
    if stop == start:
        return
    if fmt in TABLE_FORMATS:
        read = read_parquet_batches if fmt == "parquet" else read_arrow_batches
        for batch in read(path, start, stop, columns, options):
            yield batch, None
        return
    lines, skip, _ = _lines_at(path, fmt, compression, on_error, start, index, options)
    try:
        n = None if stop is None else stop - start
        yield from jsonl_blocks(lines, on_error, counter, skip, n, json_reason)
    except ShardError as error:
        if not stop_at_damage(error, on_error, counter):
            raise
    except RecordError:
        raise
    except Exception as err:  # a corrupt or truncated stream, a dropped connection
        error = cannot_read_past(path, lines.line + 1, err)
        if not stop_at_damage(error, on_error, counter):
            raise error from err
    finally:
        lines.close()
