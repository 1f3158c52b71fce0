"""JSONL read a few thousand lines at a time into columns, and one line at a time into records.

Which parser, measured on the records of ``benchmarks/bench_streaming.py`` (``{"id", "tokens":
~40 ints}``, one process, the 2-core machine): the standard library's ``json.loads`` 239k
lines/s; orjson 853k into Python objects, but 338-392k once they are turned into columns;
msgspec with a typed schema 449k into Python objects; pyarrow's JSON reader on one thread 377k
straight into Arrow columns, and 420k given the schema of the shard's previous block (tried
first, and dropped for a block it does not fit). pyarrow's reader wins for batches because it
parses into the columns a batch is gathered from (:mod:`~datamodules.stream_engine.columns`): no
Python object per record at all. It is also already installed with the streaming extra.

A block is accepted only where its columns say exactly what Python's ``json`` would (the batch
must equal the record path's): as many rows as lines (no line holding two objects), no null
(a missing key or ``null``), and types whose Python values are certain: ints, bools, strings,
lists of those, and floats that are not whole numbers (a whole number in a float column may
have been written ``2`` or ``2.0``, which Python reads as an int or a float). Any other block,
and a block with a bad line, is read line by line instead (:func:`parse_line`, orjson when it
is installed, else the standard library), which names a bad line by file, line and column
and, under ``on_error="skip"``, leaves it out: the block then holds records, and a batch that
touches it is collated from records.

:func:`parse_line` is also what the record path (``transform=``, ``collate=``) reads JSONL
with: orjson first, and the standard library where orjson refuses a line (``NaN``, lone
surrogates) or might read it otherwise (a number of 19 digits or more, which orjson may read as
a float outside 64 bits), so that every line reads as ``json.loads`` reads it.
:func:`numbered_jsonl` is that path with each record's line, for a reader that names records
by line (text).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Any

from datamodules.core.skipped import Skipped
from datamodules.shards.errors import RecordError
from datamodules.shards.lines import BOM, ShardLines, is_blank, line_records

__all__ = [
    "decode_json",
    "json_reason",
    "jsonl_blocks",
    "numbered_jsonl",
    "parse_line",
    "preload",
    "read_jsonl",
]

try:  # a faster parser of one line, when installed
    import orjson
except ImportError:  # pragma: no cover - the standard library reads every line then
    orjson = None

#: Lines parsed together into columns.
BLOCK_LINES = 2048
_decode = decode_json = json.JSONDecoder().decode
#: 19 digits or more: an integer orjson may read as a float outside 64 bits (Python's json
#: keeps it an int), so such a line goes to the standard library.
_LONG_NUMBER = re.compile(rb"\d{19}")
#: The schema of the last block of each shard (of the last few hundred) that parsed into
#: columns: a worker reads a shard in pieces, and the next piece tries it first.
_SCHEMAS: dict[str, Any] = {}
_SCHEMAS_KEPT = 512


def _remember_schema(path: str, schema: Any) -> None:
    if _SCHEMAS.get(path) is schema:
        return
    _SCHEMAS.pop(path, None)
    if len(_SCHEMAS) >= _SCHEMAS_KEPT:
        del _SCHEMAS[next(iter(_SCHEMAS))]
    _SCHEMAS[path] = schema


def preload() -> None:
    """Imports what :func:`parse_block` uses: pyarrow's JSON reader and compute functions."""
    import pyarrow.compute  # noqa: F401
    import pyarrow.json  # noqa: F401


def parse_line(raw: bytes) -> Any:
    """One JSONL record, exactly as ``json.loads`` reads it (orjson first, when installed).

    Raises:
        ValueError: ``json.JSONDecodeError`` or ``UnicodeDecodeError``, as ``json.loads``.
    """
    if orjson is not None and not _LONG_NUMBER.search(raw):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # the standard library decides: it accepts a few lines orjson refuses
    return _decode(raw.decode())


def _exact(table: Any, rows: int) -> bool:
    """Whether pyarrow's columns of a block are exactly what ``json`` would give."""
    import pyarrow.compute as pc
    import pyarrow.types as pt

    if table.num_rows != rows or not table.num_columns:
        return False
    for column in table.columns:
        if column.null_count:
            return False
        kind = column.type
        values = column
        if pt.is_list(kind):
            values = column.combine_chunks().flatten() if column.num_chunks else column
            kind = kind.value_type
            if values.null_count:
                return False
            if pt.is_null(kind):  # only empty lists
                continue
        if pt.is_floating(kind):
            if len(values) and pc.any(pc.equal(values, pc.floor(values))).as_py():
                return False  # a whole number: written as an int, or as a float?
        elif not (pt.is_int64(kind) or pt.is_boolean(kind) or pt.is_string(kind)):
            return False
    return True


