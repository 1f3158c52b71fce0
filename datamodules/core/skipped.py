"""``dm.skipped``: the samples a DataModule left out under ``on_error="skip"``, one type everywhere.

Every DataModule has ``dm.skipped``: a list of ``(where, why)`` pairs, where ``where`` names
the sample (an image's path, ``"shard.jsonl: line 3"``, ``"shard.tar: member a/b.jpg"``) and
``why`` says what was wrong with it. Modules that never skip (tensors, texts) give an empty
one. ``total`` counts every skipped sample even when a stream of millions keeps only the first
:attr:`Skipped.limit` pairs in the list, and the ``repr`` shows the count and the first few.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["SHOWN", "Skipped"]

#: Pairs shown by ``repr``.
SHOWN = 5


class Skipped(list):
    """Samples left out under ``on_error="skip"``: a list of ``(where, why)`` pairs.

    Args:
        pairs: The pairs, in the order the samples were met.
        total: How many samples were skipped, when more than the pairs listed (None: as many
            as listed).
        limit: The most pairs this list keeps (None: all).
    """

    def __init__(
        self,
        pairs: Iterable[tuple[str, str]] = (),
        total: int | None = None,
        limit: int | None = None,
    ) -> None:
        super().__init__(pairs)
        self.limit = limit
        self._total = total

    @property
    def total(self) -> int:
        """Every skipped sample, listed or not."""
        return max(len(self), self._total or 0)

    def summary(self) -> str:
        """``"no samples skipped"``, or the count and the first pairs, one per line."""
        if not self.total:
            return "no samples skipped"
        lines = [f"{self.total} sample(s) skipped"]
        lines += [f"  {where}: {why}" for where, why in self[:SHOWN]]
        if self.total > SHOWN:
            lines.append(f"  ... and {self.total - min(SHOWN, len(self))} more (dm.skipped)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        shown = ", ".join(f"{where!r} ({why})" for where, why in self[:SHOWN])
        more = f", ... {self.total - min(SHOWN, len(self))} more" if self.total > SHOWN else ""
        return f"Skipped({self.total}{': ' if shown else ''}{shown}{more})"
