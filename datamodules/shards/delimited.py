"""CSV and TSV shards: one dict per row, keyed by the header row; every value a string.

Blank lines are not records; quoted fields may span lines; a row with another number of fields
than the header is a bad record (:mod:`~datamodules.shards.lines` has the rules every line
format shares). ``.csv`` is comma-separated, ``.tsv`` tab-separated.
"""

from __future__ import annotations

import csv

from datamodules.remote.retrying import RemoteOptions
from datamodules.shards.errors import RecordError, SkipCounter
from datamodules.shards.lines import ShardLines, bad_record, decoded_lines

__all__ = ["DELIMITERS", "csv_header", "csv_rows"]

#: The field delimiter of each delimited format.
DELIMITERS = {"csv": ",", "tsv": "\t"}


def csv_rows(
    lines: ShardLines,
    on_error: str,
    counter: SkipCounter | None,
    check: int = 0,
    header: list[str] | None = None,
    delimiter: str = ",",
):
    """CSV rows as dicts; the first non-blank row is the header unless ``header`` is given."""
    bad: list[tuple[int, str]] = []
    reader = csv.reader(decoded_lines(lines, bad), delimiter=delimiter)
    while True:
        line, offset = lines.line + 1, lines.pos  # csv.reader never reads ahead of a row
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            bad_record(lines.path, line, f"malformed CSV: {err}", on_error, counter)
            continue
        if bad:
            bad_record(lines.path, *bad.pop(), on_error, counter)
            continue
        if not row or (len(row) == 1 and row[0].isspace() and row[0].isascii()):
            continue  # a blank line: csv reads a line of only whitespace as one field
        if header is None:
            header = row
            continue
        if len(row) != len(header):
            reason = f"expected {len(header)} fields (as in the header), found {len(row)}"
            bad_record(lines.path, line, reason, on_error, counter)
            continue
        if check:
            check -= 1
            continue
        yield line, offset, dict(zip(header, row, strict=False))


def csv_header(
    path: str,
    compression: str | None,
    options: RemoteOptions | None = None,
    delimiter: str = ",",
) -> list[str] | None:
    """The header row of a CSV / TSV shard (its first non-blank row), or None when it has none."""
    lines = ShardLines(path, compression, options=options)
    try:
        bad: list[tuple[int, str]] = []
        for row in csv.reader(decoded_lines(lines, bad), delimiter=delimiter):
            if bad:
                raise RecordError(path, bad[0][0], f"header: {bad[0][1]}")
            if row and not (len(row) == 1 and row[0].isspace() and row[0].isascii()):
                return row
        return None
    finally:
        lines.close()
