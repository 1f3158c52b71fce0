"""An audio mixture's train mix continued from a checkpoint, possibly changed since.

:class:`ClipMixResume` is the resume side of :class:`~datamodules.audio.mixing.ClipMixture`,
as :class:`~datamodules.tokens.blend_resume.BlendResume` is text's. When a checkpoint of a
mixed train split is restored (``Trainer.fit(ckpt_path=...)``: the DataModule's
``load_state_dict`` runs after ``setup``, before the train loader is built), it:

* checks every source that kept its name against the checkpoint (:meth:`check_state`): the
  same files, train clips and samples; else it refuses, naming the source and what changed;
* with sources added or removed, checks that every source's train clips are all its clips
  (``val_split=0`` and ``test_split=0``, or ``val=`` / ``test=``): a random split drawn over
  the joined clips would hold out other clips of the sources kept; the split fingerprint
  (over the joined clips) is then not compared, the sources are;
* continues the mix (:meth:`~datamodules.core.mixture.Mixture.resumed`) in the train view
  and the sampler alike (:meth:`resume_mix`, the sampler's ``resume``): the epoch the
  checkpoint interrupted ends as it was planned, each clip of its plan once across both runs
  (a source removed since that still owes it clips is read again from the files the
  checkpoint names, and gives nothing afterwards); the new weights, schedules, sources and
  ``epoch_size`` apply from the next epoch, each source continuing its run of passes where it
  stopped, a new one from its start;
* says on rank 0 what changed, in the words text's blends use
  (:func:`~datamodules.core.mixture.resume_message`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from datamodules.audio.clips import ClipIndex, join
from datamodules.core.context import log
from datamodules.core.mixture import (
    MixEntry,
    Mixture,
    Source,
    check_same_listing,
    check_source_set,
    resume_message,
)
from datamodules.tokens.mixture import BlendUnits

__all__ = ["ClipMixResume", "clip_listing"]


def clip_listing(files: Any, lengths: np.ndarray) -> list[list[Any]]:
    """What a source of an audio mixture holds, as a mix's listing:
    ``[[files, train clips, samples]]`` (a resume refuses the same name over another one)."""
    shown = files if isinstance(files, str) else ", ".join(map(str, files))
    return [[shown, len(lengths), int(np.asarray(lengths, np.int64).sum())]]


class ClipMixResume:
    """Continuing a checkpoint's train mixture (see the module's docstring); the base of
    :class:`~datamodules.audio.mixing.ClipMixture`."""

    owner: Any
    sources: list[Source] | None
    #: ``files -> ClipIndex``: reads one train source as the train split does (set by the
    #: DataModule when it reads a mixture); reads a removed source again.
    reader: Callable[[Any], ClipIndex] | None = None

    def check_state(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint's DataModule state, its train mix checked against this one (what the
        DataModule's ``load_state_dict`` then restores; the sampler continues a changed mix).

        Raises:
            ValueError: A source holds other data under its name, or sources were added or
                removed while ``val_split`` / ``test_split`` draw over the joined clips.
        """
        saved = (state_dict.get("train_sampler") or {}).get("mix")
        if saved is None or self.sources is None:
            return state_dict
        names = [s.label for s in self.sources]
        whole = self._whole_train_split()
        same = check_source_set(saved, names, whole, "audio mixture", "clips", "val= / test=")
        if self.owner.split_indices is not None:  # set up: compare the sources now
            self.owner.view("train").mixture.check_listings(saved)
        if same:
            return state_dict
        return {k: v for k, v in state_dict.items() if k != "split_fingerprint"}

    def _whole_train_split(self) -> bool:
        """Whether every source's train clips are all its clips."""
        owner = self.owner
        held_out = [
            getattr(owner, split) is None and getattr(owner, f"{split}_split")
            for split in ("val", "test")
        ]
        return not any(held_out) and owner.explicit_splits is None

    def resume_mix(self, saved: dict[str, Any], interrupted: bool) -> Mixture:
        """The train view's mixture continued from a checkpoint's changed mix (the sampler's
        :attr:`~datamodules.tokens.mixture.MixedSampler.resume`).

        Raises:
            ValueError: A source holds other clips than in the checkpoint, or one removed
                since owes clips to the interrupted epoch and cannot be read again.
        """
        view = self.owner.view("train")
        if view.mixture.saved == saved:  # restored already (Lightning restores twice)
            return view.mixture
        view.restore_base()
        base = view.mixture
        resumed = base.resumed(saved, interrupted)  # raises if a source holds other clips
        epoch = int(saved["epoch"])
        held = resumed.quotas(epoch)
        for entry, quota in zip(resumed.entries[len(base.entries) :],
                                held[len(base.entries) :], strict=True):  # fmt: skip
            part = self._removed_source(entry, quota, epoch) if quota else None
            view.add_source(entry.name, part)
        view.mixture = resumed
        changes = base.changes(saved)
        if changes and self.owner._rank_world()[0] == 0:
            log.info(resume_message(type(self.owner).__name__, changes, epoch, interrupted))
        return resumed

    def _removed_source(self, entry: MixEntry, quota: int, epoch: int) -> ClipIndex:
        """A source removed since the checkpoint that owes ``quota`` clips to ``epoch``: read
        again from the files the checkpoint names."""
        owes = (
            f"cannot end epoch {epoch} as it was planned: source {entry.name!r}, no longer in "
            f"the mixture, still owes it {quota} clip(s), but"
        )
        if entry.files is None or self.reader is None or not self._whole_train_split():
            raise ValueError(
                f"{owes} the checkpoint does not name its files or its train clips are not all "
                "its clips. Resume from a checkpoint taken at the end of an epoch."
            )
        try:
            part = self.reader(entry.files)
        except (OSError, ValueError) as err:
            raise ValueError(
                f"{owes} its files cannot be read ({err}). Keep its files, or resume from a "
                "checkpoint taken at the end of an epoch."
            ) from err
        check_same_listing(entry.name, entry.listing, clip_listing(entry.files, part.lengths))
        classes = self.owner.view("train").index.classes
        if part.classes is not None and not set(part.classes) <= set(classes or ()):
            raise ValueError(
                f"{owes} it has classes {sorted(set(part.classes) - set(classes or ()))} that "
                "the train split now lacks. Resume from a checkpoint taken at an epoch's end."
            )
        return part


def extend(index: ClipIndex, indices: torch.Tensor, part: ClipIndex) -> tuple[ClipIndex, Any]:
    """``index`` with ``part``'s clips after its own (as one more source), and the split's
    ``indices`` with all of them; returns the new index and indices."""
    joined = join([index, part])
    assert index.sources is not None
    joined.sources = np.concatenate(
        [index.sources, np.full(len(part), int(index.sources.max(initial=-1)) + 1, np.int64)]
    )
    added = torch.arange(len(index), len(index) + len(part), dtype=torch.int64)
    return joined, torch.cat([indices, added])


def absent_units(name: str) -> BlendUnits:
    """A removed source's run that owes nothing: a place in the view's lists."""
    return BlendUnits(name, np.zeros(0, np.int64), None, False, 0)
