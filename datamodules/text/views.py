"""The views and batch samplers of TextDataModule's splits: padded documents, packed rows, or a
blend of sources.

:class:`TextViews` is a part :class:`~datamodules.TextDataModule` holds (``dm.views``; its own
state: the pack planners of the splits), reading the DataModule's batching settings. It says,
per split, what
the loader's dataset is (:meth:`TextViews.make_view`: a
:class:`~datamodules.tokens.encoding.TextBatchView` of padded documents, a
:class:`~datamodules.tokens.packing.PackedTextView` of packed rows, or a blend's view from its
blends component, :class:`~datamodules.tokens.blends.TokenBlends`) and which batch sampler
draws from it (:meth:`TextViews.make_sampler`: length buckets, packed rows, or a blend's
quotas).
"""

from __future__ import annotations

from typing import Any

import torch

from datamodules.core.buckets import BucketBatchSampler
from datamodules.core.samplers import IndexBatchSampler
from datamodules.core.views import SplitView
from datamodules.text.readers import TextRecords
from datamodules.tokens.encoding import TextBatchView
from datamodules.tokens.mixture import BlendCorpus
from datamodules.tokens.packing import PackedRowSampler, PackedTextView, PackPlanner

__all__ = ["TextViews"]


class TextViews:
    """The views and samplers of a :class:`~datamodules.TextDataModule`'s splits.

    Args:
        dm: The DataModule whose splits and settings these are.

    Attributes:
        planners: Per split, its pack planner (``packing=True``), made once.
    """

    def __init__(self, dm: Any) -> None:
        self.dm = dm
        self.planners: dict[str, PackPlanner] = {}

    def planner(self, split: str) -> PackPlanner:
        """The pack planner of a split (``packing=True``): its rows for every epoch."""
        dm = self.dm
        indices = dm._require_setup()[split]
        if split not in self.planners:
            lengths = dm.split_datasets[split].encoded.lengths_np[indices.numpy()]
            shuffle = dm.shuffle and split == "train"
            self.planners[split] = PackPlanner(
                lengths, dm.seq_length, dm.pack_mode, shuffle, dm.shuffle_seed
            )
        return self.planners[split]

    def make_view(self, split: str, dataset: TextRecords, indices: torch.Tensor) -> SplitView:
        """The split's batch view: padded documents, packed rows, or a blend's."""
        dm = self.dm
        if isinstance(dataset, BlendCorpus):
            return dm.blends.view(split, dataset, indices)
        if dm.packing:
            planner = self.planner(split)
            return PackedTextView(
                dataset.encoded, indices, dm.transform_for(split), planner, dm.pad_id
            )
        return TextBatchView(
            dataset.encoded,
            indices,
            dm.transform_for(split),
            dm.pad_id,
            dm.padding_side,
            dm.pad_to_multiple_of,
        )

    def make_sampler(self, split: str, view: SplitView, rank: int, world: int) -> IndexBatchSampler:
        """The split's batch sampler: length buckets, packed rows, or a blend's quotas."""
        dm, train = self.dm, split == "train"
        if hasattr(view, "mixture"):  # a blend (datamodules/tokens/mixture.py)
            return dm.blends.sampler(split, view, rank, world)
        if isinstance(view, PackedTextView):
            return PackedRowSampler(
                view.planner,
                dm.batch_size,
                drop_last=dm.drop_last and train,
                num_replicas=world,
                rank=rank,
            )
        assert isinstance(view, TextBatchView)
        return BucketBatchSampler(
            view.lengths,
            dm.batch_size if dm.batch_by == "samples" else None,
            batch_by=dm.batch_by,
            max_tokens=dm.max_tokens,
            bucket=dm.bucket if train else dm.eval_bucket,
            pool_batches=dm.pool_batches,
            pad_to_multiple_of=dm.pad_to_multiple_of,
            shuffle=dm.shuffle and train,
            drop_last=dm.drop_last and train,
            seed=dm.shuffle_seed,
            num_replicas=world,
            rank=rank,
        )

    def check_budget(self, records: TextRecords) -> None:
        """Refuses, with ``batch_by="tokens"``, a document whose padded length exceeds
        ``max_tokens``, naming where it is."""
        dm = self.dm
        if dm.batch_by != "tokens" or not len(records):
            return
        lengths = records.encoded.lengths
        longest = int(lengths.max())
        padded = longest
        if dm.pad_to_multiple_of:
            padded = -(-longest // dm.pad_to_multiple_of) * dm.pad_to_multiple_of
        if padded > dm.max_tokens:
            where = records.where(int(torch.argmax(lengths)))
            raise ValueError(
                f"{where}: {longest} tokens ({padded} padded) exceed max_tokens="
                f"{dm.max_tokens}: raise max_tokens or set max_length to truncate."
            )
