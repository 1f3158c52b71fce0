"""A text blend's train mix continued from a checkpoint, possibly changed since.

:class:`BlendResume` is the resume side of :class:`~datamodules.tokens.blends.TokenBlends`
(the blends component of :class:`~datamodules.TextDataModule` and
:class:`~datamodules.ChatDataModule`). When a checkpoint of a blended train split is restored
(``Trainer.fit(ckpt_path=...)``: the DataModule's ``load_state_dict`` runs after ``setup`` and
before the train loader is built, and hands the state to :meth:`BlendResume.check_state`), the
blends:

* checks every source that kept its name against the checkpoint: the same file (Megatron
  prefix, flat token file or store), documents and tokens, and the same units (packed rows
  or documents) a pass; else it refuses, naming the source and what changed;
* with sources added or removed, checks that every source's train documents are all of its
  documents (``val_split=0`` and ``test_split=0``, or ``val_file`` / ``test_file``): a random
  split drawn over the whole blend would hold out other documents of the sources kept; the
  split fingerprint (over the whole blend) is then not compared, the sources are;
* continues the mix (:meth:`~datamodules.core.mixture.Mixture.resumed`) in the train view (so
  in its DataLoader workers) and the sampler alike: the epoch the checkpoint interrupted ends
  as it was planned, each unit of its plan once across both runs (a source removed since
  that still owes it units is read again from the files the checkpoint names, and gives
  nothing afterwards); the new weights, schedules and sources apply from the next epoch, each
  source continuing its run of passes where it stopped, a new one from its start;
* says on rank 0 what changed (as :class:`~datamodules.StreamingDataModule` does).

The epoch's unit count can change with the mix (the default ``epoch_size`` is all the units
of the sources in it): the sampler deals each epoch's count
(:class:`~datamodules.tokens.mixture.MixedSampler`), and when the interrupted epoch ends with
another count than the next one's, the Trainer measures the train loader again.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from datamodules.core.context import log
from datamodules.core.mixture import (
    MixEntry,
    Mixture,
    check_same_listing,
    check_source_set,
    resume_message,
)
from datamodules.core.trainer_length import remeasure_train_loader
from datamodules.tokens.mixture import MixedSampler

__all__ = ["BlendResume", "WeakResume", "blend_listing"]


def blend_listing(part: Any) -> list[list[Any]]:
    """What a source of a blend holds, as a mix's listing: ``[[file, documents, tokens]]``
    (a resume refuses the same source name over another listing)."""
    home = getattr(part, "path", None) or getattr(part, "name", None)
    return [[str(home), len(part), int(part.encoded.lengths_np.sum())]]


class WeakResume:
    """A mixture's resume method (a blend's ``resume_blend``, audio's ``resume_mix``) held
    weakly: a sampler never keeps its DataModule."""

    def __init__(self, method: Callable[[dict[str, Any], bool], Mixture]) -> None:
        self._method = weakref.WeakMethod(method)

    def __call__(self, saved: dict[str, Any], cut: bool) -> Mixture:
        method = self._method()
        if method is None:
            raise ValueError("cannot resume the mixture: the DataModule that made it is gone.")
        return method(saved, cut)


class _HeldEpochEnd:
    """Run at the last batch of a train epoch: when the next epoch has another unit count
    (the end of an epoch a changed mix held), the Trainer measures the loader again."""

    def __init__(self, dm: Any, sampler: MixedSampler) -> None:
        self._dm, self._sampler = weakref.ref(dm), sampler

    def __call__(self) -> None:
        dm, sampler = self._dm(), self._sampler
        epoch = sampler.epoch
        if dm is not None and sampler.mixture.total(epoch + 1) != sampler.mixture.total(epoch):
            remeasure_train_loader(dm._trainer())


class _Absent:
    """A removed source that owes nothing to the resumed epoch: a place in the view's lists."""

    def __init__(self, like: Any) -> None:
        self.tokens_np = np.zeros(0, dtype=like.tokens_np.dtype)
        self.lengths_np = self.offsets_np = np.zeros(0, dtype=np.int64)
        labelled = getattr(like, "labels", None) is not None
        self.labels = self.labels_np = np.zeros(0, dtype=np.int64) if labelled else None


