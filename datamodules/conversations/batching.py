"""The batching of a record store's splits: padded or packed views, samplers, pack planners.

:class:`RecordBatching` is a part :class:`~datamodules.ChatDataModule` and
:class:`~datamodules.PreferenceDataModule` hold (``dm.batching``), with its own state: per
split, its documents (one store's, or a blend's :class:`~datamodules.tokens.mixture.BlendCorpus`)
and its pack planner. It reads the DataModule's batching settings (``packing``,
``seq_length``, ``batch_size``, ``bucket``, ``pad_to_multiple_of``, ``shuffle``, ...) and its
blends component (``dm.blends``, :class:`~datamodules.tokens.blends.TokenBlends`), and says per
split which view serves the loader (the kind's padded or packed view, or the blend's) and which
batch sampler draws from it (length buckets, packed rows, or the blend's quotas); it writes the
summary lines both kinds share (inputs per split, quotas, overlong, skipped, the rows' fill).

The kind's views gather ids and the store's per-token mask beside them, the same way:
:class:`StorePaddedView` (padded) and :class:`StorePackedView` (packed rows); a kind says only
what a batch becomes (:meth:`StorePaddedView.batch`, :meth:`StorePackedView.batch`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from collates.pack_rows import gather_rows
from datamodules.core.buckets import BucketBatchSampler
from datamodules.core.checks import check_bool, check_choice, check_int, check_on_error
from datamodules.core.overlong import OVERLONG
from datamodules.core.samplers import IndexBatchSampler
from datamodules.core.views import SplitView
from datamodules.tokens.encoding import TextBatchView, gather_padded
from datamodules.tokens.mixture import BlendCorpus
from datamodules.tokens.packing import PackedRowSampler, PackedTextView, PackPlanner, packing_lines

__all__ = ["RecordBatching", "StorePackedView", "StorePaddedView", "check_batching"]


def check_batching(
    packing: Any,
    seq_length: Any,
    max_length: Any,
    bucket: Any,
    overlong: Any,
    on_error: Any,
    *,
    unit: str,
    shortest_row: int = 1,
    row_limit: str = "",
) -> None:
    """Checks a record DataModule's batching arguments.

    Args:
        packing: ``packing=``.
        seq_length: ``seq_length=``.
        max_length: ``max_length=``.
        bucket: ``bucket=``.
        overlong: ``overlong=``.
        on_error: ``on_error=``.
        unit: What ``max_length`` limits, for the messages (``"conversation"``).
        shortest_row: The least ``seq_length``.
        row_limit: What ``seq_length`` limits when packing, said after it in a message.

    Raises:
        TypeError: A value of the wrong type, named.
        ValueError: A value out of range, or arguments that do not go together, named.
    """
    check_bool(packing, "packing")
    check_int(seq_length, "seq_length", shortest_row, allow_none=True)
    check_int(max_length, "max_length", 1, allow_none=True)
    check_bool(bucket, "bucket")
    check_choice(overlong, "overlong", OVERLONG)
    check_on_error(on_error)
    if packing and seq_length is None:
        raise ValueError("packing=True needs seq_length= (tokens per packed row).")
    if not packing and seq_length is not None:
        raise ValueError(
            f"seq_length={seq_length} is the row length of packing=True: give packing=True, "
            f"or max_length= for the longest padded {unit}."
        )
    if packing and max_length is not None:
        raise ValueError(
            f"max_length={max_length} limits padded {unit}s; with packing=True the limit is "
            f"seq_length={seq_length}{row_limit}: drop max_length."
        )


class StorePaddedView(TextBatchView):
    """Padded batches of a store's documents with their per-token mask beside the ids.

    Args:
        docs: The split's documents (``encoded`` ids, ``trained`` mask, same offsets).
        indices: Positions of the split's documents in ``docs``.
        transform: Applied to each whole batch dict.
        pad_id: Id written at padding.
        pad_to_multiple_of: Round each batch's padded length up to a multiple of this.
    """

    def __init__(
        self,
        docs: Any,
        indices: torch.Tensor,
        transform: Callable[[Any], Any] | None,
        pad_id: int,
        pad_to_multiple_of: int | None = None,
    ) -> None:
        super().__init__(docs.encoded, indices, transform, pad_id, "right", pad_to_multiple_of)
        self.trained = docs.trained

    def batch(
        self, ids: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor, flags: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """The kind's batch from the padded ids, attention mask, lengths and mask values."""
        raise NotImplementedError

    def __getitem__(self, batch: torch.Tensor) -> Any:
        rows = self.rows(batch)
        multiple = self.pad_to_multiple_of
        ids, mask, lengths = gather_padded(self.encoded, rows, self.pad_id, "right", multiple)
        flags, _, _ = gather_padded(self.trained, rows, 0, "right", multiple)
        out = self.batch(ids, mask, lengths, flags)
        return self.transform(out) if self.transform is not None else out


class StorePackedView(PackedTextView):
    """Packed rows of whole documents with their per-token mask gathered beside the ids.

    Args:
        docs: The split's documents (``encoded`` ids, ``trained`` mask, same offsets).
        indices: Positions of the split's documents in ``docs``.
        transform: Applied to each whole batch dict.
        planner: The split's pack planner (``"whole"``).
        pad_id: Id written at padding.
    """

    def __init__(
        self,
        docs: Any,
        indices: torch.Tensor,
        transform: Callable[[Any], Any] | None,
        planner: PackPlanner,
        pad_id: int,
    ) -> None:
        super().__init__(docs.encoded, indices, transform, planner, pad_id)
        self.mask_np = docs.trained.tokens_np

    def batch(self, out: dict[str, Any], flags: torch.Tensor) -> dict[str, Any]:
        """The kind's batch from the packed keys and the rows' mask values."""
        raise NotImplementedError

    def __getitem__(self, batch: torch.Tensor | list[torch.Tensor]) -> Any:
        if isinstance(batch, list):  # several batches for one worker message
            return [self[b] for b in batch]
        epoch, rows = self._rows(batch)
        table = self.row_table(epoch)
        out = gather_rows(self.encoded.tokens_np, table, rows, self.pad_id)
        flags = gather_rows(self.mask_np, table, rows, 0)["input_ids"]
        out = self.batch(out, flags)
        return self.transform(out) if self.transform is not None else out


