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

from datamodules.core.checks import check_on_error
from datamodules.core.skipped import SHOWN, Skipped

if TYPE_CHECKING:
    from datamodules.shards.shard_index import ShardIndex

__all__ = [
    "KEEP_MESSAGES",
    "OnError",
    "RecordError",
    "ShardError",
    "SkipCounter",
    "check_on_error",
    "where_in",
]

OnError = Literal["raise", "skip"]


#: Pairs a counter keeps (and a shard's index stores), beyond which only counts grow.
KEEP_MESSAGES = 1000


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


def where_in(shard: str, line: int | str | None) -> str:
    """Where a record is: ``"shard: line N"``, ``"shard: key 'a/b'"`` (a named place, as tar
    records are named), or the shard itself (``None``: all of it)."""
    if line is None:
        return shard
    return f"{shard}: {line}" if isinstance(line, str) else f"{shard}: line {line}"


class SkipCounter(Skipped):
    """Counts the records skipped under ``on_error="skip"``, per shard, for a report.

    It is the stream's ``dm.skipped``: a :class:`~datamodules.core.skipped.Skipped` list of
    ``(where, why)`` pairs (``where`` is ``"shard: line N"``, or the shard when it could not be
    read at all), keeping the first ``keep`` of them; the counts are always complete.

    Args:
        keep: How many pairs to keep.
    """

    def __init__(self, keep: int = KEEP_MESSAGES) -> None:
        super().__init__(limit=keep)
        self.keep = keep
        self.counts: dict[str, int] = {}
        self.unreadable: dict[str, str] = {}
        self._lock = threading.Lock()

    @property
    def messages(self) -> list[str]:
        """The kept pairs as messages (``"shard: line N: why"``)."""
        return [f"{where}: {why}" for where, why in self]

    def _keep(self, pairs: list[tuple[str, str]]) -> None:
        room = self.keep - len(self)
        self.extend(pairs[: max(room, 0)])

    def record(self, shard: str, line: int | str | None, reason: str) -> None:
        """Notes one skipped record (``line=None``: the whole shard was unreadable)."""
        with self._lock:
            if line is None:
                self.unreadable[shard] = reason
            else:
                self.counts[shard] = self.counts.get(shard, 0) + 1
            self._keep([(where_in(shard, line), reason)])

    def add_index(self, index: ShardIndex) -> None:
        """Adds what indexing a shard found (its skipped records, or that it was unreadable)."""
        with self._lock:
            if index.error is not None:
                self.unreadable[index.path] = index.error
            if index.skipped:
                self.counts[index.path] = self.counts.get(index.path, 0) + index.skipped
            pairs = ([(index.path, index.error)] if index.error else []) + [
                (where, why) for where, why in index.problems
            ]
            self._keep(pairs)

    @property
    def records(self) -> int:
        """Bad records skipped, over all shards."""
        return sum(self.counts.values())

    @property
    def total(self) -> int:
        """Everything skipped: bad records, and shards that could not be read at all."""
        return self.records + len(self.unreadable)

    def summary(self) -> str:
        """One line per shard with skipped records, then the first messages."""
        if not self.counts and not self.unreadable:
            return "no records skipped"
        lines = [f"skipped {self.records} bad record(s) in {len(self.counts)} shard(s)"]
        if self.unreadable:
            lines[0] += f" and {len(self.unreadable)} unreadable shard(s)"
        lines += [f"  {shard}: {n}" for shard, n in sorted(self.counts.items())]
        lines += [f"  {shard}: unreadable" for shard in sorted(self.unreadable)]
        lines += [f"  e.g. {m}" for m in self.messages[:SHOWN]]
        return "\n".join(lines)

    def __reduce__(self) -> tuple[Any, ...]:  # a list subclass with a lock: pickle by parts
        state = {k: v for k, v in self.__dict__.items() if k != "_lock"}
        return (_rebuild_counter, (list(self), state))


def _rebuild_counter(pairs: list[tuple[str, str]], state: dict[str, Any]) -> SkipCounter:
    counter = SkipCounter(state.get("keep", KEEP_MESSAGES))
    counter.__dict__.update(state)
    counter.extend(pairs)
    return counter
