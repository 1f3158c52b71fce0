"""The views and batch samplers of TextDataModule's splits: padded documents, packed rows, or a
blend of sources.

:class:`TextViews` is mixed into :class:`~datamodules.TextDataModule`: it says, per split, what
the loader's dataset is (:meth:`TextViews.make_view`: a
:class:`~datamodules.tokens.encoding.TextBatchView` of padded documents, a
:class:`~datamodules.tokens.packing.PackedTextView` of packed rows, or a blend's view from its
blends component, :class:`~datamodules.tokens.blends.TokenBlends`) and which batch sampler
draws from it (:meth:`TextViews.make_sampler`: length buckets, packed rows, or a blend's
quotas); a blend's evaluation loaders one per source (``eval_per_source=True``).
"""

from __future__ import annotations

from typing import Any

import torch

from datamodules.core.buckets import BucketBatchSampler
from datamodules.core.samplers import IndexBatchSampler
from datamodules.core.views import SplitView
from datamodules.text.readers import TextRecords
from datamodules.tokens.blends import TokenBlends
from datamodules.tokens.encoding import TextBatchView
from datamodules.tokens.mixture import BlendCorpus
from datamodules.tokens.packing import PackedRowSampler, PackedTextView, PackPlanner

__all__ = ["TextViews"]


class TextViews:
    """The loader side of :class:`~datamodules.TextDataModule` (a mixin): views and samplers."""

    _planners: dict[str, PackPlanner]
    blends: TokenBlends
    split_datasets: dict[str, Any]

    def planner(self, split: str) -> PackPlanner:
        """The pack planner of a split (``packing=True``): its rows for every epoch."""
        indices = self._require_setup()[split]
        if split not in self._planners:
            lengths = self.split_datasets[split].encoded.lengths_np[indices.numpy()]
            shuffle = self.shuffle and split == "train"
            self._planners[split] = PackPlanner(
                lengths, self.seq_length, self.pack_mode, shuffle, self.shuffle_seed
            )
        return self._planners[split]

    def make_view(self, split: str, dataset: TextRecords, indices: torch.Tensor) -> SplitView:
        if isinstance(dataset, BlendCorpus):
            return self.blends.view(split, dataset, indices)
        if self.packing:
            planner = self.planner(split)
            return PackedTextView(
                dataset.encoded, indices, self.transform_for(split), planner, self.pad_id
            )
        return TextBatchView(
            dataset.encoded,
            indices,
            self.transform_for(split),
            self.pad_id,
            self.padding_side,
            self.pad_to_multiple_of,
        )

    def make_loader(self, split: str) -> Any:
        """The base's loader; a blend's train loader re-measured after a held epoch."""
        return self.blends.on_loader(split, super().make_loader(split))  # type: ignore[misc]

    def val_dataloader(self) -> Any:
        """The validation loader; with ``eval_per_source=True`` and a blend, one per source."""
        if self.blends.per_source("val"):
            return self.blends.source_loaders("val")
        return super().val_dataloader()  # type: ignore[misc]

    def test_dataloader(self) -> Any:
        """The test loader; with ``eval_per_source=True`` and a blend, one per source."""
        if self.blends.per_source("test"):
            return self.blends.source_loaders("test")
        return super().test_dataloader()  # type: ignore[misc]

    def make_sampler(self, split: str, view: SplitView, rank: int, world: int) -> IndexBatchSampler:
        train = split == "train"
        if hasattr(view, "mixture"):  # a blend (datamodules/tokens/mixture.py)
            return self.blends.sampler(split, view, rank, world)
        if isinstance(view, PackedTextView):
            return PackedRowSampler(
                view.planner,
                self.batch_size,
                drop_last=self.drop_last and train,
                num_replicas=world,
                rank=rank,
            )
        assert isinstance(view, TextBatchView)
        return BucketBatchSampler(
            view.lengths,
            self.batch_size if self.batch_by == "samples" else None,
            batch_by=self.batch_by,
            max_tokens=self.max_tokens,
            bucket=self.bucket if train else self.eval_bucket,
            pool_batches=self.pool_batches,
            pad_to_multiple_of=self.pad_to_multiple_of,
            shuffle=self.shuffle and train,
            drop_last=self.drop_last and train,
            seed=self.shuffle_seed,
            num_replicas=world,
            rank=rank,
        )
