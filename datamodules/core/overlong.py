"""Records over a length (or image) limit: one count, one summary line, one rank-0 warning.

Every kind that leaves out, cuts or refuses records over a limit (``overlong="drop" |
"truncate" | "error"``) says so the same way: :class:`OverlongReport` words the count and what
was done with it for ``summary()``, and :meth:`OverlongReport.announce` warns once, on rank 0,
the first time ``setup`` finds any. Never silent, never said twice.
"""

from __future__ import annotations

from lightning.pytorch.utilities.rank_zero import rank_zero_warn

from datamodules.core.summary import counted

__all__ = ["OVERLONG", "OverlongReport"]

#: What ``overlong=`` accepts, in every kind.
OVERLONG = ("drop", "truncate", "error")


class OverlongReport:
    """The words and the warning for the records over a limit of one DataModule.

    Args:
        owner: Who speaks (the DataModule's class name), first in the warning.
        unit: The noun of one record (``"conversation"``, ``"record"``, ``"pair"``).
        policy: The ``overlong`` policy: ``"drop"``, ``"truncate"`` or ``"error"``.
    """

    def __init__(self, owner: str, unit: str, policy: str) -> None:
        self.owner, self.unit, self.policy = owner, unit, policy
        self.announced = False

    def line(self, count: int, limits: str, cut: str = "") -> str:
        """``"3 conversations over seq_length=128 dropped (overlong='drop')"``.

        Args:
            count: Records over the limit.
            limits: The limit(s), as the user set them (``"seq_length=128"``).
            cut: With ``"truncate"``: what was cut, e.g. ``"1,024 tokens"``.
        """
        done = {"drop": "dropped", "truncate": f"cut to the limit ({cut} cut)" if cut else "cut"}
        action = done.get(self.policy, "")
        return f"{counted(count, self.unit)} over {limits} {action} (overlong={self.policy!r})"

    def announce(self, count: int, limits: str, cut: str = "") -> None:
        """Warns on rank 0 with :meth:`line`, once per DataModule, when ``count`` > 0."""
        if count and not self.announced:
            self.announced = True
            rank_zero_warn(f"{self.owner}: {self.line(count, limits, cut)}")
