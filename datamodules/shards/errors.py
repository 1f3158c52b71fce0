"""Errors for unreadable records and shards.

* :class:`RecordError`: a record (or a whole shard) that cannot be read; its message names the
  shard and the 1-based line where the bad record starts.
* :class:`ShardError`: a shard that cannot be opened, decompressed or parsed as a whole.

Records skipped under ``on_error="skip"`` are counted in a
:class:`~datamodules.core.skipped.Skipped`, the type of every DataModule's ``dm.skipped``.
"""

from __future__ import annotations

from typing import Any, Literal

from datamodules.core.checks import check_on_error
from datamodules.core.skipped import where_in

__all__ = [
    "OnError",
    "RecordError",
    "ShardError",
    "check_on_error",
]

OnError = Literal["raise", "skip"]


class RecordError(ValueError):
    """A record (or a whole shard) that cannot be read; the message names shard and line.

    ``RecordError(message)`` with a single argument is accepted too (that is how the
    DataLoader re-raises an error from a worker process, keeping its type).

    Attributes:
        shard: Path or URL of the shard.
        line: 1-based line number where the bad record starts, or where it is as text
            (``"key 'a/b'"`` in a tar shard); None for the whole shard.
        reason: What is wrong.
    """

    def __init__(
        self, shard: str, line: int | str | None = None, reason: str | None = None
    ) -> None:
        self.shard, self.line, self.reason = shard, line, reason
        if reason is None:  # a ready message
            super().__init__(shard)
            return
        super().__init__(f"{where_in(shard, line)}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across worker processes
        return (type(self), (self.shard, self.line, self.reason))


class ShardError(RecordError):
    """A shard that cannot be opened, decompressed or parsed as a whole."""