class BlendResume:
    """Continuing a checkpoint's train blend (see the module docstring); the base of
    :class:`~datamodules.tokens.blends.TokenBlends`."""

    owner: Any
    sources: dict[str, Any]
    given: Callable[[str], bool]
    masked: bool

    def check_state(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint's DataModule state, its train blend checked against this one (what
        the DataModule's ``load_state_dict`` then restores; the sampler continues a changed
        mix)."""
        saved = (state_dict.get("train_sampler") or {}).get("mix")
        if saved is not None and self.sources.get("train") is not None:
            state_dict = self._check_blend_resume(state_dict, saved)
        return state_dict

    def on_loader(self, split: str, loader: Any) -> Any:
        """A blend's train loader re-measured after a held epoch; returns the loader."""
        if split == "train" and isinstance(loader.sampler, MixedSampler):
            loader.on_epoch_end = _HeldEpochEnd(self.owner, loader.sampler)
        return loader

    def _whole_train_split(self) -> bool:
        """Whether every source's train documents are all its documents."""
        held_out = [
            not self.given(split) and getattr(self.owner, f"{split}_split")
            for split in ("val", "test")
        ]
        return not any(held_out) and getattr(self.owner, "explicit_splits", None) is None

    def _check_blend_resume(self, state: dict[str, Any], saved: dict[str, Any]) -> dict[str, Any]:
        names = [s.label for s in self.sources["train"]]
        whole = self._whole_train_split()
        same = check_source_set(saved, names, whole, "blend", "documents", "val_file= / test_file=")
        if self.owner.split_indices is not None:  # set up: compare the sources now
            view = self.owner.view("train")
            _check_sources(view.mixture.base or view.mixture, saved)
        if same:
            return state
        return {k: v for k, v in state.items() if k != "split_fingerprint"}

    def resume_blend(self, saved: dict[str, Any], cut: bool) -> Mixture:
        """The train view's mixture continued from a checkpoint's changed mix (the sampler's
        :attr:`~datamodules.tokens.mixture.MixedSampler.resume`)."""
        view = self.owner.view("train")
        if view.mixture.saved == saved:  # restored already (Lightning restores twice)
            return view.mixture
        base = view.mixture.base or view.mixture
        _check_sources(base, saved)
        resumed = base.resumed(saved, cut)  # raises if a source holds other data
        k = len(base.entries)
        encoded, docs, units = view.encoded[:k], view.docs[:k], view.units[:k]
        trained = list(view.trained[:k]) if self.masked else []
        epoch = int(saved["epoch"])
        held = resumed.quotas(epoch)
        for entry, quota in zip(resumed.entries[k:], held[k:], strict=True):
            if quota:
                part, unit = self._removed_source(entry, quota, epoch)
                encoded.append(part.encoded)
                trained.append(getattr(part, "trained", None))
                docs.append(np.arange(len(part), dtype=np.int64))
                units.append(unit)
            else:
                encoded.append(_Absent(view.encoded[0]))
                trained.append(_Absent(view.encoded[0]))
                docs.append(np.zeros(0, dtype=np.int64))
                units.append(self.units(entry.name, np.zeros(0, np.int64), False))  # type: ignore[attr-defined]
        view.resume(resumed, encoded, docs, units)
        if self.masked:
            view.resume_masks(trained)
        changes = base.changes(saved)
        if changes and self.owner._rank_world()[0] == 0:
            log.info(resume_message(type(self.owner).__name__, changes, epoch, cut))
        return resumed

    def _removed_source(self, entry: MixEntry, quota: int, epoch: int) -> tuple[Any, Any]:
        """A source removed since the checkpoint that owes ``quota`` units to ``epoch``: read
        again from the files the checkpoint names."""
        owes = (
            f"cannot end epoch {epoch} as it was planned: source {entry.name!r}, no longer in "
            f"the blend, still owes it {quota} unit(s), but"
        )
        if entry.files is None or not self._whole_train_split():
            raise ValueError(
                f"{owes} the checkpoint does not name its files or its train documents are not "
                "all its documents. Resume from a checkpoint taken at the end of an epoch."
            )
        try:
            part = self.read("train", entry.files, entry.name)  # type: ignore[attr-defined]
        except (OSError, ValueError) as err:
            raise ValueError(
                f"{owes} its files cannot be read ({err}). Keep its files, or resume from a "
                "checkpoint taken at the end of an epoch."
            ) from err
        check_same_listing(entry.name, entry.listing, blend_listing(part))
        unit = self.units(entry.name, part.encoded.lengths_np, self.owner.shuffle)  # type: ignore[attr-defined]
        if unit.count != entry.units:
            raise ValueError(f"{owes} it has {unit.count} unit(s) a pass now, {entry.units} then.")
        return part, unit


def _check_sources(base: Mixture, saved: dict[str, Any]) -> None:
    """Raises unless every source of ``base`` that the checkpoint has holds the same data and
    units a pass (naming the source and what changed)."""
    old = {s["name"]: s for s in saved["sources"]}
    for e in base.entries:
        s = old.get(e.name)
        if s is None:
            continue
        check_same_listing(e.name, s.get("listing"), e.listing)
        if int(s["units"]) != e.units:
            raise ValueError(
                f"cannot resume the mix: source {e.name!r} has {e.units} units a pass (packed "
                f"rows with packing=True, else documents), {s['units']} in the checkpoint: keep "
                "packing, seq_length and pack_mode as they were."
            )
