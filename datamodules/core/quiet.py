"""Advice of Lightning and torch that does not apply to our loaders, silenced for them alone.

Lightning warns that a loader "does not have many workers" and that an ``IterableDataset``
with ``__len__`` may report a wrong length; torch warns when a loader's workers outnumber the
CPUs. For a worker count that ``num_workers="auto"`` chose on purpose, and for a stream whose
length is exact, that advice is wrong. A process-wide ``warnings.filterwarnings`` would also
silence it for the user's own loaders, so each filter here holds only while one of our loaders
is checked:

* :class:`HeldFilters`: from the loader's creation until its first iteration (Lightning checks
  a loader between ``*_dataloader()`` and iterating it), or until the loader is freed;
* :func:`quiet`: around one call (torch checks its worker count when an iteration starts).

Only the exact filter entries added are removed again; filters the user adds meanwhile stay.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

__all__ = ["HeldFilters", "Pattern", "quiet", "release_held_filters"]

Pattern = tuple[str, type[Warning]]


def _add(patterns: Sequence[Pattern]) -> list[Any]:
    entries = []
    for message, category in patterns:
        warnings.filterwarnings("ignore", message=message, category=category)
        entries.append(warnings.filters[0])
    return entries


def _remove(entries: list[Any]) -> None:
    for entry in entries:
        with suppress(ValueError):  # already gone (the user reset the filters)
            warnings.filters.remove(entry)


class HeldFilters:
    """Ignore filters that hold until :meth:`release` (or until ``owner`` is freed).

    Args:
        patterns: ``(message regex, warning category)`` pairs.
        owner: The loader they are for; releasing happens at the latest when it is freed.
    """

    def __init__(self, patterns: Sequence[Pattern], owner: Any = None) -> None:
        self._entries = _add(patterns)
        if owner is not None:
            weakref.finalize(owner, _remove, self._entries)

    def release(self) -> None:
        """Removes the filters (once; later calls do nothing)."""
        _remove(self._entries)
        self._entries.clear()


def release_held_filters(loader: Any) -> None:
    """Releases the :class:`HeldFilters` a loader carries (``loader.held_filters``), if any."""
    held = getattr(loader, "held_filters", None)
    if held is not None:
        held.release()
        loader.held_filters = None


@contextmanager
def quiet(patterns: Sequence[Pattern]) -> Iterator[None]:
    """Ignores warnings matching ``patterns`` within the block only."""
    entries = _add(patterns)
    try:
        yield
    finally:
        _remove(entries)
