"""Mixtures of audio sources: ``train=[Source("a.jsonl", weight=3), Source("b/", weight=1)]``.

The shared mixture layer does the counting (:mod:`datamodules.core.mixture`: weights and
schedules, repeats, ``epoch_size``, each epoch's quota of each source and its position in that
source's endless run of passes) and the batching (:class:`~datamodules.tokens.mixture.MixedSampler`:
DDP-even, exact and elastic resume, ids that carry their epoch); this module says what a unit
is for audio, one clip, and lays each epoch's clips out:

* every source is read into its own :class:`~datamodules.audio.clips.ClipIndex` and the indexes
  are joined (:func:`~datamodules.audio.clips.join`), each clip remembering its source
  (``ClipIndex.sources``);
  ``val_split`` holds clips out of every source at random, as for one input;
* :class:`MixedClipView` maps an epoch's unit ids to clips: the plan's pieces of each source's
  run of passes (each pass a permutation of the source's train clips, seeded by its name);
* validation and test Sources are read once each, joined, never weighted;
* a checkpoint whose mix differs (other weights, schedules or ``epoch_size``, sources added or
  removed) is continued as text's blends continue one (:mod:`datamodules.audio.mix_resume`,
  the sampler's ``resume``): the interrupted epoch ends as planned, the new mix applies from
  the next epoch, each source continuing its run where it stopped; said on rank 0. Other
  files or clips under a source's name are refused, naming the source.

Duration batches (``max_duration``) work over a mixture as over one input: each epoch's clips
are cut by :class:`~datamodules.tokens.mixed_budget.MixedBudgetSampler` into length-bucketed
batches of at most ``max_duration`` seconds of audio, padding counted (the budget in samples,
the lengths of the epoch's clips from :meth:`MixedClipView.unit_lengths`), DDP-even, exact and
elastic resume (a changed mix continued as above); an epoch's batch count follows its clips,
so the Trainer measures the next epoch's length anew when it changes
(:class:`~datamodules.tokens.mixed_budget.MeasureNextEpoch`).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from datamodules.audio.batches import AudioBatchView
from datamodules.audio.clips import ClipIndex, join
from datamodules.audio.mix_resume import ClipMixResume, absent_units, clip_listing, extend
from datamodules.core.mix_logging import MixLog
from datamodules.core.mixture import MixEntry, Mixture, Source, schedule_lines
from datamodules.tokens.blend_resume import WeakResume
from datamodules.tokens.blends import check_blend
from datamodules.tokens.mixed_budget import MeasureNextEpoch, MixedBudgetSampler
from datamodules.tokens.mixture import EPOCH_SHIFT, UNIT_MASK, BlendUnits, MixedSampler, mixed_units

__all__ = ["ClipMixture", "MixedClipView", "check_split_input"]


def check_split_input(value: Any, name: str, allow_none: bool) -> Any:
    """A split argument as given (paths), or its checked Sources (a Source, its plain dict, or
    a list of them); evaluation Sources are read once, so they take no weight or repeat.

    Raises:
        TypeError: Neither paths nor Sources (nor None where ``allow_none``).
        ValueError: What :func:`~datamodules.core.mixture.check_sources` refuses, or a weighted
            evaluation Source.
    """
    if value is None and allow_none:
        return value
    sources = check_blend(value, name)
    if sources is not None:
        if name != "train" and any(s.weight is not None or s.repeat is not None for s in sources):
            raise ValueError(
                f"{name}: every source of an evaluation split is read once; drop weight= and "
                "repeat= there."
            )
        return sources
    items = value if isinstance(value, (list, tuple)) else [value]
    if items and all(isinstance(v, (str, os.PathLike)) for v in items):
        return value
    accepted = (
        "a manifest (.json / .jsonl), a Parquet / Arrow table, a tar shard or a class folder, "
        "a list of them, or a list of Source(files, weight=...)"
    )
    raise TypeError(f"{name}={value!r} is not accepted: give {accepted}.")


class MixedClipView(AudioBatchView):
    """A train split of joined sources, read as a mixture (see the module's docstring).

    Args:
        *args: As :class:`~datamodules.audio.batches.AudioBatchView`'s.
        units: Each source's run of passes over its train clips.
        members: Each source's positions in the split.
        mixture: The quotas and positions of each epoch.
        **kwargs: As :class:`~datamodules.audio.batches.AudioBatchView`'s.
    """

    def __init__(
        self,
        *args: Any,
        units: list[BlendUnits],
        members: list[np.ndarray],
        mixture: Mixture,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.units, self.members, self.mixture = units, members, mixture
        self._epochs: OrderedDict[int, np.ndarray] = OrderedDict()
        self._fresh = (self.index, self.indices, len(units))
        self._run = (False, 0)  # each pass shuffled?, the seed: set by ClipMixture.view

    def restore_base(self) -> None:
        """Back to the fresh mixture of this run's sources (before a resume continues it)."""
        self.index, self.indices, k = self._fresh
        del self.units[k:], self.members[k:]
        self.mixture = self.mixture.base or self.mixture
        self._epochs.clear()

    def add_source(self, name: str, part: ClipIndex | None) -> None:
        """A source removed since a checkpoint, after the others: ``part``, the clips it
        still owes the interrupted epoch are drawn from, or None (it owes nothing)."""
        if part is None:
            self.units.append(absent_units(name))
            self.members.append(np.zeros(0, np.int64))
            return
        first = len(self.indices)
        self.index, self.indices = extend(self.index, self.indices, part)
        self.units.append(BlendUnits(name, np.zeros(len(part), np.int64), None, *self._run))
        self.members.append(np.arange(first, first + len(part), dtype=np.int64))
        self._epochs.clear()

    def layout(self, epoch: int) -> np.ndarray:
        """The split positions of ``epoch``'s units, source after source (two epochs kept)."""
        if epoch not in self._epochs:
            pieces = [
                self.members[s][u] for s, _, u in mixed_units(self.units, self.mixture, epoch)
            ]
            self._epochs[epoch] = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
            while len(self._epochs) > 2:
                self._epochs.popitem(last=False)
        return self._epochs[epoch]

    def unit_lengths(self, epoch: int) -> np.ndarray:
        """The samples of each of ``epoch``'s clips, in unit order (what a budget counts)."""
        return self.index.lengths[self.indices.numpy()[self.layout(epoch)]]

    def rows(self, batch: torch.Tensor) -> torch.Tensor:
        ids = batch.tolist()
        if not ids:
            return batch
        layout = self.layout(ids[0] >> EPOCH_SHIFT)
        positions = torch.from_numpy(layout[[i & UNIT_MASK for i in ids]])
        return self.indices.index_select(0, positions)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_epochs"] = OrderedDict()  # each worker lays out the epochs it reads
        return state


class ClipMixture(ClipMixResume):
    """The train split's Sources and ``epoch_size``: builds the mixed view and sampler.

    Args:
        sources: The train Sources, or None (one input: no mixture).
        epoch_size: Clips per epoch over all sources, split by weight (None: all of them).
    """

    def __init__(self, sources: list[Source] | None, epoch_size: int | None) -> None:
        if epoch_size is not None and (sources is None or sources[0].weight is None):
            raise ValueError(
                f"epoch_size={epoch_size!r} splits an epoch between weighted sources: give "
                "train=[Source(..., weight=...), ...] (or leave epoch_size unset)."
            )
        self.sources, self.epoch_size = sources, epoch_size
        #: The DataModule that holds it (its views and Trainer); set by it.
        self.owner: Any = None
        self._log = MixLog()

    def mixture(self, split: str = "train") -> Mixture | None:
        """The :class:`~datamodules.core.mixture.Mixture` of the mixed train split, else None."""
        self.owner._require_setup()
        view = self.owner.view(split)
        return view.mixture if isinstance(view, MixedClipView) else None

    def quotas(self, epoch: int, split: str = "train") -> dict[str, int]:
        """The clips each Source gives in ``epoch``, by name.

        Raises:
            ValueError: The split is not a mixture of Sources.
        """
        mixture = self.mixture(split)
        if mixture is None:
            raise ValueError(f"the {split} split is not a mixture of Sources: it has no quotas.")
        return mixture.by_name(epoch)

    def epoch_end(self, loader: Any) -> Callable[[], None] | None:
        """What the train ``loader`` of a mixture runs at each epoch's last batch: a Trainer
        measures the next epoch anew where its length changes (duration batches, or the end
        of an epoch a changed mix held); else None."""
        if not isinstance(loader.sampler, MixedSampler):
            return None
        return MeasureNextEpoch(loader.find_trainer, loader.sampler)

    def log(self) -> None:
        """Logs the Trainer's epoch's quotas as ``mix/<name>`` at its first train batch."""
        if self.sources is not None:
            self._log.log(self.owner._trainer(), self)

    def summary_lines(self) -> list[str]:
        """A line per source of the mixed train split, and its schedule."""
        mixture = self.mixture() if self.sources is not None else None
        if mixture is None:
            return []
        sampler = self.owner._samplers.get("train")
        epoch = sampler.epoch if sampler is not None else 0
        lines = [f"train mixture: {mixture.total(epoch)} clips per epoch (epoch {epoch})"]
        shares = [s.share() for s in self.sources]
        for k, (entry, quota) in enumerate(
            zip(mixture.entries, mixture.quotas(epoch), strict=True)
        ):
            share = shares[k] if k < len(shares) else "removed since the checkpoint"
            lines.append(
                f"  source {entry.name!r}: {entry.units} clips, {share}; {quota} this epoch"
            )
        return lines + schedule_lines(mixture, epoch, "clips")

    @staticmethod
    def read(sources: list[Source], read_one: Callable[[Any], ClipIndex]) -> ClipIndex:
        """The sources' clips joined (``read_one(files)`` reads one source)."""
        return join([read_one(s.files) for s in sources])

    def view(
        self, index: ClipIndex, indices: torch.Tensor, shuffle: bool, **kwargs: Any
    ) -> MixedClipView:
        """The train view: ``kwargs`` as :class:`AudioBatchView` takes them (its ``seed`` also
        seeds each source's passes)."""
        seed = kwargs["seed"]
        assert self.sources is not None and index.sources is not None
        owner = index.sources[indices.numpy()]
        members = [np.flatnonzero(owner == k) for k in range(len(self.sources))]
        units = [
            BlendUnits(s.label, np.zeros(len(m), np.int64), None, shuffle, seed)
            for s, m in zip(self.sources, members, strict=True)
        ]
        lengths = index.lengths[indices.numpy()]
        entries = [
            MixEntry(s.label, s.weight, s.repeat, len(m), clip_listing(s.files, lengths[m]),
                     files=s.files)
            for s, m in zip(self.sources, members, strict=True)
        ]  # fmt: skip
        mixture = Mixture(entries, self.epoch_size)
        view = MixedClipView(
            index, indices, units=units, members=members, mixture=mixture, **kwargs
        )
        view._run = (shuffle, seed)
        return view

    def sampler(
        self,
        view: MixedClipView,
        batch_size: int,
        shuffle: bool,
        budget: int | None = None,
        **kwargs: Any,
    ) -> MixedSampler:
        """The mixed view's batches for one rank: ``batch_size`` clips, or at most ``budget``
        samples of audio, padding counted (``kwargs``: ``drop_last``, ``seed``,
        ``num_replicas``, ``rank``)."""
        if budget is None:
            sampler = MixedSampler(view.mixture, batch_size, shuffle, **kwargs)
        else:
            kwargs.pop("drop_last", None)  # refused with max_duration by the DataModule
            sampler = MixedBudgetSampler(view.mixture, view.unit_lengths, budget, shuffle, **kwargs)
        sampler.unit = "clip"
        sampler.resume = WeakResume(self.resume_mix)  # a changed mix continues in the view too
        return sampler
