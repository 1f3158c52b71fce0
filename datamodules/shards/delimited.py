"""CSV and TSV shards: one dict per row, keyed by the header row; every value a string.

Blank lines are not records; quoted fields may span lines; a row with another number of fields
than the header is a bad record (:mod:`~datamodules.shards.lines` has the rules every line
format shares). ``.csv`` is comma-separated, ``.tsv`` tab-separated.
"""

from __future__ import annotations

import csv

from datamodules.core.skipped import Skipped
from datamodules.remote.retrying import RemoteOptions
from datamodules.shards.errors import RecordError
from datamodules.shards.lines import ShardLines, bad_record, decoded_lines

__all__ = ["DELIMITERS", "csv_header", "csv_rows", "header_row"]

#: The field delimiter of each delimited format.
DELIMITERS = {"csv": ",", "tsv": "\t"}


def csv_rows(
    lines: ShardLines,
    on_error: str,
    counter: Skipped | None,
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
            continue  # a blank line (as _blank says; inlined, as this runs per row)
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
        found = header_row(lines, delimiter)
        return None if found is None else found[1]
    finally:
        lines.close()


def header_row(lines: ShardLines, delimiter: str = ",") -> tuple[int, list[str]] | None:
    """``(line, header)``: the first non-blank row of the lines, or None when there is none.

    The lines are left at the row after it, so :func:`csv_rows` given the header reads on
    from there (a reader that checks the header before the rows opens the shard once).

    Raises:
        RecordError: The header row is not UTF-8 or not CSV, naming its line.
    """
    bad: list[tuple[int, str]] = []
    reader = csv.reader(decoded_lines(lines, bad), delimiter=delimiter)
    while True:
        line = lines.line + 1
        try:
            row = next(reader)
        except StopIteration:
            return None
        except csv.Error as err:
            raise RecordError(lines.path, line, f"header: malformed CSV: {err}") from None
        if bad:
            raise RecordError(lines.path, bad[0][0], f"header: {bad[0][1]}")
        if not _blank(row):
            return line, row


def _blank(row: list[str]) -> bool:
    """A row of a blank line (empty, or only whitespace): not a record, the rule of
    :mod:`~datamodules.shards.lines` (``"  "`` is a row of one field to :mod:`csv`)."""
    return not row or (len(row) == 1 and row[0].isspace() and row[0].isascii())
