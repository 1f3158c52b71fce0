"""Shard formats: finding shards, telling their format, and reading their records.

A *shard* is one file of records. This module turns shards into records and knows how many
records each holds, which is what :class:`~datamodules.streaming.stream.ShardedStream` needs to
deliver every record exactly once:

* :func:`expand_files` turns a glob, a directory or a list of paths/URLs into a list of shards.
* :func:`~datamodules.streaming.index.index_shard` (in :mod:`datamodules.streaming.index`)
  counts the records of a shard and remembers where to seek.
* :func:`read_records` yields the records ``[start, stop)`` of a shard.

Formats, chosen by extension (``.gz`` / ``.zst`` compression allowed for the line formats):

* ``.jsonl`` / ``.ndjson``: one JSON value per line; blank lines are not records.
* ``.txt``: one record per line, the line without its line break (blank lines are records).
* ``.csv``: one dict per row, keyed by the header row; every value is a string; blank lines are
  not records; quoted fields may span lines.
* ``.parquet``: one dict per row, read a row group at a time (never the whole file).
* ``.tar`` (``.tar.gz`` / ``.tgz`` / ``.tar.zst`` read from the beginning): WebDataset's
  records, members grouped by key (:mod:`datamodules.streaming.tar`).

Remote shards go through fsspec (``http(s)://``, ``s3://`` with s3fs installed, ...); opening
them is :mod:`datamodules.remote.files`, Parquet is :mod:`datamodules.streaming.parquet`.

Bad records (invalid JSON or UTF-8, a CSV row with the wrong number of fields) raise
:class:`RecordError` naming the shard and the line. With ``on_error="skip"`` they are skipped
instead and left out of the count, so counting and reading always agree; the index lists
them and a :class:`SkipCounter` collects them for a report. A shard that cannot be opened or
decoded raises :class:`ShardError`; under ``"skip"`` it is reported and holds no records.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from datamodules.remote.files import decompress, open_binary
from datamodules.remote.listing import expand_files as list_files
from datamodules.remote.retrying import RemoteOptions
from datamodules.streaming.errors import (
    OnError,
    RecordError,
    ShardError,
    SkipCounter,
    check_on_error,
)
from datamodules.streaming.jsonl_blocks import jsonl_blocks, parse_line
from datamodules.streaming.parquet import read_parquet, read_parquet_batches
from datamodules.streaming.tar import read_tar

if TYPE_CHECKING:
    from datamodules.streaming.shard_index import ShardIndex


__all__ = ["FORMATS", "detect_format", "expand_files", "read_records"]


FORMATS = ("jsonl", "txt", "csv", "parquet", "tar")
_EXTENSIONS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".txt": "txt",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".tar": "tar",
}
_COMPRESSIONS = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd"}


def detect_format(path: str, fmt: str | None = None) -> tuple[str, str | None]:
    """Returns ``(format, compression)`` of a shard from its extension.

    Args:
        path: Path or URL; a query string (``?...``) is ignored.
        fmt: Force the format (one of :data:`FORMATS`); compression is still inferred.

    Raises:
        ValueError: The extension (or ``fmt``) is not one of the supported formats.
    """
    name = str(path).split("?", 1)[0].lower()
    compression = None
    if name.endswith(".tgz"):
        name = name[:-4] + ".tar.gz"
    for ext, comp in _COMPRESSIONS.items():
        if name.endswith(ext):
            compression, name = comp, name[: -len(ext)]
            break
    if fmt is None:
        fmt = next((f for ext, f in _EXTENSIONS.items() if name.endswith(ext)), None)
        if fmt is None:
            raise ValueError(
                f"cannot tell the format of shard {path!r} from its extension: use one of "
                f"{', '.join(_EXTENSIONS)} (optionally + .gz or .zst), or pass fmt=."
            )
    elif fmt not in FORMATS:
        raise ValueError(f"fmt={fmt!r} is not accepted: use one of {FORMATS}.")
    if fmt == "parquet" and compression is not None:
        raise ValueError(f"shard {path!r}: Parquet compresses internally; drop the {compression}.")
    return fmt, compression


def expand_files(
    spec: str | os.PathLike | Iterable[str | os.PathLike], options: RemoteOptions | None = None
) -> list[str]:
    """Turns a shard specification into a list of shards (see
    :func:`datamodules.remote.listing.expand_files`); a directory gives its files with a
    supported extension."""
    return list_files(spec, options, known=_known)


def _known(path: str) -> bool:
    try:
        detect_format(path)
    except ValueError:
        return False
    return True


class ShardLines:
    """Binary lines of a (possibly compressed) shard, tracking byte offsets and line numbers.

    While a line is being handled, ``start`` is its byte offset, ``pos`` the offset of the
    next line and ``line`` its 1-based number.
    """

    def __init__(
        self,
        path: str,
        compression: str | None,
        offset: int = 0,
        line: int = 0,
        options: RemoteOptions | None = None,
    ):
        self.path = path
        try:
            self.raw = open_binary(path, offset, options)
            self.f = decompress(self.raw, compression)
        except Exception as err:
            raise ShardError(
                path, None, f"cannot open shard ({type(err).__name__}: {err})"
            ) from err
        self.start = self.pos = offset
        self.line = line

    def __iter__(self) -> Iterator[bytes]:
        try:
            for raw in self.f:
                self.start = self.pos
                self.pos += len(raw)
                self.line += 1
                yield raw
        except RecordError:
            raise
        except Exception as err:  # a corrupt or truncated stream, a dropped connection
            raise ShardError(
                self.path,
                self.line + 1,
                f"cannot read shard past this line ({type(err).__name__}: {err})",
            ) from err

    def close(self) -> None:
        self.f.close()
        self.raw.close()


# ---------------------------------------------------------------------------- parsing
# A reader's first ``check`` records are consumed without being yielded: they belong to
# another reader, which handles their errors, so under "raise" they are only told apart
# structurally, without parsing.


def _bad(path: str, line: int, reason: str, on_error: str, counter: SkipCounter | None) -> None:
    if on_error == "raise":
        raise RecordError(path, line, reason)
    if counter is not None:
        counter.record(path, line, reason)


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


def _decoded(lines: ShardLines, bad: list[tuple[int, str]]) -> Iterator[str]:
    for raw in lines:
        try:  # a byte-order mark may open the file
            yield raw.decode("utf-8-sig" if lines.start == 0 else "utf-8")
        except UnicodeDecodeError as err:
            bad.append((lines.line, f"invalid UTF-8: {err}"))
            yield "\n"


def csv_rows(
    lines: ShardLines,
    on_error: str,
    counter: SkipCounter | None,
    check: int = 0,
    header: list[str] | None = None,
):
    """CSV rows as dicts; the first non-blank row is the header unless ``header`` is given."""
    bad: list[tuple[int, str]] = []
    reader = csv.reader(_decoded(lines, bad))
    while True:
        line, offset = lines.line + 1, lines.pos  # csv.reader never reads ahead of a row
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            _bad(lines.path, line, f"malformed CSV: {err}", on_error, counter)
            continue
        if bad:
            _bad(lines.path, *bad.pop(), on_error, counter)
            continue
        if not row:
            continue
        if header is None:
            header = row
            continue
        if len(row) != len(header):
            reason = f"expected {len(header)} fields (as in the header), found {len(row)}"
            _bad(lines.path, line, reason, on_error, counter)
            continue
        if check:
            check -= 1
            continue
        yield line, offset, dict(zip(header, row, strict=False))


def csv_header(
    path: str, compression: str | None, options: RemoteOptions | None = None
) -> list[str] | None:
    lines = ShardLines(path, compression, options=options)
    try:
        bad: list[tuple[int, str]] = []
        for row in csv.reader(_decoded(lines, bad)):
            if bad:
                raise RecordError(path, bad[0][0], f"header: {bad[0][1]}")
            if row:
                return row
        return None
    finally:
        lines.close()


decode_json = json.JSONDecoder().decode
BOM = b"\xef\xbb\xbf"
_third = itemgetter(2)


def _read_jsonl(lines: ShardLines, on_error: str, counter: SkipCounter | None, check: int = 0):
    """JSONL records (blank lines are not records); line numbers only, for errors."""
    path, decode, line = lines.path, parse_line, lines.line
    try:
        for line, raw in enumerate(lines.f, lines.line + 1):  # noqa: B007
            if line == 1 and raw.startswith(BOM):
                raw = raw[3:]
            if raw.isspace() or not raw:
                continue
            if check and on_error == "raise":
                check -= 1
                continue
            try:
                rec = decode(raw)
            except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
                _bad(path, line, json_reason(err, raw), on_error, counter)
                continue
            if check:
                check -= 1
                continue
            yield rec
    except RecordError:
        raise
    except Exception as err:  # a corrupt or truncated stream, a dropped connection
        raise ShardError(path, line + 1, f"cannot read shard past this line ({err!r})") from err


def _read_txt(lines: ShardLines, on_error: str, counter: SkipCounter | None, check: int = 0):
    """Text records: each non-blank line without its line break (a line that is empty or only
    whitespace is not a record, as in TextDataModule's ``.txt`` files)."""
    path, line = lines.path, lines.line
    try:
        for line, raw in enumerate(lines.f, lines.line + 1):  # noqa: B007
            if line == 1 and raw.startswith(BOM):
                raw = raw[3:]
            if raw.isspace() or not raw:
                continue
            if check and on_error == "raise":
                check -= 1
                continue
            try:
                text = raw.decode()
            except UnicodeDecodeError as err:
                _bad(path, line, f"invalid UTF-8: {err}", on_error, counter)
                continue
            if check:
                check -= 1
                continue
            if text.endswith("\n"):
                text = text[:-2] if text.endswith("\r\n") else text[:-1]
            yield text
    except RecordError:
        raise
    except Exception as err:
        raise ShardError(path, line + 1, f"cannot read shard past this line ({err!r})") from err


def read_records(
    path: str,
    fmt: str | None = None,
    on_error: OnError = "raise",
    start: int = 0,
    stop: int | None = None,
    index: ShardIndex | None = None,
    counter: SkipCounter | None = None,
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
        columns: Parquet only: the columns to read (None: all).
        options: How remote shards are opened: storage options, retries, timeout.

    Yields:
        dicts (JSON objects, CSV rows, Parquet rows, tar records), any JSON value, or
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
    if fmt == "tar":
        yield from read_tar(path, compression, on_error, start, stop, index, counter, options)
        return
    lines, skip, header = _lines_at(path, fmt, compression, on_error, start, index, options)
    try:
        n = None if stop is None else stop - start
        if fmt == "csv":
            yield from islice(map(_third, csv_rows(lines, on_error, counter, skip, header)), n)
        else:
            reader = _read_jsonl if fmt == "jsonl" else _read_txt
            yield from islice(reader(lines, on_error, counter, skip), n)
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
        if fmt == "csv":
            header = csv_header(path, compression, options)
    return ShardLines(path, compression, offset, line, options), skip, header


#: The formats whose records a stream can read as columns (:func:`read_blocks`).
COLUMNAR = ("jsonl", "parquet")


def read_blocks(
    path: str,
    fmt: str | None = None,
    on_error: OnError = "raise",
    start: int = 0,
    stop: int | None = None,
    index: ShardIndex | None = None,
    counter: SkipCounter | None = None,
    columns: Sequence[str] | None = None,
    options: RemoteOptions | None = None,
) -> Iterator[tuple[Any, list[Any] | None]]:
    """The records ``[start, stop)`` of a Parquet or JSONL shard in blocks of consecutive
    records: ``(arrow table, None)``, or ``(None, records)`` for a JSONL block that only reads
    exactly line by line (see :mod:`~datamodules.streaming.jsonl_blocks`). The same records,
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
    if fmt == "parquet":
        for batch in read_parquet_batches(path, start, stop, columns, options):
            yield batch, None
        return
    lines, skip, _ = _lines_at(path, fmt, compression, on_error, start, index, options)
    line = lines.line
    try:
        n = None if stop is None else stop - start
        yield from jsonl_blocks(lines, on_error, counter, skip, n, json_reason)
    except RecordError:
        raise
    except Exception as err:  # a corrupt or truncated stream, a dropped connection
        line = lines.line
        raise ShardError(path, line + 1, f"cannot read shard past this line ({err!r})") from err
    finally:
        lines.close()
