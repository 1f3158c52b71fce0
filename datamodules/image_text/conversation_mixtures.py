"""Mixtures of conversation sources: ``train_files=[Source(...), Source(...)]`` with
``messages_key=`` (a captioning set and a VQA set, with weights or a schedule).

Each source is rendered into its own store and batched on its own: packed, its records are
planned once under both budgets (:class:`~datamodules.image_text.conversation_views.BudgetBatches`);
padded, its records are cut into batches of ``batch_size`` in an order drawn from the seed and
the source's name. A batch is the unit the mix counts: epoch ``e`` takes each source's quota
of batches (:class:`~datamodules.core.mixture.Mixture`: weights, schedules, ``repeat``; each
source's batches as a run of passes, none repeated before its pass is complete), and the
tokens layer's :class:`~datamodules.tokens.mixture.MixedSampler` shuffles the epoch's batches,
deals them to the ranks evenly and resumes them exactly and elastically. So every batch holds
the records of one source. A mix changed between a checkpoint and its resume continues as a
text or chat blend's does (:meth:`MixedConversationView.continue_mix`): the interrupted epoch
ends as it was planned, the new weights, schedules and sources apply from the next epoch, each
source going on with its run of passes; a source removed since that still owes batches to
the interrupted epoch is refused, naming it (its records are no longer rendered).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from datamodules.core.context import log
from datamodules.core.mixture import MixEntry, Mixture, resume_message
from datamodules.core.views import SplitView
from datamodules.image_text.conversation_views import (
    BudgetBatches,
    ImageConversations,
    PackedConversationView,
    PaddedConversationView,
)
from datamodules.imaging.decoding import preload as preload_decoders
from datamodules.tokens.mixture import EPOCH_SHIFT, UNIT_MASK, BlendUnits, mixed_units

__all__ = ["ConversationBlend", "MixedConversationView"]


class ConversationBlend:
    """The records of a mixed split: one :class:`ImageConversations` per source.

    Args:
        parts: The sources' records, in order.
        names: The sources' names.
        sources: The :class:`~datamodules.Source` objects (their weights and repeats).
    """

    def __init__(self, parts: list[ImageConversations], names: list[str], sources: Any) -> None:
        self.parts, self.names, self.sources = parts, names, list(sources)

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    @property
    def num_tokens(self) -> int:
        """Tokens over the sources."""
        return sum(p.num_tokens for p in self.parts)

    @property
    def num_images(self) -> int:
        """Images over the sources."""
        return sum(p.num_images for p in self.parts)


class _PaddedBatches:
    """A source's records cut into batches of ``batch_size`` in an order drawn once."""

    def __init__(self, docs: ImageConversations, batch_size: int, shuffle: bool, seed: int):
        order = np.arange(len(docs), dtype=np.int64)
        if shuffle:
            order = np.random.default_rng(seed).permutation(order)
        self.chunks = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        self.num_batches = len(self.chunks)


