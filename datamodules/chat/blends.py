"""Blends of chat sources: ``train_file=[Source(...), ...]`` in a ChatDataModule, a part with its
own state.

:class:`ChatBlends` holds each split's Sources, ``epoch_size`` and ``eval_per_source`` and
builds, from the shared tokens layer (:mod:`datamodules.tokens.mixture`), a blended split's
corpus (one store per source: :class:`~datamodules.tokens.mixture.BlendCorpus`), its view and
its sampler (:class:`~datamodules.tokens.mixture.MixedSampler`: exact quotas per epoch,
DDP-even, exact and elastic resume of the same mix). A unit is a conversation when padded and
a packed row (of one source's conversations) when packing. The views are the tokens layer's
mixed views with the loss mask gathered beside the ids (:class:`ChatMixedPackedView`,
:class:`ChatMixedDocView`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from collates.pack_rows import IGNORE_INDEX, gather_rows
from datamodules.core.checks import check_bool, check_int
from datamodules.core.mixture import MixEntry, Mixture, Source
from datamodules.tokens.blend_resume import blend_listing
from datamodules.tokens.encoding import gather_padded
from datamodules.tokens.inputs import SPLIT_FILES
from datamodules.tokens.mixture import (
    BlendCorpus,
    BlendUnits,
    MixedDocView,
    MixedPackedView,
    MixedSampler,
    MultiBuffer,
)
from datamodules.tokens.packing import PackPlanner

__all__ = ["ChatBlends", "ChatMixedDocView", "ChatMixedPackedView"]


class _MaskBuffers:
    """The sources' loss masks read as one, in the groups the ids were read in."""

    _masks: MultiBuffer | None
    trained: list[Any]
    tokens: MultiBuffer

    @property
    def masks(self) -> MultiBuffer:
        if self._masks is None:
            self._masks = MultiBuffer([t.tokens_np for t in self.trained])
        self._masks.expect(self.tokens._groups)  # the batch's groups, as the ids were read
        return self._masks

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()  # type: ignore[misc]
        state["_masks"] = None  # views of the sources' maps: rebuilt, never pickled
        return state


class ChatMixedPackedView(_MaskBuffers, MixedPackedView):
    """A chat blend's packed rows, ``labels`` -100 where a token is not trained."""

    def __init__(self, *args: Any, trained: list[Any]) -> None:
        super().__init__(*args)
        self.trained, self._masks = trained, None

    def __getitem__(self, batch: torch.Tensor | list[torch.Tensor]) -> Any:
        if isinstance(batch, list):  # several batches for one worker message
            return [self[b] for b in batch]
        (table, _), rows = self._grouped(batch)
        out = gather_rows(self.tokens, table, rows, self.pad_id)  # type: ignore[arg-type]
        flags = gather_rows(self.masks, table, rows, 0)["input_ids"]  # type: ignore[arg-type]
        out["labels"].masked_fill_(flags == 0, IGNORE_INDEX)
        return self.transform(out) if self.transform is not None else out


class _Docs:
    """An epoch's documents over another buffer (the masks), as gather_padded reads them."""

    def __init__(self, buffer: MultiBuffer, like: Any) -> None:
        self.tokens_np, self.lengths_np, self.offsets_np = buffer, like.lengths_np, like.offsets_np


class ChatMixedDocView(_MaskBuffers, MixedDocView):
    """A chat blend's padded conversations: ``{"input_ids", "labels", "attention_mask"}``."""

    def __init__(self, *args: Any, trained: list[Any], pad_to: int | None) -> None:
        super().__init__(*args, padding_side="right", pad_to=pad_to)
        self.trained, self._masks = trained, None

    def __getitem__(self, batch: torch.Tensor) -> dict[str, torch.Tensor]:
        (docs, _, _), rows = self._grouped(batch)
        index = torch.tensor(rows, dtype=torch.int64)
        ids, mask, _ = gather_padded(docs, index, self.pad_id, "right", self.pad_to)  # type: ignore[arg-type]
        flags, _, _ = gather_padded(_Docs(self.masks, docs), index, 0, "right", self.pad_to)  # type: ignore[arg-type]
        out = {
            "input_ids": ids,
            "labels": ids.masked_fill(flags == 0, IGNORE_INDEX),
            "attention_mask": mask,
        }
        return self.transform(out) if self.transform is not None else out


