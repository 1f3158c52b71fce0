"""Errors that name the record a batch failed on: its shard, its line or row, its source.

A stream worker makes a batch from records of several shards, shuffled. When ``transform``
raises on a record, or the collate cannot put the records of a batch together (a ragged
nested list, records with other keys, a string where a number was), the error the user sees
names the record, not "sample 2 of the batch":

``data/code.parquet, row 17 (source 'code'): field 'x': ... Every record of a batch needs the
same fields, of matching kinds: choose the fields with columns= (Parquet), make the records
alike with transform=, or batch them your own way with collate=.``

The stream carries each record with its shard and its position in the shard (no cost beyond
a tuple); only on failure is the line of a text record found, by scanning its shard from the
nearest indexed offset, and the failing record of a batch found, by collating growing
prefixes of the batch (the first prefix that fails ends with it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from datamodules.core.skipped import Skipped
from datamodules.shards.delimited import csv_header, csv_rows
from datamodules.shards.formats import TABLE_FORMATS
from datamodules.shards.index import scan_lines
from datamodules.shards.lines import ShardLines
from datamodules.shards.shard_index import ShardIndex

__all__ = [
    "BatchError",
    "COLLATE_HINT",
    "TRANSFORM_HINT",
    "batch_error",
    "first_failing",
    "record_place",
]

#: What would fix a batch the collate could not make.
COLLATE_HINT = (
    "Every record of a batch needs the same fields, of matching kinds: choose the fields with "
    "columns= (Parquet), make the records alike with transform=, or batch them your own way "
    "with collate=."
)
TRANSFORM_HINT = "transform= raised on this record."


class BatchError(ValueError):
    """A record that ``transform`` or the collate of a stream batch failed on; the message
    names its shard, its line or row, its source, and what would fix it."""


def first_failing(collate: Callable[[list[Any]], Any], samples: Sequence[Any]) -> int | None:
    """The index of the sample that makes ``collate`` fail: the last of the shortest failing
    prefix (None when every prefix short of the whole batch collates).

    Failures of a collate grow with the batch (a record that breaks a prefix breaks every
    longer one), so the prefix is found by doubling, then bisection: O(log B) collates.
    """

    def fails(k: int) -> bool:
        try:
            collate(list(samples[:k]))
        except Exception:
            return True
        return False

    n = len(samples)
    hi = 1
    while hi < n and not fails(hi):
        hi *= 2
    hi = min(hi, n)
    if hi == n and not fails(n):
        return None
    lo = hi // 2  # prefix lo collates (or lo == 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fails(mid):
            hi = mid
        else:
            lo = mid
    return hi - 1


def record_place(index: ShardIndex | None, position: int, options: Any = None) -> str:
    """``"line 12"`` (JSONL, text, CSV: found by scanning the shard), ``"row 12"`` (Parquet,
    Arrow: 0-based as pyarrow counts), else ``"record 12"`` (the position in the shard, from 0)."""
    if index is None or index.fmt not in ("jsonl", "txt", "csv", "parquet", "arrow"):
        return f"record {position}"
    if index.fmt in TABLE_FORMATS:
        return f"row {position}"
    k = position // index.every if index.every and index.offsets else 0
    offset, line = (index.offsets[k], index.lines[k] - 1) if k else (0, 0)
    seen = k * index.every if k else 0
    try:
        lines = ShardLines(index.path, index.compression, offset, line, options=options)
    except Exception:
        return f"record {position}"
    try:
        if index.fmt == "csv":  # from an offset past the header, the header is read first
            header = csv_header(index.path, index.compression, options) if k else None
            rows = csv_rows(lines, index.on_error, None, header=header)
            found = ((number, off) for number, off, _ in rows)
        else:
            # Skips go to a throwaway record: locating a record must not count them again.
            found = scan_lines(lines, index.fmt, index.on_error, Skipped(limit=0))
        for number, _ in found:
            if seen == position:
                return f"line {number}"
            seen += 1
    except Exception:
        pass
    finally:
        lines.close()
    return f"record {position}"


def batch_error(
    err: Exception,
    where: tuple[str, str, str | None],
    hint: str,
) -> BatchError:
    """The error for a record: ``where`` is ``(shard, place, source name or None)``."""
    shard, place, source = where
    of_source = f" (source {source!r})" if source is not None else ""
    reason = str(err).rstrip(".")
    return BatchError(f"{shard}, {place}{of_source}: in its batch, {reason}. {hint}")
