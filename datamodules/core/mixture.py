"""Mixtures of sources: ``Source(files, weight=, repeat=, name=)``, weight schedules, quotas.

Shared by the data kinds that mix sources (streams of records, token files and corpora): each
kind says what its *units* are (records, packed rows, documents) and how many a source holds;
this module says how many of them each source gives in each epoch, and which ones.

* **Weights.** A weight is a number, or a *schedule*: ``[[epoch, weight], ...]`` points, the
  weight at epoch ``e`` linear between the points around it, the first weight before the
  first point and the last after the last. A weight may be 0 in some epochs; an epoch whose
  weights are all 0 is refused. Epoch ``e``'s quotas split ``epoch_size`` (default: all the
  sources' units) by that epoch's weights, by largest remainder.
* **Repeats.** ``repeat`` is passes over the source per epoch: a quota of
  ``round(repeat x units)``. With neither, each source gives all its units once per epoch.
* **Runs of passes.** A source's units are drawn as an endless run of passes, each pass every
  unit once (in an order the data kind shuffles per pass). Epoch ``e`` takes the next
  ``quota(e)`` units of that run after those epochs ``0..e-1`` took, so no unit repeats
  before its pass is complete however the quotas change: :class:`Mixture` keeps each source's
  position in its run (:meth:`Mixture.starts`).
* **A changed mix on resume** (:meth:`Mixture.resumed`): the epoch a checkpoint interrupted
  keeps its plan (its sources, their positions and quotas); the new mix applies from the next
  epoch; each source continues its run where it stopped, a new source starts at its beginning,
  and a removed one keeps its place in the state. The same source name over other files is
  refused, naming what changed.

Everything here is plain data (numbers, strings, lists), so checkpoints hold it as it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from datamodules.core.checks import is_number
from datamodules.core.sources import (
    Source,
    check_sources,
    describe_weight,
    last_point,
    weight_at,
)

__all__ = [
    "MixEntry",
    "Mixture",
    "Source",
    "check_same_listing",
    "check_source_set",
    "check_sources",
    "describe_weight",
    "largest_remainder",
    "quotas",
    "resume_message",
    "schedule_lines",
    "weight_at",
]


def largest_remainder(weights: Sequence[float], total: int) -> list[int]:
    """``total`` split in proportion to ``weights`` (summing to ``total``), by largest
    remainder, ties to the earlier weight."""
    norm = sum(weights)
    exact = [total * w / norm for w in weights]
    out = [math.floor(x) for x in exact]
    order = sorted(range(len(out)), key=lambda i: (-(exact[i] - out[i]), i))
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


def quotas(
    sources: Sequence[Source], records: Sequence[int], epoch_size: int | None, epoch: int = 0
) -> list[int]:
    """Units each source gives in ``epoch`` (see the module docstring).

    Raises:
        ValueError: ``epoch_size`` with repeat or plain sources, an epoch whose weights are
            all 0, or a source with no units but a quota.
    """
    entries = [
        MixEntry(s.label, s.weight, s.repeat, n) for s, n in zip(sources, records, strict=True)
    ]
    return Mixture(entries, epoch_size).quotas(epoch)


@dataclass(frozen=True)
class MixEntry:
    """One source as a :class:`Mixture` sees it.

    Attributes:
        name: Its name.
        weight: A number, a schedule, or None.
        repeat: Passes per epoch, or None.
        units: The units it holds (records, packed rows, documents).
        listing: What it is made of, as plain data (e.g. ``[[path, records], ...]``): a
            resume refuses the same name over another listing.
        hidden: Removed from the mix since a checkpoint: it gives nothing in fresh epochs
            and keeps its place in the state.
        files: How to read it again, as plain data (a data kind whose listing does not say
            it: e.g. a token source's files), kept in the state so that a source removed
            since a checkpoint can end the epoch it interrupted; None: not kept.
    """

    name: str
    weight: Any
    repeat: float | None
    units: int
    listing: Any = None
    hidden: bool = False
    files: Any = None


class Mixture:
    """Per epoch, each source's quota and its position in its run of passes.

    Args:
        entries: The sources, in order.
        epoch_size: Units per epoch over all sources, split by weight (None: all the
            units of the sources not hidden).
        origin: The first epoch whose positions are ``starts`` (a resume's).
        starts: Per entry, its position at ``origin`` (default 0).
        held: ``(epoch, order, starts, quotas)``: an epoch that keeps a checkpoint's plan
            (entry indices in the saved order, their positions and quotas).
    """

    def __init__(
        self,
        entries: Sequence[MixEntry],
        epoch_size: int | None = None,
        *,
        origin: int = 0,
        starts: Sequence[int] | None = None,
        held: tuple[int, list[int], list[int], list[int]] | None = None,
    ) -> None:
        self.entries = list(entries)
        self.names = [e.name for e in self.entries]
        self.epoch_size = epoch_size
        live = [e for e in self.entries if not e.hidden] or self.entries
        if epoch_size is not None and any(e.weight is None for e in live):
            raise ValueError(
                "epoch_size= splits the epoch between weighted sources: give every Source a "
                "weight (or leave epoch_size unset)."
            )
        if any(e.weight is not None for e in live):
            self.kind = "weight"
        else:
            self.kind = "repeat" if any(e.repeat is not None for e in live) else "plain"
        self.origin = origin
        self.origin_starts = list(starts) if starts is not None else [0] * len(self.entries)
        self.held = held
        #: The mixture this one resumed (None: a fresh one).
        self.base: Mixture | None = None
        #: The checkpoint's mix state this one continues (None: a fresh one).
        self.saved: Mapping[str, Any] | None = None
        self._quotas: dict[int, list[int]] = {}
        self._starts: dict[int, list[int]] = {}
        self._totals: dict[int, int] = {}
        for e in self.entries:
            if not e.units and not e.hidden and self.kind == "weight":
                last = math.ceil(last_point(e.weight))
                if any(weight_at(e.weight, k) > 0 for k in range(last + 1)):
                    raise ValueError(
                        f"source {e.name!r} holds no records but its weight is "
                        f"{describe_weight(e.weight)}."
                    )

    @classmethod
    def fixed(cls, names: Sequence[str], quotas: Sequence[int]) -> Mixture:
        """Sources that give the same quota every epoch (each as if it held that many)."""
        return cls([MixEntry(n, None, None, q) for n, q in zip(names, quotas, strict=True)])

    # ------------------------------------------------------------------ per epoch
    def fresh_quotas(self, epoch: int) -> list[int]:
        """The quotas of ``epoch`` from the weights (or repeats), ignoring a held epoch."""
        live = [not e.hidden for e in self.entries]
        if self.kind == "weight":
            weights = [
                weight_at(e.weight, epoch) if ok else 0.0
                for e, ok in zip(self.entries, live, strict=True)
            ]
            if not any(w > 0 for w in weights):
                raise ValueError(
                    f"every source's weight is 0 in epoch {epoch}: give some source a weight > 0."
                )
            total = self.epoch_size
            if total is None:
                total = sum(e.units for e, ok in zip(self.entries, live, strict=True) if ok)
            out = largest_remainder(weights, total)
        elif self.kind == "repeat":
            out = [round(float(e.repeat or 0) * e.units) if ok else 0
                   for e, ok in zip(self.entries, live, strict=True)]  # fmt: skip
        else:
            out = [e.units if ok else 0 for e, ok in zip(self.entries, live, strict=True)]
        for e, q in zip(self.entries, out, strict=True):
            if q and not e.units:
                raise ValueError(f"source {e.name!r} holds no records but its quota is {q}.")
        return out

    def quotas(self, epoch: int) -> list[int]:
        """Per entry, the units it gives in ``epoch``."""
        out = self._quotas.get(epoch)
        if out is None:
            if self.held is not None and epoch == self.held[0]:
                out = [0] * len(self.entries)
                for i, q in zip(self.held[1], self.held[3], strict=True):
                    out[i] = q
            else:
                out = self.fresh_quotas(epoch)
            self._quotas[epoch] = out
        return out

    def total(self, epoch: int) -> int:
        """Units of ``epoch`` over all sources."""
        out = self._totals.get(epoch)
        if out is None:
            out = self._totals[epoch] = sum(self.quotas(epoch))
        return out

    def starts(self, epoch: int) -> list[int]:
        """Per entry, its position in its run of passes at the start of ``epoch``."""
        if self.held is not None and epoch == self.held[0]:
            out = [0] * len(self.entries)
            for i, s in zip(self.held[1], self.held[2], strict=True):
                out[i] = s
            return out
        cached = self._starts.get(epoch)
        if cached is not None:
            return cached
        if epoch >= self.origin:
            first, position = self.origin, list(self.origin_starts)
        else:  # before a resume's origin (an explicit set_epoch): as a fresh run would
            first, position = 0, [0] * len(self.entries)
        known = [k for k in self._starts if first <= k <= epoch]
        if known:
            first = max(known)
            position = list(self._starts[first])
        for e in range(first, epoch):
            position = [p + q for p, q in zip(position, self.quotas(e), strict=True)]
        self._starts[epoch] = position
        if len(self._starts) > 64:
            self._starts.pop(min(self._starts))
        return position

    def plan(self, epoch: int) -> list[tuple[int, int, int]]:
        """``(entry, start, quota)`` of the entries with a quota in ``epoch``, in the order the
        epoch interleaves them (a held epoch's saved order)."""
        starts, quota = self.starts(epoch), self.quotas(epoch)
        order = self.held[1] if self.held is not None and epoch == self.held[0] else None
        if order is None:
            order = list(range(len(self.entries)))
        return [(i, starts[i], quota[i]) for i in order if quota[i]]

    def by_name(self, epoch: int) -> dict[str, int]:
        """``{name: quota}`` of ``epoch``: every source not hidden, and a hidden one that
        gives units in it."""
        return {
            e.name: q
            for e, q in zip(self.entries, self.quotas(epoch), strict=True)
            if q or not e.hidden
        }

    # ------------------------------------------------------------------ checkpoints
    def state(self, epoch: int) -> dict[str, Any]:
        """The plan of ``epoch`` as plain data: every source (hidden ones too, to keep their
        place), in the epoch's order, with its position and quota."""
        starts, quota = self.starts(epoch), self.quotas(epoch)
        first = [i for i, _, _ in self.plan(epoch)]
        order = first + [i for i in range(len(self.entries)) if i not in set(first)]
        sources = []
        for i in order:
            e = self.entries[i]
            sources.append({
                "name": e.name, "weight": e.weight, "repeat": e.repeat, "units": e.units,
                "listing": e.listing, "hidden": e.hidden, "start": starts[i], "quota": quota[i],
            })  # fmt: skip
            if e.files is not None:
                sources[-1]["files"] = e.files
        return {"epoch": epoch, "epoch_size": self.epoch_size, "sources": sources}

    def resumed(self, saved: Mapping[str, Any], interrupted: bool) -> Mixture:
        """This (fresh) mixture continued from a checkpoint's :meth:`state`.

        Args:
            saved: The checkpoint's mix state (of the epoch it resumes).
            interrupted: Whether that epoch had started (it then ends as it was planned, and
                this mix applies from the next epoch; else from that epoch).

        Raises:
            ValueError: A source of the same name holds other data than in the checkpoint
                (naming the source and what changed).
        """
        base = self.base or self
        epoch = int(saved["epoch"])
        self.check_listings(saved)
        old = {s["name"]: s for s in saved["sources"]}
        entries = list(base.entries)
        for name, s in old.items():  # removed since: kept, hidden, to keep their place
            if name not in base.names:
                entries.append(MixEntry(name, s["weight"], s["repeat"], int(s["units"]),
                                        s.get("listing"), True, s.get("files")))  # fmt: skip
        index = {e.name: i for i, e in enumerate(entries)}
        starts = [0] * len(entries)
        for name, s in old.items():
            starts[index[name]] = int(s["start"]) + (int(s["quota"]) if interrupted else 0)
        held = None
        if interrupted:
            order = [index[s["name"]] for s in saved["sources"]]
            held = (epoch, order, [int(s["start"]) for s in saved["sources"]],
                    [int(s["quota"]) for s in saved["sources"]])  # fmt: skip
        origin = epoch + 1 if interrupted else epoch
        out = Mixture(entries, base.epoch_size, origin=origin, starts=starts, held=held)
        out.base, out.saved = base, saved
        return out

    def check_listings(self, saved: Mapping[str, Any]) -> None:
        """Raises unless every source of this mix that a checkpoint's :meth:`state` has holds
        the same data (its listing), naming the source and what changed."""
        old = {s["name"]: s for s in saved["sources"]}
        for e in (self.base or self).entries:
            if e.name in old:
                check_same_listing(e.name, old[e.name].get("listing"), e.listing)

    def changes(self, saved: Mapping[str, Any]) -> list[str]:
        """What differs between a checkpoint's :meth:`state` and this mix, one phrase each
        (empty when nothing does)."""
        base = self.base or self
        old = {s["name"]: s for s in saved["sources"] if not s.get("hidden")}
        parked = {s["name"] for s in saved["sources"] if s.get("hidden")}
        out = []
        current = [e for e in base.entries if not e.hidden]
        for e in current:
            if e.name not in old:
                again = " again (where it stopped)" if e.name in parked else " (from its start)"
                out.append(f"{e.name!r} added{again}")
                continue
            s = old[e.name]
            before = Source("x", s["weight"], s["repeat"]).share()
            now = Source("x", e.weight, e.repeat).share()
            if before != now:
                out.append(f"{e.name!r} {before} -> {now}")
        for name in old:
            if name not in {e.name for e in current}:
                out.append(f"{name!r} removed (keeps its place)")
        if saved.get("epoch_size") != base.epoch_size:
            out.append(f"epoch_size {saved.get('epoch_size')} -> {base.epoch_size}")
        return out


def resume_message(owner: str, changes: Sequence[str], epoch: int, interrupted: bool) -> str:
    """What a DataModule says (on rank 0) when it resumes a changed train mix."""
    when = (
        f"epoch {epoch} ends as it was planned, the new mix applies from epoch {epoch + 1}"
        if interrupted
        else f"the new mix applies from epoch {epoch}, where the checkpoint stopped"
    )
    return (
        f"{owner}: the train mix differs from the checkpoint's: {'; '.join(changes)}. "
        f"{when[0].upper()}{when[1:]}; each source continues its run of passes where it stopped."
    )


def check_source_set(
    saved: Mapping[str, Any], names: Sequence[str], whole: bool, kind: str, units: str, fix: str
) -> bool:
    """Whether a checkpoint's mix (its :meth:`Mixture.state`) has the sources ``names``.

    Args:
        saved: The checkpoint's mix state.
        names: This run's sources.
        whole: Whether every source's train units are all its units (no random held-out
            split drawn over the whole mix): only then may sources be added or removed.
        kind: What the mix is called in the message (``"blend"``, ``"audio mixture"``).
        units: What a random split holds out (``"documents"``, ``"clips"``).
        fix: The arguments that give evaluation data of their own (``"val_file= / test_file="``).

    Raises:
        ValueError: Sources added or removed while a random split draws over all of them.
    """
    then = {s["name"] for s in saved["sources"] if not s.get("hidden")}
    now = set(names)
    if then != now and not whole:
        added, removed = sorted(now - then), sorted(then - now)
        raise ValueError(
            f"cannot resume the {kind} with sources added ({added}) or removed ({removed}): "
            f"val_split / test_split hold out {units} drawn over the whole {kind}, so another "
            f"set of sources would hold out other {units} of the sources kept. Give {fix} (or "
            f"val_split=0 and test_split=0) to change the sources of a {kind} on resume."
        )
    return then == now


def check_same_listing(name: str, before: Any, now: Any) -> None:
    """Raises unless a source's listing (``[[item, count], ...]`` or any plain value) is the
    same as in the checkpoint, naming what changed."""
    if before is None or before == now:
        return
    detail = ""
    if isinstance(before, list) and isinstance(now, list):
        was = {str(x[0]): x[1:] for x in before if isinstance(x, list) and x}
        new = {str(x[0]): x[1:] for x in now if isinstance(x, list) and x}
        parts = []
        gone, added = sorted(set(was) - set(new)), sorted(set(new) - set(was))
        changed = sorted(k for k in set(was) & set(new) if was[k] != new[k])
        if gone:
            parts.append(f"no longer has {gone}")
        if added:
            parts.append(f"now also has {added}")
        if changed:
            parts.append(
                "other contents in " + ", ".join(f"{k} ({was[k]} -> {new[k]})" for k in changed[:5])
            )
        if not parts and was.keys() == new.keys():
            parts.append("the same files in another order")
        detail = ": " + "; ".join(parts) if parts else ""
    raise ValueError(
        f"cannot resume the mix: source {name!r} holds other data than in the checkpoint"
        f"{detail}. A source keeps its name only over the same data (give other data a new "
        "name: it then starts at its beginning)."
    )


def schedule_lines(mixture: Mixture, epoch: int, unit: str = "records") -> list[str]:
    """Summary lines of a weight schedule: the quotas at the epochs where some schedule has a
    point (and at ``epoch``); none when every weight is a number."""
    points = {
        math.floor(p[0])
        for e in mixture.entries
        if not e.hidden and e.weight is not None and not is_number(e.weight)
        for p in e.weight
    }
    if not points:
        return []
    epochs = sorted(points | {0, epoch})
    shown = epochs[:12]
    parts = []
    for e in shown:
        quota = mixture.by_name(e)
        mark = " (now)" if e == epoch else ""
        parts.append(
            f"      epoch {e}{mark}: " + ", ".join(f"{name}={q}" for name, q in quota.items())
        )
    last = max(points)
    more = f" ({len(epochs) - len(shown)} more)" if len(epochs) > len(shown) else ""
    return [
        f"    schedule ({unit} per epoch, linear between the points, constant after epoch "
        f"{last}){more}:",
        *parts,
    ]