class ChatBlends:
    """The blended splits of a ChatDataModule (see the module docstring).

    Args:
        sources: Per split, its Sources, or None (not a blend).
        epoch_size: Train units per epoch, split by weight (None: all the sources' units).
        eval_per_source: One validation (test) loader per source of a blend.
        seq_length: The packed rows' length, or None (padded: a unit is a conversation).
        seed: The shuffle seed.
    """

    def __init__(
        self,
        sources: dict[str, list[Source] | None],
        epoch_size: int | None,
        eval_per_source: bool,
        seq_length: int | None,
        seed: int,
    ) -> None:
        check_int(epoch_size, "epoch_size", 1, allow_none=True)
        check_bool(eval_per_source, "eval_per_source")
        train = sources.get("train")
        if epoch_size is not None and (train is None or train[0].weight is None):
            raise ValueError(
                f"epoch_size={epoch_size!r} splits an epoch between weighted sources: give "
                "train_file= a list of Source(..., weight=...) (or leave epoch_size unset)."
            )
        for split in ("val", "test"):
            if any(s.weight is not None or s.repeat is not None for s in sources.get(split) or []):
                raise ValueError(
                    f"{SPLIT_FILES[split]}: every source of an evaluation split is read once; "
                    "drop weight= and repeat= there."
                )
        self.sources, self.epoch_size, self.eval_per_source = sources, epoch_size, eval_per_source
        self.seq_length, self.seed = seq_length, seed

    def corpus(self, split: str, read: Callable[[Source], Any]) -> BlendCorpus | None:
        """The split's blend (``read(source)`` gives a source's conversations), or None."""
        sources = self.sources.get(split)
        if sources is None:
            return None
        return BlendCorpus([read(s) for s in sources], [s.label for s in sources])

    def units(self, name: str, lengths: np.ndarray, shuffle: bool) -> BlendUnits:
        planner = None
        if self.seq_length is not None:
            planner = PackPlanner(lengths, self.seq_length, "whole", shuffle, self.seed)
        return BlendUnits(name, lengths, planner, shuffle, self.seed)

    def view(
        self,
        split: str,
        blend: BlendCorpus,
        indices: torch.Tensor,
        *,
        shuffle: bool,
        transform: Any,
        pad_id: int,
        pad_to: int | None,
    ) -> ChatMixedPackedView | ChatMixedDocView:
        """The split's view over its conversations of every source."""
        docs = blend.split(indices)
        units = [
            self.units(name, part.encoded.lengths_np[mine], shuffle)
            for part, name, mine in zip(blend.parts, blend.names, docs, strict=True)
        ]
        weighted = self.sources["train"] if split == "train" else None
        entries = [
            MixEntry(
                unit.name,
                weighted[k].weight if weighted else None,
                weighted[k].repeat if weighted else None,
                unit.count,
                blend_listing(part),
            )
            for k, (part, unit) in enumerate(zip(blend.parts, units, strict=True))
        ]
        mixture = Mixture(entries, self.epoch_size if weighted else None)
        args = ([p.encoded for p in blend.parts], docs, units, mixture, transform, pad_id)
        trained = [p.trained for p in blend.parts]
        if self.seq_length is not None:
            return ChatMixedPackedView(*args, trained=trained)
        return ChatMixedDocView(*args, trained=trained, pad_to=pad_to)

    @staticmethod
    def sampler(
        view: Any, batch_size: int, drop_last: bool, seed: int, rank: int, world: int
    ) -> MixedSampler:
        """The blend's batch sampler for this rank."""
        sampler = MixedSampler(
            view.mixture,
            batch_size,
            shuffle=view.units[0].shuffle if view.units else False,
            drop_last=drop_last,
            seed=seed,
            num_replicas=world,
            rank=rank,
        )
        sampler.unit = "row" if isinstance(view, ChatMixedPackedView) else "conversation"
        sampler.resume = _Refuse(view.mixture)
        return sampler


class _Refuse:
    """A sampler's ``resume`` that refuses a checkpoint's other mix, saying what changed."""

    def __init__(self, mixture: Mixture) -> None:
        self.mixture = mixture

    def __call__(self, saved: dict[str, Any], cut: bool) -> Mixture:
        changes = self.mixture.changes(saved) or ["the sources' data or positions"]
        raise ValueError(
            "cannot resume the chat blend: its mix differs from the checkpoint's ("
            + "; ".join(changes)
            + "); resume with the checkpoint's sources, weights and epoch_size."
        )
