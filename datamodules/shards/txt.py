"""Text shards (``.txt``): one record per non-blank line, the line without its line break."""

from __future__ import annotations

from collections.abc import Iterator

from datamodules.core.skipped import Skipped
from datamodules.shards.lines import ShardLines, line_records

__all__ = ["numbered_txt", "read_txt"]


def _text(raw: bytes) -> str:
    text = raw.decode()
    if text.endswith("\n"):
        text = text[:-2] if text.endswith("\r\n") else text[:-1]
    return text


def _reason(err: ValueError, raw: bytes) -> str:
    return f"invalid UTF-8: {err}"


def read_txt(lines: ShardLines, on_error: str, counter: Skipped | None, check: int = 0):
    """Text records: each non-blank line without its line break (a line that is empty or only
    whitespace is not a record, the rule of :mod:`~datamodules.shards.lines`)."""
    return line_records(lines, on_error, counter, check, _text, _reason)


def numbered_txt(
    lines: ShardLines, on_error: str = "raise", counter: Skipped | None = None
) -> Iterator[tuple[int, str]]:
    """``(line, record)``: the records of :func:`read_txt`, each with its 1-based line, for a
    reader that names a record by where it is in the file (text does)."""
    return line_records(lines, on_error, counter, 0, _text, _reason, numbered=True)
