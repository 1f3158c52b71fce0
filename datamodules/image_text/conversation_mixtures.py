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
the records of one source, and a mix changed between a checkpoint and its resume is refused
(the same mix resumes exactly).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from datamodules.core.mixture import MixEntry, Mixture
from datamodules.core.views import SplitView
from datamodules.image_text.conversation_views import (
    BudgetBatches,
    ImageConversations,
    PackedConversationView,
    PaddedConversationView,
)
from datamodules.tokens.mixture import EPOCH_SHIFT, UNIT_MASK, BlendUnits, mixed_units

__all__ = ["ConversationBlend", "MixedConversationView", "refuse_changed_mix"]


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
        transform, pad_id = dm.transform_for(split), parts.chat.pad_id
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
                view: Any = PackedConversationView(
                    docs, plan, transform, pad_id, dm.decode, dm.image_size
                )
            else:
                plan = _PaddedBatches(docs, dm.batch_size, shuffle, seed)
                view = PaddedConversationView(
                    docs, everything, transform, pad_id, dm.decode, dm.image_size
                )
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
        self.units, self.names = units, list(blend.names)
        self.mixture = Mixture(entries, None)
        super().__init__(torch.arange(self.mixture.total(0), dtype=torch.int64), None)
        self._epochs: dict[int, tuple[np.ndarray, np.ndarray]] = {}

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


def refuse_changed_mix(saved: dict[str, Any], interrupted: bool) -> Mixture:
    """What a conversation mix does with a checkpoint of another mix: refuses it."""
    raise ValueError(
        "cannot resume the conversation mix: the checkpoint's sources, weights or records "
        "differ from this run's; resume with the same train_files Sources (a mix changed "
        "between a checkpoint and its resume is not supported for conversations yet)."
    )