def parse_block(
    raws: list[bytes],
    lines: Sequence[int],
    path: str,
    on_error: str,
    counter: Skipped | None,
    reason: Any,
    schema: Any = None,
) -> tuple[Any, list[Any] | None, Sequence[int]]:
    """``(table, None, lines)`` for a block pyarrow parses exactly, else ``(None, records,
    lines of the records)`` read line by line (bad lines raise or are left out).

    ``schema``, the schema of an earlier block of the shard, is tried first (pyarrow then
    only converts, which is faster than inferring the types); a block it does not fit is
    parsed again without it.
    """
    import pyarrow as pa
    import pyarrow.json as pj

    data = b"".join(raws)
    if not data.endswith(b"\n"):
        data += b"\n"
    options = pj.ReadOptions(use_threads=False, block_size=len(data) + 1)
    table = None
    if schema is not None:
        parse = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
        try:
            table = pj.read_json(io.BytesIO(data), read_options=options, parse_options=parse)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            table = None
    if table is None:
        try:
            table = pj.read_json(io.BytesIO(data), read_options=options)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            table = None
    if table is not None and _exact(table, len(raws)):
        return table, None, lines
    records, kept = [], []
    for number, raw in zip(lines, raws, strict=True):
        try:
            records.append(parse_line(raw))
        except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
            if on_error == "raise":
                raise RecordError(path, number, reason(err, raw)) from None
            if counter is not None:
                counter.record(path, number, reason(err, raw))
            continue
        kept.append(number)
    return None, records, kept


def jsonl_blocks(
    lines: Any,
    on_error: str,
    counter: Skipped | None,
    check: int,
    n: int | None,
    reason: Any,
) -> Iterator[tuple[Any, list[Any] | None]]:
    """The records of a JSONL shard's lines as blocks, after skipping ``check`` records, at
    most ``n``: ``(table, None)`` or ``(None, records)``, tables sliced to what is wanted.

    ``lines`` is a :class:`~datamodules.shards.lines.ShardLines`; blank lines are not
    records; positions are those of :func:`~datamodules.shards.records.read_records`.
    """
    path = lines.path
    f = lines.f
    number = lines.line  # the number of the last line read
    if check:  # records before the range: counted as the record reader counts them
        for raw in f:
            number += 1
            if number == 1 and raw.startswith(BOM):
                raw = raw[3:]
            if is_blank(raw):
                continue
            if on_error != "raise":
                try:
                    parse_line(raw)
                except ValueError as err:
                    if counter is not None:
                        counter.record(path, number, reason(err, raw))
                    continue
            check -= 1
            if not check:
                break
        lines.line = number
    left = n
    schema = _SCHEMAS.get(path)  # of the last block of this shard parsed into columns
    while left is None or left > 0:
        raws = list(islice(f, BLOCK_LINES if left is None else min(BLOCK_LINES, left)))
        if not raws:
            break
        first = number + 1
        number += len(raws)
        lines.line = number
        if first == 1 and raws[0].startswith(BOM):
            raws[0] = raws[0][3:]
        numbers: Sequence[int] = range(first, number + 1)
        if not raws[0] or any(map(bytes.isspace, raws)):  # blank lines are not records
            numbers = [i for i, raw in zip(numbers, raws, strict=True) if raw and not raw.isspace()]
            raws = [raw for raw in raws if raw and not raw.isspace()]
            if not raws:
                continue
        block, left, schema = _emit(raws, numbers, path, on_error, counter, reason, left, schema)
        if schema is not None:
            _remember_schema(path, schema)
        if block is not None:
            yield block


def _emit(raws, numbers, path, on_error, counter, reason, left, schema):
    table, records, _ = parse_block(raws, numbers, path, on_error, counter, reason, schema)
    rows = table.num_rows if table is not None else len(records)
    if table is not None:
        schema = table.schema
    if left is not None and rows > left:
        if table is not None:
            table = table.slice(0, left)
        else:
            records = records[:left]
        rows = left
    left = None if left is None else left - rows
    if not rows:
        return None, left, schema
    return (table, records), left, schema


def json_reason(err: ValueError, raw: bytes) -> str:
    """Why a JSONL line does not parse, with the column of the error within the line.

    The line's break is not part of the record: an error at its end (a missing ``}``) is
    reported at the last column, not at "column 1" of the next line, as ``json.loads`` of the
    line with its ``\n`` would say.
    """
    if not isinstance(err, json.JSONDecodeError):
        return f"invalid JSON: {err}"
    try:
        decode_json(raw.decode().rstrip("\r\n"))
    except json.JSONDecodeError as bare:
        err = bare
    except ValueError:
        pass
    return f"invalid JSON: {err.msg} (column {err.colno})"


def read_jsonl(lines: ShardLines, on_error: str, counter: Skipped | None, check: int = 0):
    """JSONL records (blank lines are not records); line numbers only, for errors."""
    return line_records(lines, on_error, counter, check, parse_line, json_reason)


def numbered_jsonl(
    lines: ShardLines, on_error: str = "raise", counter: Skipped | None = None
) -> Iterator[tuple[int, Any]]:
    """``(line, record)``: the records of :func:`read_jsonl`, each with its 1-based line, for a
    reader that names a record by where it is in the file (text does)."""
    return line_records(lines, on_error, counter, 0, parse_line, json_reason, numbered=True)
