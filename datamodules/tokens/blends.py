"""Blends of token sources: ``train_file`` / ``val_file`` / ``test_file`` (and text's
``token_files``) given as lists of :class:`~datamodules.Source`, one component with its own state.

:class:`TokenBlends` is held by :class:`~datamodules.TextDataModule` and
:class:`~datamodules.ChatDataModule` as ``dm.blends``; they delegate ``quotas()``,
``source_names()`` and ``mixture()`` to it. It holds each split's Sources, ``epoch_size`` and
``eval_per_source``, reads a source through the DataModule's reader (a Megatron prefix or flat
token file, or a store), and builds, from :mod:`datamodules.tokens.mixture`, a blended split's
corpus, view and sampler (exact quotas per epoch, DDP-even). What it gives the DataModule:

* ``epoch_size=``: units per epoch over the train sources, split by weight (default: all the
  sources' units); a unit is a packed row when packing, else a document (a conversation);
* the summary's lines per source and the schedule; the ``mix/<name>`` logs
  (:func:`datamodules.core.mix_logging.log_epoch_mix`);
* ``eval_per_source=True``: one validation (test) loader per source of a blend, in order;
* a per-token loss mask gathered beside the ids (``masked=True``: chat's assistant tokens,
  :mod:`datamodules.tokens.blend_views`).

Validation and test of a train blend come from ``val_split`` / ``test_split`` (documents of
every source, drawn at random over the blend), each source read once, or from ``val_file`` /
``test_file`` Sources. A blend resumes exactly (also on another world size); a mix changed
since the checkpoint (weights, schedules, ``epoch_size``, sources added or removed) ends the
interrupted epoch as it was planned and applies from the next one
(:mod:`datamodules.tokens.blend_resume`); the same source name over other data is refused,
naming what changed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from datamodules.core.checks import check_bool, check_int
from datamodules.core.loaders import ResumableDataLoader
from datamodules.core.mix_logging import log_epoch_mix
from datamodules.core.mixture import MixEntry, Mixture, Source, check_sources, schedule_lines
from datamodules.core.summary import counted
from datamodules.tokens.blend_resume import BlendResume, WeakResume, blend_listing
from datamodules.tokens.blend_views import MaskedDocView, MaskedPackedView
from datamodules.tokens.inputs import SPLIT_FILES
from datamodules.tokens.mixture import (
    BlendCorpus,
    BlendUnits,
    MixedDocView,
    MixedPackedView,
    MixedSampler,
    blend_parts,
)
from datamodules.tokens.packing import PackPlanner

__all__ = ["BlendCorpus", "TokenBlends", "blend_parts", "check_blend"]


def check_blend(value: Any, name: str) -> list[Source] | None:
    """The Sources of a text argument (a Source, a dict of one, or a list of them), checked;
    None when ``value`` gives none.

    Raises:
        TypeError: Sources mixed with paths.
        ValueError: What :func:`~datamodules.core.mixture.check_sources` refuses, a ``pipe:``
            URL, or (``token_files``) a source of more than one path.
    """
    if isinstance(value, (Source, Mapping)):
        value = [value]
    if isinstance(value, (str, bytes, os.PathLike)) or not isinstance(value, Sequence):
        return None
    if not value or not any(isinstance(v, (Source, Mapping)) for v in value):
        return None
    items = [
        Source.from_plain(v, f"{name}[{i}]") if isinstance(v, Mapping) else v
        for i, v in enumerate(value)
    ]
    if not all(isinstance(v, Source) for v in items):
        raise TypeError(f"{name}: give a list of Sources or of paths, not both: {value!r}.")
    for source in items:
        if name == "token_files" and not isinstance(source.files, str):
            raise ValueError(
                f"token_files: Source({source.files!r}) is not accepted: give each token source "
                "one Megatron prefix or one flat token file."
            )
    return check_sources(items, name)


class TokenBlends(BlendResume):
    """The blended splits of a token DataModule (see the module docstring).

    Args:
        owner: The DataModule that holds it (its split, views, loaders and Trainer).
        sources: Per split, its Sources, or None (not a blend).
        epoch_size: Train units per epoch, split by weight (None: all the sources' units).
        eval_per_source: One validation (test) loader per source of a blend.
        read: ``read(split, files, name)``: one source of a split's blend, from what
            ``files_of`` gave (also from a checkpoint, for a source removed since).
        files_of: ``files_of(split, source)``: what ``read`` reads, as plain data.
        given: ``given(split)``: whether the DataModule has inputs of its own for ``split``
            (``val_file`` / ``test_file``), so that no documents are held out of the train
            sources for it.
        seq_length: The packed rows' length, or None (padded documents).
        pack_mode: The pack planner's mode.
        seed: The shuffle seed.
        unit: What a padded unit is called (``"document"``, ``"conversation"``).
        masked: Whether each source has a loss mask (``part.trained``) read beside the ids.
        views: With ``masked``, the ``(packed, padded)`` view classes that read the ids and
            the mask (default :class:`~datamodules.tokens.blend_views.MaskedPackedView`,
            :class:`~datamodules.tokens.blend_views.MaskedDocView`: chat's labels); a kind
            whose mask holds codes of its own gives views that read them.
        train_argument: The arguments that give a train blend, for messages.
    """

    def __init__(
        self,
        owner: Any,
        sources: dict[str, list[Source] | None],
        epoch_size: Any,
        eval_per_source: Any,
        *,
        read: Callable[[str, Any, str], Any],
        files_of: Callable[[str, Source], Any],
        given: Callable[[str], bool],
        seq_length: int | None,
        pack_mode: str,
        seed: int,
        unit: str = "document",
        masked: bool = False,
        views: tuple[type, type] | None = None,
        train_argument: str = "train_file=",
    ) -> None:
        check_bool(eval_per_source, "eval_per_source")
        train = sources.get("train")
        if epoch_size is not None:
            check_int(epoch_size, "epoch_size", 1)
            if train is None or train[0].weight is None:
                raise ValueError(
                    f"epoch_size={epoch_size!r} splits an epoch between weighted sources: give "
                    f"{train_argument} a list of Source(..., weight=...) (or leave epoch_size "
                    "unset)."
                )
        for split in ("val", "test"):
            if any(s.weight is not None or s.repeat is not None for s in sources.get(split) or []):
                raise ValueError(
                    f"{SPLIT_FILES[split]}: every source of an evaluation split is read once; "
                    "drop weight= and repeat= there."
                )
        self.owner, self.sources = owner, sources
        self.epoch_size, self.eval_per_source = epoch_size, eval_per_source
        self.read, self.files_of, self.given = read, files_of, given
        self.seq_length, self.pack_mode, self.seed = seq_length, pack_mode, seed
        self.unit, self.masked = unit, masked
        self.views = views or (MaskedPackedView, MaskedDocView)
        self._mix_logged: int | None = None

    @property
    def any(self) -> bool:
        """Whether any split is a blend."""
        return any(v is not None for v in self.sources.values())

    def corpus(self, split: str) -> BlendCorpus | None:
        """The split's blend, its sources read, or None."""
        sources = self.sources.get(split)
        if sources is None:
            return None
        parts = [self.read(split, self.files_of(split, s), s.label) for s in sources]
        return BlendCorpus(parts, [s.label for s in sources])

    def units(self, name: str, lengths: np.ndarray, shuffle: bool) -> BlendUnits:
        """A source's units over its documents of a split (of ``lengths`` tokens)."""
        planner = None
        if self.seq_length is not None:
            planner = PackPlanner(lengths, self.seq_length, self.pack_mode, shuffle, self.seed)
        return BlendUnits(name, lengths, planner, shuffle, self.seed)

    # ------------------------------------------------------------------ views and samplers
    def view(self, split: str, blend: BlendCorpus, indices: torch.Tensor) -> Any:
        """The split's view over its documents of every source (see
        :mod:`datamodules.tokens.mixture`)."""
        shuffle = self.owner.shuffle and split == "train"
        docs = blend.split(indices)
        units = [
            self.units(name, part.encoded.lengths_np[mine], shuffle)
            for part, name, mine in zip(blend.parts, blend.names, docs, strict=True)
        ]
        sources = self.sources.get("train") if split == "train" else None
        entries = []
        for k, (part, unit) in enumerate(zip(blend.parts, units, strict=True)):
            weight = sources[k].weight if sources else None
            repeat = sources[k].repeat if sources else None
            files = self.files_of(split, sources[k]) if sources else None
            entries.append(
                MixEntry(unit.name, weight, repeat, unit.count, blend_listing(part), files=files)
            )
        mixture = Mixture(entries, self.epoch_size if sources else None)
        return self.mixed_view(blend.parts, docs, units, mixture, split)

    def mixed_view(
        self, parts: list[Any], docs: list[np.ndarray], units: list[BlendUnits],
        mixture: Mixture, split: str,
    ) -> Any:  # fmt: skip
        """The view over ``parts`` (sources) read by ``mixture``."""
        owner = self.owner
        args = ([p.encoded for p in parts], docs, units, mixture, owner.transform_for(split))
        args += (owner.pad_id,)
        pad_to = owner.pad_to_multiple_of
        if self.masked:
            trained = [p.trained for p in parts]
            packed, padded = self.views
            if self.seq_length is not None:
                return packed(*args, trained=trained)
            return padded(*args, trained=trained, pad_to=pad_to)
        if self.seq_length is not None:
            return MixedPackedView(*args)
        return MixedDocView(*args, padding_side=owner.padding_side, pad_to=pad_to)

    def sampler(self, split: str, view: Any, rank: int, world: int) -> MixedSampler:
        """The blend's batch sampler for this rank."""
        sampler = MixedSampler(
            view.mixture,
            self.owner.batch_size,
            shuffle=view.units[0].shuffle if view.units else False,
            drop_last=self.owner.drop_last and split == "train",
            seed=self.seed,
            num_replicas=world,
            rank=rank,
        )
        sampler.unit = "row" if self.seq_length is not None else self.unit  # for summary()
        if split == "train" and self.sources.get("train") is not None:
            sampler.resume = WeakResume(self.resume_blend)  # type: ignore[attr-defined]
        return sampler

    # ------------------------------------------------------------------ quotas and names
    def mixture(self, split: str) -> Mixture | None:
        """The :class:`~datamodules.core.mixture.Mixture` of a blended split (None for one
        corpus)."""
        self.owner._require_setup()
        if not isinstance(self.owner.split_datasets.get(split), BlendCorpus):
            return None
        return self.owner.view(split).mixture

    def quotas(self, epoch: int, split: str = "train") -> dict[str, int]:
        """The units each source gives in ``epoch``, by source name.

        Raises:
            ValueError: The split is not a blend.
        """
        mixture = self.mixture(split)
        if mixture is None:
            raise ValueError(f"the {split} split is not a blend of Sources: it has no quotas.")
        return mixture.by_name(epoch)

    def source_names(self, split: str) -> list[str]:
        """The names of a blended split's sources, in order; empty for one corpus."""
        self.owner._require_setup()
        dataset = self.owner.split_datasets.get(split)
        return list(dataset.names) if isinstance(dataset, BlendCorpus) else []

    def log_mix(self) -> None:
        """Logs the train epoch's quotas as ``mix/<name>`` at its first batch."""
        self._mix_logged = log_epoch_mix(self.owner._trainer(), self._mix_logged, self)

    # ------------------------------------------------------------------ loaders
    def per_source(self, split: str) -> bool:
        """Whether ``split`` has one loader per source (``eval_per_source`` and a blend)."""
        return self.eval_per_source and bool(self.source_names(split))

    def eval_loader(self, split: str, base: Callable[[], Any]) -> Any:
        """The loaders of ``split`` (``"val"`` / ``"test"``): one per source with
        :meth:`per_source`, else the DataModule's own (``base()``)."""
        return self.source_loaders(split) if self.per_source(split) else base()

    def source_loaders(self, split: str) -> list[ResumableDataLoader]:
        """One loader per source of the split's blend that has documents in it, in order."""
        owner = self.owner
        view = owner.view(split)
        rank, world = owner._rank_world()
        settings = owner.loader_settings(split)
        parts = owner.split_datasets[split].parts
        loaders = []
        for k, unit in enumerate(view.units):
            if not unit.count:
                continue
            mixture = Mixture.fixed([unit.name], [unit.count])
            one = self.mixed_view([parts[k]], [view.docs[k]], [unit], mixture, split)
            loaders.append(
                ResumableDataLoader(
                    one,
                    sampler=self.sampler(split, one, rank, world),
                    reuse_batch_memory=owner.reuse_batch_memory,
                    batches_per_message=getattr(one, "batches_per_message", 1),
                    **settings.loader_kwargs(),
                )
            )
        return loaders

    # ------------------------------------------------------------------ summary
    def summary_lines(self) -> list[str]:
        """A line per source of each blended split, and the train schedule."""
        owner, lines = self.owner, []
        unit = "rows" if self.seq_length is not None else f"{self.unit}s"
        for split in ("train", "val", "test"):
            dataset = owner.split_datasets.get(split)
            if not isinstance(dataset, BlendCorpus) or not len(owner.split_indices[split]):
                continue
            view = owner.view(split)
            sampler = owner._samplers.get("train") if split == "train" else None
            epoch = sampler.epoch if sampler is not None else 0
            quota = dict(zip(view.mixture.names, view.mixture.quotas(epoch), strict=True))
            source = self.sources.get("train") if split == "train" else None
            lines.append(
                f"  {split} blend: {counted(view.mixture.total(epoch), unit[:-1])} per epoch "
                f"(epoch {epoch})"
            )
            for k, u in enumerate(view.units):
                if view.mixture.entries[k].hidden:  # removed since a checkpoint
                    if quota[u.name]:
                        lines.append(
                            f"    source {u.name!r}: removed, ends the epoch a checkpoint "
                            f"interrupted: {quota[u.name]} {unit} this epoch"
                        )
                    continue
                share = source[k].share() if source else "once"
                lines.append(
                    f"    source {u.name!r}: {len(view.docs[k])} {self.unit}s, {u.count} {unit} "
                    f"a pass, {share}; {quota[u.name]} {unit} this epoch"
                )
            if split == "train":
                lines.extend(schedule_lines(view.mixture, epoch, unit))
        return lines
