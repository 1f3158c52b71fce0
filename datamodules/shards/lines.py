"""The byte lines of a line shard (JSONL, CSV / TSV, txt): opened local or remote, decompressed,
with byte offsets and line numbers, and the rules every line format shares.

The rules, for every line format (streams and text read the same files the same way):

* a byte-order mark may open a file (``BOM``) and is not part of its first record;
* a blank line (empty or only whitespace) is not a record, and does not take a position;
* a line is UTF-8; one that is not, or that does not parse, is a bad record: under
  ``on_error="raise"`` a :class:`~datamodules.shards.errors.RecordError` names the file and the
  line, under ``"skip"`` it is left out and counted (:func:`bad_record`);
* a shard whose compressed stream is cut or corrupt past some line (a download stopped, a
  disk that filled) raises under ``"raise"``, naming the shard and that line; under
  ``"skip"`` every record before the damage is read, and the damage is counted once, at the
  line where the shard stops, saying that the rest of it is lost (:func:`stop_at_damage`).
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from datamodules.core.skipped import Skipped
from datamodules.remote.files import decompress, open_binary
from datamodules.remote.retrying import RemoteOptions
from datamodules.shards.errors import RecordError, ShardError

__all__ = [
    "BOM",
    "LOST",
    "ShardLines",
    "bad_record",
    "cannot_read_past",
    "decoded_lines",
    "is_blank",
    "is_damaged",
    "line_records",
    "stop_at_damage",
]

#: What a line shard damaged past some line has lost (``on_error="skip"``).
LOST = "the rest of the shard is lost"

#: The UTF-8 byte-order mark, which may open a file and is never part of a record.
BOM = b"\xef\xbb\xbf"


def is_blank(raw: bytes) -> bool:
    """True for a line that is not a record: empty, or only whitespace."""
    return not raw or raw.isspace()


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
        size: int | None = None,
    ):
        self.path = path
        try:
            self.raw = open_binary(path, offset, options, size)
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
            raise cannot_read_past(self.path, self.line + 1, err) from err

    def close(self) -> None:
        self.f.close()
        self.raw.close()


def bad_record(path: str, line: int, reason: str, on_error: str, counter: Skipped | None) -> None:
    """A bad record: raised under ``"raise"``, counted under ``"skip"``."""
    if on_error == "raise":
        raise RecordError(path, line, reason)
    if counter is not None:
        counter.record(path, line, reason)


def decoded_lines(lines: ShardLines, bad: list[tuple[int, str]]) -> Iterator[str]:
    """The lines as text; a line that is not UTF-8 is noted in ``bad`` and read as blank."""
    for raw in lines:
        try:  # a byte-order mark may open the file
            yield raw.decode("utf-8-sig" if lines.start == 0 else "utf-8")
        except UnicodeDecodeError as err:
            bad.append((lines.line, f"invalid UTF-8: {err}"))
            yield "\n"


def line_records(
    lines: ShardLines,
    on_error: str,
    counter: Skipped | None,
    check: int,
    parse: Callable[[bytes], Any],
    reason: Callable[[ValueError, bytes], str],
    numbered: bool = False,
) -> Iterator[Any]:
    """The records of a line shard (JSONL, txt), by the rules above: a BOM dropped, blank lines
    not records, a line ``parse`` refuses (a ValueError) a bad record named by ``reason``.

    The first ``check`` records are consumed without being yielded: they belong to another
    reader, which handles their errors, so under ``"raise"`` they are only told apart
    structurally, without parsing. ``numbered=True`` yields ``(line, record)`` pairs, for a
    reader that names a record by its 1-based line (text does).
    """
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
                record = parse(raw)
            except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
                bad_record(path, line, reason(err, raw), on_error, counter)
                continue
            if check:
                check -= 1
                continue
            yield (line, record) if numbered else record
    except RecordError:
        raise
    except Exception as err:  # a corrupt or truncated stream, a dropped connection
        error = cannot_read_past(path, line + 1, err)
        if not stop_at_damage(error, on_error, counter):
            raise error from err


def cannot_read_past(path: str, line: int, err: BaseException) -> ShardError:
    """The error of a line shard that cannot be read from ``line`` on (a corrupt or cut
    stream, a dropped connection), caused by ``err``."""
    reason = f"cannot read shard past this line ({type(err).__name__}: {err})"
    error = ShardError(path, line, reason)
    error.__cause__ = err
    return error


def is_damaged(error: BaseException) -> bool:
    """Whether a line shard stopped being readable past its first line on damage to the file
    itself (its compressed stream cut or corrupt), not on the way to it (a remote read that
    gave up). A file unreadable from its first line is not what its name says: unreadable."""
    cause = error.__cause__
    if not isinstance(error, ShardError) or not isinstance(error.line, int) or error.line < 2:
        return False
    return isinstance(cause, (EOFError, zlib.error, gzip.BadGzipFile)) or (
        type(cause).__name__ == "ZstdError"
    )


def stop_at_damage(error: ShardError, on_error: str, counter: Skipped | None) -> bool:
    """A line shard damaged past some line (:func:`is_damaged`), under ``on_error="skip"``:
    the records before the damage stand, and ``counter`` counts the damage once, at the line
    where the shard stops, saying that the rest of it is lost (:data:`LOST`). Returns whether
    the read may end there quietly; else the caller raises ``error``."""
    if on_error != "skip" or not is_damaged(error):
        return False
    if counter is not None:
        counter.record(error.shard, error.line, f"{error.reason}; {LOST}")
    return True
