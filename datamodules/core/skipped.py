"""``dm.skipped``: the samples a DataModule left out under ``on_error="skip"``, one type everywhere.

* :class:`Skipped`: what every DataModule's ``dm.skipped`` is, and what the shard layer counts
  into while it indexes or reads shards. A list of ``(where, why)`` pairs, where ``where``
  names the sample (an image's path, ``"shard.jsonl: line 3"``, ``"shard.tar: key 'a/b'"``)
  and ``why`` says what was wrong with it; the counts per file (``counts``) and the files that
  could not be read at all (``unreadable``) are always complete, while a stream of millions
  keeps only the first :attr:`Skipped.limit` pairs in the list. Modules that never skip
  (tensors, texts) give an empty one.
* :class:`SkipChannel`: how DataLoader workers send what they skipped to the main process,
  which adds it to its :class:`Skipped` (a file of short lines, whatever the start method of
  the workers). It holds no record of its own.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Iterable
from typing import Any

__all__ = ["KEEP_MESSAGES", "SHOWN", "SkipChannel", "Skipped", "where_in"]

#: Pairs a :class:`Skipped` keeps (and a shard's index stores), beyond which only counts grow.
KEEP_MESSAGES = 1000

#: Pairs shown by ``repr`` and ``summary()``.
SHOWN = 5


def where_in(file: str, place: int | str | None) -> str:
    """Where a sample is: ``"file: line N"``, ``"file: key 'a/b'"`` (a named place, as tar
    records are named), or the file itself (``None``: all of it, e.g. an image file)."""
    if place is None:
        return file
    return f"{file}: {place}" if isinstance(place, str) else f"{file}: line {place}"


class Skipped(list):
    """Samples left out under ``on_error="skip"``: a list of ``(where, why)`` pairs, counted.

    Args:
        limit: The most pairs the list keeps; the counts are complete beyond it.

    Attributes:
        counts: Skipped samples per file (a shard, an image file).
        unreadable: Files that could not be read at all, with the reason.
    """

    def __init__(self, limit: int = KEEP_MESSAGES) -> None:
        super().__init__()
        self.limit = limit
        self.counts: dict[str, int] = {}
        self.unreadable: dict[str, str] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ adding
    def _keep(self, pairs: Iterable[tuple[str, str]]) -> None:
        room = self.limit - len(self)
        if room > 0:
            self.extend(list(pairs)[:room])

    def record(self, file: str, place: int | str | None, why: str) -> None:
        """Counts one skipped sample of ``file`` at ``place`` (a line number, a named place
        such as ``"key 'a/b'"``, or None when the file is the sample, as an image file is)."""
        with self._lock:
            self.counts[file] = self.counts.get(file, 0) + 1
            self._keep([(where_in(file, place), why)])

    def add(
        self,
        file: str,
        count: int,
        pairs: Iterable[tuple[str, str]] = (),
        error: str | None = None,
    ) -> None:
        """Adds what a pass over a whole file found: ``count`` skipped samples, the first of
        them as ``pairs``, or (``error``) that the file could not be read at all."""
        with self._lock:
            if error is not None:
                self.unreadable[file] = error
            if count:
                self.counts[file] = self.counts.get(file, 0) + count
            found = [(where, why) for where, why in pairs]  # pairs read back from JSON: lists
            self._keep(([(file, error)] if error is not None else []) + found)

    # ------------------------------------------------------------------ reading
    @property
    def records(self) -> int:
        """Skipped samples (records, image files), over all files."""
        return sum(self.counts.values())

    @property
    def total(self) -> int:
        """Everything skipped, listed or not: samples, and files that could not be read."""
        return self.records + len(self.unreadable)

    @property
    def messages(self) -> list[str]:
        """The kept pairs as messages (``"where: why"``)."""
        return [f"{where}: {why}" for where, why in self]

    def summary(self) -> str:
        """``"no records skipped"``, or the counts, one line per file, and the first messages."""
        if not self.counts and not self.unreadable:
            return "no records skipped"
        lines = [f"skipped {self.records} bad record(s) in {len(self.counts)} file(s)"]
        if self.unreadable:
            lines[0] += f" and {len(self.unreadable)} unreadable file(s)"
        lines += [f"  {file}: {n}" for file, n in sorted(self.counts.items())]
        lines += [f"  {file}: unreadable" for file in sorted(self.unreadable)]
        lines += [f"  e.g. {m}" for m in self.messages[:SHOWN]]
        return "\n".join(lines)

    def __repr__(self) -> str:
        shown = ", ".join(f"{where!r} ({why})" for where, why in self[:SHOWN])
        more = f", ... {self.total - min(SHOWN, len(self))} more" if self.total > SHOWN else ""
        return f"Skipped({self.total}{': ' if shown else ''}{shown}{more})"

    def __reduce__(self) -> tuple[Any, ...]:  # a list subclass with a lock: pickle by parts
        state = {k: v for k, v in self.__dict__.items() if k != "_lock"}
        return (_rebuild, (list(self), state))


def _rebuild(pairs: list[tuple[str, str]], state: dict[str, Any]) -> Skipped:
    skipped = Skipped(state.get("limit", KEEP_MESSAGES))
    skipped.__dict__.update(state)
    skipped.extend(pairs)
    return skipped


class SkipChannel:
    """Carries the samples DataLoader workers skipped to the main process's :class:`Skipped`.

    Workers append one short line per skipped sample to a file (an append of a short line is
    atomic), so nothing is lost whatever the start method of the workers; the main process
    adds the lines written since its last read to its :class:`Skipped`.

    Args:
        directory: Where to keep the file (None: the system's temporary folder).
    """

    def __init__(self, directory: str | None = None) -> None:
        handle, self.path = tempfile.mkstemp(prefix="skipped-", suffix=".jsonl", dir=directory)
        os.close(handle)
        self._read_to = 0

    def send(self, file: str, place: str | None, why: str) -> None:
        """Sends one skipped sample (called in workers); arguments as for
        :meth:`Skipped.record`."""
        line = json.dumps([file, place, why]) + "\n"  # ASCII: surrogates escaped too
        with open(self.path, "a", encoding="ascii") as out:
            out.write(line)

    def has_new(self) -> bool:
        """Whether samples were sent since the previous :meth:`receive` (one ``stat``)."""
        return os.path.getsize(self.path) > self._read_to

    def receive(self, skipped: Skipped) -> list[tuple[str, str]]:
        """Records the samples sent since the previous call in ``skipped``; returns their
        ``(where, why)`` pairs."""
        with open(self.path, "rb") as log:
            log.seek(self._read_to)
            data = log.read()
        whole = data[: data.rfind(b"\n") + 1]  # a line still being appended waits
        self._read_to += len(whole)
        new = []
        for line in whole.splitlines():
            file, place, why = json.loads(line)
            skipped.record(file, place, why)
            new.append((where_in(file, place), why))
        return new