class RecordBatching:
    """The documents, views, samplers and planners of a record DataModule's splits.

    Args:
        dm: The DataModule whose splits and settings these are.
        packed: The kind's packed view (a :class:`StorePackedView`).
        padded: The kind's padded view (a :class:`StorePaddedView`).

    Attributes:
        documents: Per split, its documents (or a blend's corpus), read once.
        planners: Per split, its pack planner (``packing=True``), made once.
    """

    def __init__(self, dm: Any, packed: type[StorePackedView], padded: type[StorePaddedView]):
        self.dm, self.packed, self.padded = dm, packed, padded
        self.documents: dict[str, Any] = {}
        self.planners: dict[str, PackPlanner] = {}

    def split_documents(self, split: str, read: Callable[[], Any]) -> Any:
        """``split``'s documents: a blend's corpus, else what ``read()`` gives; once."""
        if split not in self.documents:
            blend = self.dm.blends.corpus(split)
            self.documents[split] = blend if blend is not None else read()
        return self.documents[split]

    def given(self, split: str) -> bool:
        """Whether ``split`` has inputs of its own (``val_file`` / ``test_file``)."""
        dm = self.dm
        return dm.corpus.has_split(split) or dm.blends.sources.get(split) is not None

    def given_splits(self) -> list[str]:
        """The evaluation splits with inputs of their own."""
        return [s for s in ("val", "test") if self.given(s)]

    def parts(self) -> list[Any]:
        """Every input's documents, a blend's sources one by one."""
        return [p for d in self.documents.values() for p in getattr(d, "parts", [d])]

    def planner(self, split: str) -> PackPlanner:
        """The pack planner of a split (``packing=True``): whole documents, best fit."""
        dm = self.dm
        indices = dm._require_setup()[split]
        if split not in self.planners:
            lengths = dm.split_datasets[split].encoded.lengths_np[indices.numpy()]
            shuffle = dm.shuffle and split == "train"
            self.planners[split] = PackPlanner(
                lengths, dm.seq_length, "whole", shuffle, dm.shuffle_seed
            )
        return self.planners[split]

    def make_view(self, split: str, dataset: Any, indices: torch.Tensor) -> SplitView:
        """The split's view: the blend's, packed rows or padded documents."""
        dm = self.dm
        transform = dm.transform_for(split)
        if isinstance(dataset, BlendCorpus):
            return dm.blends.view(split, dataset, indices)
        if dm.packing:
            return self.packed(dataset, indices, transform, self.planner(split), dm.pad_id)
        multiple = () if dm.pad_to_multiple_of is None else (dm.pad_to_multiple_of,)
        return self.padded(dataset, indices, transform, dm.pad_id, *multiple)

    def make_sampler(self, split: str, view: SplitView, rank: int, world: int) -> IndexBatchSampler:
        """The split's batch sampler: the blend's quotas, packed rows or length buckets."""
        dm, train = self.dm, split == "train"
        if hasattr(view, "mixture"):  # a blend (datamodules/tokens/blends.py)
            return dm.blends.sampler(split, view, rank, world)
        if isinstance(view, StorePackedView):
            return PackedRowSampler(
                view.planner,
                dm.batch_size,
                drop_last=dm.drop_last and train,
                num_replicas=world,
                rank=rank,
            )
        assert isinstance(view, StorePaddedView)
        return BucketBatchSampler(
            view.lengths,
            dm.batch_size,
            bucket=dm.bucket and train,
            pad_to_multiple_of=dm.pad_to_multiple_of,
            shuffle=dm.shuffle and train,
            drop_last=dm.drop_last and train,
            seed=dm.shuffle_seed,
            num_replicas=world,
            rank=rank,
        )

    def summary_lines(
        self, describe: Callable[[Any], str], overlong: Callable[[], str]
    ) -> list[str]:
        """Per input, ``describe(docs)`` and its store; a train blend's quotas; overlong (with
        a limit), skipped, and (packing) the rows' fill. Empty before ``setup``."""
        dm, lines = self.dm, []
        if dm.split_indices is None:
            return lines
        for split, given in self.documents.items():
            names = getattr(given, "names", [None])
            for name, docs in zip(names, getattr(given, "parts", [given]), strict=True):
                lines.append(
                    f"  {split} {'inputs' if name is None else f'source {name!r}'}: "
                    f"{describe(docs)} (store {docs.path})"
                )
            if split == "train" and dm.blends.mixture("train") is not None:
                epoch = getattr(dm._samplers.get("train"), "epoch", 0)
                lines.append(f"  train quotas, epoch {epoch}: {dm.blends.quotas(epoch)}")
        if dm.limit is not None:
            lines.append(f"  overlong: {overlong()}")
        lines.append(f"  skipped: {dm.skipped.summary().splitlines()[0]}")
        if dm.packing:
            sampler = dm._samplers.get("train")
            for split, idx in dm.split_indices.items():
                if len(idx) and not isinstance(dm.split_datasets[split], BlendCorpus):
                    epoch = sampler.epoch if split == "train" and sampler is not None else 0
                    lines.append("  " + packing_lines(self.planner(split), split, epoch))
        return lines
