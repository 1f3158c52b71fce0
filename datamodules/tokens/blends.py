"""TextDataModule's blends: ``token_files`` / ``train_file`` / ``val_file`` / ``test_file`` given
as lists of :class:`~datamodules.Source`.

:class:`TextBlends` is mixed into :class:`~datamodules.TextDataModule`. A blend's sources are
Megatron prefixes or flat token files (``token_files``), or files that go through the token
store (``train_file`` etc., with your tokenizer); :mod:`datamodules.tokens.mixture` holds the
views and the sampler. What this adds to the DataModule:

* ``epoch_size=``: units per epoch over the train sources, split by weight (default: all the
  sources' units); a unit is a packed row with ``packing=True``, else a document;
* :meth:`TextBlends.quotas` and :meth:`TextBlends.source_names`; the summary's lines per
  source and the schedule; the ``mix/<name>`` logs (:mod:`datamodules.core.mix_logging`);
* ``eval_per_source=True``: one validation (test) loader per source of a blend, in order.

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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from datamodules.core.checks import check_bool, check_int
from datamodules.core.loaders import ResumableDataLoader
from datamodules.core.mix_logging import MixLogging
from datamodules.core.mixture import MixEntry, Mixture, Source, check_sources, schedule_lines
from datamodules.core.summary import counted
from datamodules.tokens.blend_resume import BlendResume, WeakResume, blend_listing
from datamodules.tokens.inputs import SPLIT_FILES, find_files
from datamodules.tokens.mixture import (
    BlendCorpus,
    BlendUnits,
    MixedDocView,
    MixedPackedView,
    MixedSampler,
    blend_parts,
)
from datamodules.tokens.packing import PackPlanner
from datamodules.tokens.token_files import read_token_files

__all__ = ["BlendCorpus", "TextBlends", "blend_parts", "check_blend"]


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


class TextBlends(BlendResume, MixLogging):
    """Blends of token sources in a TextDataModule (a mixin; see the module docstring)."""

    files: dict[str, Any]
    token_files: Any
    split_datasets: dict[str, Any]

    def init_blends(self, epoch_size: Any, eval_per_source: Any) -> None:
        """Checks ``epoch_size`` and ``eval_per_source`` against the blends given."""
        check_bool(eval_per_source, "eval_per_source")
        train = self.blend_sources("train")
        if epoch_size is not None:
            check_int(epoch_size, "epoch_size", 1)
            if train is None or train[0].weight is None:
                raise ValueError(
                    f"epoch_size={epoch_size!r} splits an epoch between weighted sources: give "
                    "token_files= or train_file= a list of Source(..., weight=...) (or leave "
                    "epoch_size unset)."
                )
        for split in ("val", "test"):
            sources = self.blend_sources(split) or []
            if any(s.weight is not None or s.repeat is not None for s in sources):
                raise ValueError(
                    f"{SPLIT_FILES[split]}: every source of an evaluation split is read once; drop "
                    "weight= and repeat= there."
                )
        blends = [s for s in ("train", "val", "test") if self.blend_sources(s) is not None]
        files = [s for s in blends if s != "train" or self.token_files is None]
        if files and not self.uses_store():
            raise ValueError(
                f"{', '.join(SPLIT_FILES[s] for s in files)}: a blend of files goes through the "
                "token store: give tokenizer= (yours) and leave token_cache on."
            )
        if (self.batch_by == "tokens" or self.max_tokens) and blends:
            raise ValueError("batch_by='tokens' does not apply to a blend: use batch_size.")
        self.epoch_size, self.eval_per_source = epoch_size, eval_per_source
        self._mix_logged: int | None = None

    def blend_sources(self, split: str) -> list[Source] | None:
        """The Sources of a split given as a blend (the train one: ``token_files`` or
        ``train_file``), else None."""
        if split == "train" and isinstance(self.token_files, list):
            return self.token_files
        given = self.files.get(split)
        return given if given and isinstance(given[0], Source) else None

    def blend_corpus(self, split: str) -> BlendCorpus | None:
        """The split's blend, its sources mapped (token files) or stored (files), or None."""
        sources = self.blend_sources(split)
        if sources is None:
            return None
        parts = [self.read_blend_part(split, self.blend_files(split, s), s.label) for s in sources]
        return BlendCorpus(parts, [s.label for s in sources])

    def blend_files(self, split: str, source: Source) -> Any:
        """What :meth:`read_blend_part` reads for a source, as plain data (kept in the
        checkpoint's mix, so that a source removed since can still be read)."""
        if split == "train" and isinstance(self.token_files, list):
            return source.files
        return list(source.paths)

    def read_blend_part(self, split: str, files: Any, name: str) -> Any:
        """One source of a split's blend: a token file (``token_files``) or a store."""
        if split == "train" and isinstance(self.token_files, list):
            return read_token_files(files, self.dtype, self.eos_id, self.declared_vocab_size)
        return self._file_store(find_files(files, f"{SPLIT_FILES[split]} ({name})", self.remote))

    def blend_units(self, name: str, lengths: np.ndarray, shuffle: bool) -> BlendUnits:
        """A source's units over its documents of a split (of ``lengths`` tokens)."""
        planner = None
        if self.packing:
            planner = PackPlanner(
                lengths, self.seq_length, self.pack_mode, shuffle, self.shuffle_seed
            )
        return BlendUnits(name, lengths, planner, shuffle, self.shuffle_seed)

    # ------------------------------------------------------------------ views and samplers
    def blend_view(self, split: str, blend: BlendCorpus, indices: torch.Tensor) -> Any:
        """The split's view over its documents of every source (see
        :mod:`datamodules.tokens.mixture`)."""
        shuffle = self.shuffle and split == "train"
        docs = blend.split(indices)
        units = [
            self.blend_units(name, part.encoded.lengths_np[mine], shuffle)
            for part, name, mine in zip(blend.parts, blend.names, docs, strict=True)
        ]
        train = split == "train" and self.blend_sources("train") is not None
        sources = self.blend_sources("train") if train else None
        entries = []
        for k, (part, unit) in enumerate(zip(blend.parts, units, strict=True)):
            weight = sources[k].weight if sources else None
            repeat = sources[k].repeat if sources else None
            files = self.blend_files(split, sources[k]) if sources else None
            entries.append(
                MixEntry(unit.name, weight, repeat, unit.count, blend_listing(part), files=files)
            )
        mixture = Mixture(entries, self.epoch_size if train else None)
        return self._mixed_view([p.encoded for p in blend.parts], docs, units, mixture, split)

    def _mixed_view(
        self, encoded: list[Any], docs: list[np.ndarray], units: list[BlendUnits],
        mixture: Mixture, split: str,
    ) -> Any:  # fmt: skip
        args = (encoded, docs, units, mixture, self.transform_for(split), self.pad_id)
        if self.packing:
            return MixedPackedView(*args)
        return MixedDocView(*args, padding_side=self.padding_side, pad_to=self.pad_to_multiple_of)

    def blend_sampler(self, split: str, view: Any, rank: int, world: int) -> MixedSampler:
        """The blend's batch sampler for this rank."""
        sampler = MixedSampler(
            view.mixture,
            self.batch_size,
            shuffle=view.units[0].shuffle if view.units else False,
            drop_last=self.drop_last and split == "train",
            seed=self.shuffle_seed,
            num_replicas=world,
            rank=rank,
        )
        sampler.unit = "row" if self.packing else "document"  # for summary()
        if split == "train" and self.blend_sources("train") is not None:
            sampler.resume = WeakResume(self._resume_blend)  # type: ignore[attr-defined]
        return sampler

    # ------------------------------------------------------------------ quotas and names
    def mixture(self, split: str) -> Mixture | None:
        """The :class:`~datamodules.core.mixture.Mixture` of a blended split (None for one
        corpus)."""
        self._require_setup()
        if not isinstance(self.split_datasets.get(split), BlendCorpus):
            return None
        return self.view(split).mixture

    def quotas(self, epoch: int, split: str = "train") -> dict[str, int]:
        """The units (packed rows with ``packing=True``, else documents) each source gives in
        ``epoch``, by source name.

        Raises:
            ValueError: The split is not a blend.
        """
        mixture = self.mixture(split)
        if mixture is None:
            raise ValueError(f"the {split} split is not a blend of Sources: it has no quotas.")
        return mixture.by_name(epoch)

    def source_names(self, split: str) -> list[str]:
        """The names of a blended split's sources, in order (the order of the loaders with
        ``eval_per_source=True``); empty for one corpus."""
        self._require_setup()
        dataset = self.split_datasets.get(split)
        return list(dataset.names) if isinstance(dataset, BlendCorpus) else []

    # ------------------------------------------------------------------ loaders
    def val_dataloader(self) -> Any:
        """The validation loader; with ``eval_per_source=True`` and a blend, one per source."""
        if self._per_source("val"):
            return self._source_loaders("val")
        return super().val_dataloader()  # type: ignore[misc]

    def test_dataloader(self) -> Any:
        """The test loader; with ``eval_per_source=True`` and a blend, one per source."""
        if self._per_source("test"):
            return self._source_loaders("test")
        return super().test_dataloader()  # type: ignore[misc]

    def _per_source(self, split: str) -> bool:
        return self.eval_per_source and bool(self.source_names(split))

    def _source_loaders(self, split: str) -> list[ResumableDataLoader]:
        """One loader per source of the split's blend that has documents in it, in order."""
        view = self.view(split)
        rank, world = self._rank_world()
        settings = self.loader_settings(split)
        loaders = []
        for k, unit in enumerate(view.units):
            if not unit.count:
                continue
            mixture = Mixture.fixed([unit.name], [unit.count])
            one = self._mixed_view([view.encoded[k]], [view.docs[k]], [unit], mixture, split)
            sampler = self.blend_sampler(split, one, rank, world)
            loaders.append(
                ResumableDataLoader(
                    one,
                    sampler=sampler,
                    reuse_batch_memory=self.reuse_batch_memory,
                    batches_per_message=getattr(one, "batches_per_message", 1),
                    **settings.loader_kwargs(),
                )
            )
        return loaders

    # ------------------------------------------------------------------ summary
    def extra_summary(self) -> list[str]:
        """The text summary, plus a line per source of each blended split and its schedule."""
        lines = super().extra_summary()  # type: ignore[misc]
        unit = "rows" if self.packing else "documents"
        for split in ("train", "val", "test"):
            dataset = self.split_datasets.get(split)
            if not isinstance(dataset, BlendCorpus) or not len(self.split_indices[split]):
                continue
            view = self.view(split)
            sampler = self._samplers.get("train") if split == "train" else None
            epoch = sampler.epoch if sampler is not None else 0
            quota = dict(zip(view.mixture.names, view.mixture.quotas(epoch), strict=True))
            source = self.blend_sources("train") if split == "train" else None
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
                    f"    source {u.name!r}: {len(view.docs[k])} documents, {u.count} {unit} "
                    f"a pass, {share}; {quota[u.name]} {unit} this epoch"
                )
            if split == "train":
                lines.extend(schedule_lines(view.mixture, epoch, unit))
        return lines

    def packing_summary(self) -> list[str]:
        """Packing's summary lines (a blend's rows are in its lines per source)."""
        if any(isinstance(d, BlendCorpus) for d in self.split_datasets.values()):
            return [
                f"  packing: seq_length={self.seq_length}, pack_mode={self.pack_mode!r}, "
                f"batch_size={self.batch_size} rows, each source packed on its own"
            ]
        return super().packing_summary()  # type: ignore[misc]
