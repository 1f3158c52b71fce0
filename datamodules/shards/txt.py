"""Text shards (``.txt``): one record per non-blank line, the line without its line break."""

from __future__ import annotations

from collections.abc import Iterator

from datamodules.shards.errors import RecordError, ShardError, SkipCounter
from datamodules.shards.lines import BOM, ShardLines, bad_record, is_blank

__all__ = ["numbered_txt", "read_txt"]


def read_txt(lines: ShardLines, on_error: str, counter: SkipCounter | None, check: int = 0):
    """Text records: each non-blank line without its line break (a line that is empty or only
    whitespace is not a record, the rule of :mod:`~datamodules.shards.lines`)."""
    path, line = lines.path, lines.line
    try:
        for line, raw in enumerate(lines.f, lines.line + 1):  # noqa: B007
            if line == 1 and raw.startswith(BOM):
                raw = raw[3:]
            if is_blank(raw):
                continue
            if check and on_error == "raise":
                check -= 1
                continue
            try:
                text = raw.decode()
            except UnicodeDecodeError as err:
                bad_record(path, line, f"invalid UTF-8: {err}", on_error, counter)
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


def numbered_txt(
    lines: ShardLines, on_error: str = "raise", counter: SkipCounter | None = None
) -> Iterator[tuple[int, str]]:
    """``(line, text)``: the records of :func:`read_txt`, each with its 1-based line, for a
    reader that names a record by where it is in the file (text does)."""
    path, line = lines.path, lines.line
    try:
        for line, raw in enumerate(lines.f, lines.line + 1):  # noqa: B007
            if line == 1 and raw.startswith(BOM):
                raw = raw[3:]
            if is_blank(raw):
                continue
            try:
                text = raw.decode()
            except UnicodeDecodeError as err:
                bad_record(path, line, f"invalid UTF-8: {err}", on_error, counter)
                continue
            if text.endswith("\n"):
                text = text[:-2] if text.endswith("\r\n") else text[:-1]
            yield line, text
    except RecordError:
        raise
    except Exception as err:
        raise ShardError(path, line + 1, f"cannot read shard past this line ({err!r})") from err
