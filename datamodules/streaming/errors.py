"""Errors for unreadable records and shards, and the counter of skipped ones.

* :class:`RecordError`: a record (or a whole shard) that cannot be read; its message names the
  shard and the 1-based line where the bad record starts.
* :class:`ShardError`: a shard that cannot be opened, decompressed or parsed as a whole.
* :class:`SkipCounter`: what ``on_error="skip"`` left out, per shard, for the report that
  :meth:`~datamodules.StreamingDataModule.summary` and the end-of-epoch warning give.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from datamodules.streaming.shard_index import ShardIndex

OnError = Literal["raise", "skip"]


KEEP_MESSAGES = 20


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
        where = f"{shard}: line {line}" if line is not None else shard
        if isinstance(line, str):  # a named place: a tar member, a record's key
            where = f"{shard}: {line}"
        super().__init__(f"{where}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across worker processes
        return (type(self), (self.shard, self.line, self.reason))


class ShardError(RecordError):
    """A shard that cannot be opened, decompressed or parsed as a whole."""


def check_on_error(on_error: str) -> None:
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error={on_error!r} is not accepted: use 'raise' or 'skip'.")


class SkipCounter:
    """Counts the records skipped under ``on_error="skip"``, per shard, for a report.

    Args:
        keep: How many messages to keep (the counts are always complete).
    """

    def __init__(self, keep: int = KEEP_MESSAGES) -> None:
        self.keep = keep
        self.counts: dict[str, int] = {}
        self.unreadable: dict[str, str] = {}
        self.messages: list[str] = []
        self._lock = threading.Lock()

    def record(self, shard: str, line: int | str | None, reason: str) -> None:
        """Notes one skipped record (``line=None``: the whole shard was unreadable)."""
        with self._lock:
            if line is None:
                self.unreadable[shard] = reason
            else:
                self.counts[shard] = self.counts.get(shard, 0) + 1
            if len(self.messages) < self.keep:
                self.messages.append(str(RecordError(shard, line, reason)))

    def add_index(self, index: ShardIndex) -> None:
        """Adds what indexing a shard found (its skipped records, or that it was unreadable)."""
        with self._lock:
            if index.error is not None:
                self.unreadable[index.path] = index.error
            if index.skipped:
                self.counts[index.path] = self.counts.get(index.path, 0) + index.skipped
            room = self.keep - len(self.messages)
            msgs = ([index.error] if index.error else []) + list(index.problems)
            self.messages.extend(msgs[: max(room, 0)])

    @property
    def total(self) -> int:
        """Number of skipped records over all shards."""
        return sum(self.counts.values())

    def summary(self) -> str:
        """One line per shard with skipped records, then the first messages."""
        if not self.counts and not self.unreadable:
            return "no records skipped"
        lines = [f"skipped {self.total} bad record(s) in {len(self.counts)} shard(s)"]
        if self.unreadable:
            lines[0] += f" and {len(self.unreadable)} unreadable shard(s)"
        lines += [f"  {shard}: {n}" for shard, n in sorted(self.counts.items())]
        lines += [f"  {shard}: unreadable" for shard in sorted(self.unreadable)]
        lines += [f"  e.g. {m}" for m in self.messages]
        return "\n".join(lines)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