class MixedConversationView(SplitView):
    """One batch of one source per index: ``epoch << 32 | position`` in the epoch's batches.

    Args:
        dm: The DataModule (its transforms, ``decode``, ``image_size``, ``batch_size``,
            ``shuffle`` and seed).
        blend: The split's sources.
        parts: The :class:`~datamodules.image_text.conversations.ConversationParts`.
        split: The split's name.
    """

    def __init__(self, dm: Any, blend: ConversationBlend, parts: Any, split: str) -> None:
        shuffle = dm.shuffle and split == "train"
        pixels, pad_id = parts.pixels(dm, split), parts.chat.pad_id
        self.views: list[Any] = []
        self.plans: list[Any] = []
        units, entries = [], []
        for k, (docs, name) in enumerate(zip(blend.parts, blend.names, strict=True)):
            seed = dm.shuffle_seed + 7919 * (k + 1)
            everything = torch.arange(len(docs), dtype=torch.int64)
            if parts.packing:
                plan: Any = BudgetBatches(
                    docs, everything, parts.seq_length, dm.batch_size, parts.max_images,
                    shuffle=shuffle, seed=seed,
                )  # fmt: skip
                view: Any = PackedConversationView(docs, plan, pixels, pad_id)
            else:
                plan = _PaddedBatches(docs, dm.batch_size, shuffle, seed)
                view = PaddedConversationView(docs, everything, pixels, pad_id)
            self.views.append(view)
            self.plans.append(plan)
            count = plan.num_batches
            units.append(BlendUnits(name, np.zeros(count, np.int64), None, shuffle, seed))
            source = blend.sources[k] if split == "train" else None
            listing = [[docs.path, len(docs), docs.num_tokens, docs.num_images]]
            entries.append(
                MixEntry(
                    name,
                    getattr(source, "weight", None),
                    getattr(source, "repeat", None),
                    count,
                    listing,
                )  # fmt: skip
            )
        self.units, self.names, self.owner = units, list(blend.names), type(dm).__name__
        self.mixture = Mixture(entries, None)
        super().__init__(torch.arange(self.mixture.total(0), dtype=torch.int64), None)
        self._epochs: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def continue_mix(self, saved: dict[str, Any], interrupted: bool) -> Mixture:
        """A checkpoint's train mix continued over these sources (the sampler's ``resume``):
        this view then draws the batches of the mix continued, as the sampler deals them.

        Raises:
            ValueError: A source holds other records than in the checkpoint, or one removed
                since still owes batches to the epoch the checkpoint interrupted.
        """
        base = self.mixture.base or self.mixture
        owing = [
            s["name"] for s in saved["sources"]
            if interrupted and int(s["quota"]) and s["name"] not in base.names
        ]  # fmt: skip
        if owing:
            raise ValueError(
                f"cannot end epoch {int(saved['epoch'])} as it was planned: source(s) {owing}, "
                "no longer in train_files, still owe it batches; keep them until that epoch "
                "ends, or resume from a checkpoint taken at the end of an epoch."
            )
        resumed = base.resumed(saved, interrupted)  # raises if a source holds other records
        for entry in resumed.entries[len(self.units) :]:  # removed, owing nothing: a place
            self.units.append(BlendUnits(entry.name, np.zeros(0, np.int64), None, False, 0))
        changes = base.changes(saved)
        if changes and rank_zero_only.rank == 0:
            log.info(resume_message(self.owner, changes, int(saved["epoch"]), interrupted))
        self.mixture, self._epochs = resumed, {}
        return resumed

    def epoch_batches(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """``(source, batch)`` of each of the epoch's batches, in the mix's order."""
        if epoch not in self._epochs:
            pieces = mixed_units(self.units, self.mixture, epoch)
            sources = [np.full(len(u), s, np.int64) for s, _, u in pieces]
            batches = [np.asarray(u, np.int64) for _, _, u in pieces]
            empty = np.zeros(0, np.int64)
            self._epochs = {
                epoch: (
                    np.concatenate(sources) if sources else empty,
                    np.concatenate(batches) if batches else empty,
                )
            }
        return self._epochs[epoch]

    def preload(self) -> None:
        """Imports the image decoders (before the loader forks its workers)."""
        preload_decoders()

    def __getitem__(self, batch: torch.Tensor) -> dict[str, Any]:
        if batch.numel() != 1:
            raise ValueError(f"a mixed conversation batch is one source's batch, got {batch}.")
        unit = int(batch)
        sources, batches = self.epoch_batches(unit >> EPOCH_SHIFT)
        s, b = int(sources[unit & UNIT_MASK]), int(batches[unit & UNIT_MASK])
        plan = self.plans[s]
        if isinstance(plan, _PaddedBatches):
            return self.views[s][torch.from_numpy(plan.chunks[b])]
        return self.views[s][torch.tensor([b])]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_epochs": {}}
