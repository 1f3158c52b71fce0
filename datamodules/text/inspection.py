"""What ``python -m datamodules inspect`` shows for texts: labels, lengths, and the padding
that length buckets save (or, with ``packing=True``, the rows' fill and a picture of one
batch's rows as bars of document pieces).

:class:`TextInspection` is a part :class:`~datamodules.TextDataModule` holds
(``dm.inspection``): it keeps no state of its own and reads the DataModule it describes; the
DataModule's inspect hooks (see :meth:`~datamodules.BaseDataModule.describe_data`) hand their
work to it.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from datamodules.core.buckets import BucketBatchSampler
from datamodules.core.summary import counted
from datamodules.tokens.mixture import BlendCorpus
from datamodules.tokens.vocab import describe_tokenizer

__all__ = ["TextInspection"]


class TextInspection:
    """The summary lines and inspect hooks of a :class:`~datamodules.TextDataModule`.

    Args:
        dm: The DataModule described.
    """

    def __init__(self, dm: Any) -> None:
        self.dm = dm

    def extra_summary(self) -> list[str]:
        """The tokenizer, the token buffer, the labels and the batching (for ``summary()``),
        then a line per source of each blended split and its schedule."""
        dm = self.dm
        if not dm._sources:
            return []
        return self._corpus_summary() + dm.blends.summary_lines()

    def _corpus_summary(self) -> list[str]:
        dm = self.dm
        if dm.vocab:
            name = f"{dm.tokenizer}-level vocabulary"
        elif dm.tokenizer is None:  # token_files: the ids are read as they are
            name = f"none ({getattr(dm.dataset, 'kind', 'pre-tokenized')} token_files)"
        else:
            name = describe_tokenizer(dm.tokenizer)
        lengths = torch.cat([s.encoded.lengths for s in dm._sources]).float()
        lines = [
            f"  tokenizer: {name}, vocab_size={dm.vocab_size}, pad_id={dm.pad_id}, "
            f"max_length={dm.max_length}",
            f"  tokens: {int(lengths.sum())} {self._token_home()}; length mean "
            f"{float(lengths.mean()):.1f}, max {int(lengths.max())}",
        ]
        if dm.label_names is not None:
            names = dm.label_names
            shown = ", ".join(map(repr, names[:8])) + (
                f", ... ({len(names) - 8} more)" if len(names) > 8 else ""
            )
            lines.append(f"  labels: {counted(len(names), 'class', 'classes')}: {shown}")
        if dm.packing:
            return lines + self.packing_summary()
        budget = f" (max_tokens={dm.max_tokens})" if dm.batch_by == "tokens" else ""
        line = (
            f"  batches: by {dm.batch_by}{budget}, bucket={dm.bucket} "
            f"(pool_batches={dm.pool_batches}), eval_bucket={dm.eval_bucket}"
        )
        sampler = dm._samplers.get("train")
        if isinstance(sampler, BucketBatchSampler):
            line += (
                f"; train: {counted(len(sampler), 'batch')} per rank, padding efficiency "
                f"{sampler.padding_efficiency(sampler.epoch):.3f} (epoch {sampler.epoch})"
            )
        lines.append(line)
        return lines

    def _token_home(self) -> str:
        """Where the tokens are: one flat buffer, or the token store / token file mapped."""
        dm = self.dm
        homes = []
        for source in dm._sources:
            path = getattr(source, "path", None) or getattr(source, "name", None)
            if path is not None:
                homes.append(f"{path} ({source.encoded.tokens_np.dtype.name})")
        if not homes:
            return "in one flat buffer"
        return "memory-mapped from " + ", ".join(homes)

    def describe_data(self) -> list[str]:
        """What ``python -m datamodules inspect`` prints about the texts, per split.

        The sample count and each label's count (by :attr:`label_names`), the length
        statistics in tokens, and the padding efficiency (real tokens / padded tokens) of the
        split's batches in epoch 0 beside that of random batches of the same sizes, which is
        what the batches would pad without length buckets.
        """
        dm = self.dm
        from datamodules.tools.descriptions import (
            describe_datamodule,
            length_stats,
            padding_comparison,
        )

        indices = dm._require_setup()
        if dm.packing:
            return self._describe_packing(describe_datamodule, length_stats)
        labels = {}
        for split, idx in indices.items():
            encoded = dm.split_datasets[split].encoded.labels
            labels[split] = None if encoded is None else encoded[idx]
        lines = describe_datamodule(dm, names=dm.label_names, split_labels=labels)
        lines.append("lengths (tokens per sample):")
        for split, idx in indices.items():
            lengths = dm.split_datasets[split].encoded.lengths[idx]
            lines.append(f"  {split}: {length_stats(lengths)}")
        size = (
            f"max_tokens={dm.max_tokens}"
            if dm.batch_by == "tokens"
            else f"batch_size={dm.batch_size}"
        )
        lines.append(
            f"padding efficiency of epoch 0 (real / padded tokens; batch_by={dm.batch_by!r}, "
            f"{size}), against random batches of the same sizes:"
        )
        for split, idx in indices.items():
            if not len(idx):
                lines.append(f"  {split}: no batches")
                continue
            view = dm.view(split)
            batches = dm.make_sampler(split, view, 0, 1).epoch_batches(0)
            ours, random = padding_comparison(view.lengths, batches, dm.pad_to_multiple_of)
            flag = f"bucket={dm.bucket}" if split == "train" else f"eval_bucket={dm.eval_bucket}"
            lines.append(
                f"  {split}: {ours:.1%} in {len(batches)} batches ({flag}); random: {random:.1%}"
            )
        return lines

    def plot_batch(self, batch: Any, path: str | os.PathLike[str], *, split: str = "train") -> Any:
        """Draws the lengths and padding of ``split``, with ``batch`` marked, to a PNG.

        The picture (:func:`~datamodules.tools.pictures.plot_padding`): the histogram of the
        split's lengths with the batch's lengths shaded and its padded width dashed; below,
        the real and padded tokens of every batch of epoch 0, beside random batches of the
        same sizes, so it shows what length bucketing saves.

        Args:
            batch: One batch of ``split`` (its ``lengths`` and ``input_ids`` are used).
            path: The PNG file to write.
            split: The split the batch came from.

        Returns:
            The path written.
        """
        dm = self.dm
        from datamodules.tools.pictures import plot_padding

        if not dm.split_size(split):
            raise ValueError(f"plot_batch: the {split} split is empty: nothing to draw.")
        if dm.packing:
            return self._plot_packed(batch, path, split)
        view = dm.view(split)
        batches = dm.make_sampler(split, view, 0, 1).epoch_batches(0)
        lengths = padded_to = None
        if isinstance(batch, dict) and "lengths" in batch:
            lengths = batch["lengths"]
            if "input_ids" in batch:
                padded_to = int(batch["input_ids"].shape[1])
        bucket = dm.bucket if split == "train" else dm.eval_bucket
        size = (
            f"max_tokens={dm.max_tokens}"
            if dm.batch_by == "tokens"
            else f"batch_size={dm.batch_size}"
        )
        title = (
            f"{type(dm).__name__}, {split} split: {len(view):,} texts in {len(batches):,} "
            f"batches of epoch 0 ({size}, {'eval_' if split != 'train' else ''}bucket={bucket})"
        )
        return plot_padding(
            view.lengths,
            batches,
            path,
            batch_lengths=lengths,
            padded_to=padded_to,
            pad_to_multiple_of=dm.pad_to_multiple_of,
            title=title,
        )

    # ------------------------------------------------------------------ packing
    def packing_summary(self) -> list[str]:
        """Summary lines of ``packing=True``: rows per epoch, real tokens, documents cut
        across rows (the train line above gives the rows and batches per rank)."""
        dm = self.dm
        from datamodules.tokens.packing import packing_lines

        if any(isinstance(d, BlendCorpus) for d in dm.split_datasets.values()):
            return [
                f"  packing: seq_length={dm.seq_length}, pack_mode={dm.pack_mode!r}, "
                f"batch_size={dm.batch_size} rows, each source packed on its own"
            ]
        lines = [
            f"  packing: seq_length={dm.seq_length}, pack_mode={dm.pack_mode!r}, "
            f"batch_size={dm.batch_size} rows"
        ]
        sampler = dm._samplers.get("train")
        for split, idx in dm._require_setup().items():
            if len(idx):
                epoch = sampler.epoch if split == "train" and sampler is not None else 0
                lines.append("  " + packing_lines(dm.planner(split), split, epoch))
        return lines

    def _describe_packing(self, describe_datamodule: Any, length_stats: Any) -> list[str]:
        dm = self.dm
        indices = dm._require_setup()
        lines = describe_datamodule(dm, names=None, split_labels=dict.fromkeys(indices))
        lines.append("lengths (tokens per document):")
        for split, idx in indices.items():
            lengths = dm.split_datasets[split].encoded.lengths[idx]
            lines.append(f"  {split}: {length_stats(lengths)}")
        lines.append(
            "packed rows (rows per epoch, share of real tokens, documents cut across rows):"
        )
        lines.extend(self.packing_summary()[1:])
        return lines

    def _plot_packed(self, batch: Any, path: str | os.PathLike[str], split: str) -> Any:
        dm = self.dm
        from datamodules.tokens.packing import packing_lines
        from datamodules.tools.token_pictures import plot_token_batch

        if not (isinstance(batch, dict) and "document_ids" in batch):
            raise ValueError("plot_batch: with packing=True, pass one packed batch (a dict).")
        planner = dm.planner(split)
        title = [
            f"{type(dm).__name__}, {split} split: packed rows of {dm.seq_length} tokens "
            f"(pack_mode={dm.pack_mode!r})",
        ]
        return plot_token_batch(batch, path, title, [packing_lines(planner, split, 0)])
