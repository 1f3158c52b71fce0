"""Batches of conversations about images: padded, or packed under two budgets.

* :class:`ImageConversations`: the conversations of a store that a split uses, after
  ``overlong``, with their images: ids, the loss mask and the images' bytes read in place.
  ``overlong`` applies to a record over ``seq_length`` tokens or ``max_images`` images:
  ``"drop"`` (counted), ``"error"`` (named), or ``"truncate"``: the record keeps its first
  tokens up to the limits and the images whose blocks of image tokens lie whole before the cut.
* :class:`PaddedConversationView`: ``{"input_ids", "labels", "attention_mask",
  "pixel_values"}``, a batch of records padded to its longest.
* :class:`BudgetBatches` and :class:`PackedConversationView`: the split's records packed once,
  best fit over both budgets (:func:`collates.pack_budgets.budget_plan`, in an order drawn
  from the seed), each record whole in one row; a planned batch is the unit the sampler
  shuffles per epoch, deals to the ranks and resumes. Batches have TextDataModule's packed
  keys plus ``pixel_values``.
* :class:`PlannedBatchSampler`: the core sampler over planned batches (one per step), so
  DDP-even, exact and elastic on resume as every map-style split is.

``pixel_values`` are uint8 ``(N, 3, H, W)``: the batch's images in the order their placeholders
appear, row by row, decoded and transformed as the image kinds do
(:class:`~datamodules.image_text.conversation_pixels.BatchPixels`). A record whose image does not
decode is named, or under ``on_error="skip"`` left out of its batch (its row keeps the other
records; a row left empty is dropped; a batch left empty holds the split's next good record).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from collates.pack_budgets import BudgetPlan, budget_plan
from collates.pack_plan import PackPlan
from collates.pack_rows import IGNORE_INDEX, RowTable, gather_rows
from datamodules.core.samplers import IndexBatchSampler
from datamodules.core.views import SplitView
from datamodules.image_text.conversation_pixels import BatchPixels
from datamodules.imaging.decoding import preload as preload_decoders
from datamodules.tokens.encoding import EncodedTexts, gather_padded
from datamodules.tokens.store import StoredDocuments

__all__ = [
    "BudgetBatches",
    "ImageConversations",
    "PackedConversationView",
    "PaddedConversationView",
    "PlannedBatchSampler",
    "image_efficiency_line",
]


class ImageConversations:
    """A store's conversations with their images, after ``overlong`` (see the module docstring).

    Args:
        store: The mapped store (tokens, mask, and the image files beside them).
        image_token_id: The id at image positions.
        image_tokens: Positions per image.
        seq_length: Tokens a record may have (None: no limit).
        max_images: Images a record may have (None: no limit).
        overlong: ``"drop"``, ``"truncate"`` or ``"error"``.

    Raises:
        ValueError: Under ``overlong="error"``, the first record over a limit, named.
    """

    def __init__(
        self,
        store: StoredDocuments,
        image_token_id: int,
        image_tokens: int,
        seq_length: int | None,
        max_images: int | None,
        overlong: str,
    ) -> None:
        self.store, self.path = store, store.path
        self.image_token_id, self.image_tokens = image_token_id, image_tokens
        self.tokens_np = store.encoded.tokens_np
        assert store.trained is not None
        self.trained_np = store.trained
        record_images = np.load(os.path.join(store.path, "record_images.npy"), mmap_mode="r")
        self.image_offsets = np.load(os.path.join(store.path, "image_offsets.npy"), mmap_mode="r")
        size = int(self.image_offsets[-1])
        blob = os.path.join(store.path, "images.bin")
        self.blob = np.memmap(blob, np.uint8, "r") if size else np.zeros(0, np.uint8)
        lengths = store.encoded.lengths_np.astype(np.int64)
        starts = store.encoded.offsets_np[:-1].astype(np.int64)
        images = np.diff(record_images).astype(np.int64)
        self.first_image = np.asarray(record_images[:-1], dtype=np.int64)
        over = np.zeros(len(lengths), bool)
        if seq_length is not None:
            over |= lengths > seq_length
        if max_images is not None:
            over |= images > max_images
        where = np.flatnonzero(over)
        #: Records over a limit (dropped, or cut, as ``overlong`` says).
        self.overlong = len(where)
        self.cut_tokens = self.cut_images = 0
        if len(where) and overlong == "error":
            i = int(where[0])
            raise ValueError(
                f"{store.where(i)}: the record has {int(lengths[i])} tokens and {int(images[i])} "
                f"image(s), over seq_length={seq_length} or max_images={max_images}, and "
                f"overlong='error' ({len(where)} such records): raise the limits, or use "
                "overlong='drop' or 'truncate'."
            )
        keep = np.ones(len(lengths), bool)
        if overlong == "drop":
            keep &= ~over
        else:
            for i in where.tolist():
                n, k = self._cut(int(starts[i]), int(lengths[i]), seq_length, max_images)
                self.cut_tokens += int(lengths[i]) - n
                self.cut_images += int(images[i]) - k
                lengths[i], images[i] = n, k
                keep[i] = n > 0
        self.keep = np.flatnonzero(keep)
        self.lengths, self.images = lengths[self.keep], images[self.keep]
        self.starts = starts[self.keep]
        offsets = np.append(self.starts, store.num_tokens).astype(np.int64)
        self.encoded = EncodedTexts(self.tokens_np, self.lengths, None, offsets=offsets)
        self.trained = EncodedTexts(self.trained_np, self.lengths, None, offsets=offsets)
        self._keys: np.ndarray | None = None  # where each record's key starts

    def _cut(
        self, start: int, n: int, seq_length: int | None, max_images: int | None
    ) -> tuple[int, int]:
        """``(tokens, images)`` a record keeps under ``overlong="truncate"``."""
        ids = self.tokens_np[start : start + n]
        blocks = np.flatnonzero(ids == self.image_token_id)[:: self.image_tokens]
        cut = n if seq_length is None else min(n, seq_length)
        if max_images is not None and len(blocks) > max_images:
            cut = min(cut, int(blocks[max_images]))
        inside = blocks[(blocks < cut) & (blocks + self.image_tokens > cut)]
        if len(inside):
            cut = int(inside[0])
        return cut, int((blocks + self.image_tokens <= cut).sum())

    def __len__(self) -> int:
        return len(self.keep)

    def where(self, index: int) -> str:
        """Names a record: its shard and record number (or row)."""
        return self.store.where(int(self.keep[index]))

    def place(self, index: int) -> tuple[str, str]:
        """``(shard, "record N, key 'k'")`` (``"row N"`` for Parquet) of a record, for
        messages and ``dm.skipped``."""
        shard, _, place = self.where(index).rpartition(", ")
        if self._keys is None:  # mapped on the first error only
            self._keys = np.load(os.path.join(self.path, "record_key_offsets.npy"), mmap_mode="r")
        record = int(self.keep[index])
        start, end = int(self._keys[record]), int(self._keys[record + 1])
        if start == end:  # a Parquet row: no key
            return shard, place
        with open(os.path.join(self.path, "record_keys.bin"), "rb") as keys:
            keys.seek(start)
            key = keys.read(end - start).decode(errors="replace")
        return shard, f"{place}, key {key!r}"

    @property
    def num_tokens(self) -> int:
        """Tokens of the records kept (image positions included), after any cut."""
        return int(self.lengths.sum())

    @property
    def num_images(self) -> int:
        """Images of the records kept."""
        return int(self.images.sum())

    def image_bytes(self, index: int) -> list[memoryview]:
        """The encoded images of record ``index``, in placeholder order."""
        first = int(self.first_image[self.keep[index]])
        bounds = self.image_offsets[first : first + int(self.images[index]) + 1].tolist()
        return [memoryview(self.blob[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]

    def fingerprint(self) -> str:
        """A digest of the records' token and image counts (what a pack plan depends on)."""
        digest = hashlib.sha256(np.ascontiguousarray(self.lengths).tobytes())
        digest.update(np.ascontiguousarray(self.images).tobytes())
        return digest.hexdigest()[:16]


class PaddedConversationView(SplitView):
    """Padded batches of records with their labels and images (see the module docstring).

    Args:
        docs: The split's records.
        indices: Positions of the split's records in ``docs``.
        pixels: The split's image path (its transform, ``decode`` and ``on_error``).
        pad_id: Id written at padding.
    """

    def __init__(
        self, docs: ImageConversations, indices: torch.Tensor, pixels: BatchPixels, pad_id: int
    ) -> None:
        super().__init__(indices, None)
        self.docs, self.pixels, self.pad_id = docs, pixels, pad_id

    @property
    def lengths(self) -> torch.Tensor:
        """Tokens per record of this split, in split order."""
        return torch.from_numpy(self.docs.lengths[self.indices.numpy()])

    def preload(self) -> None:
        """Imports the image decoders (before the loader forks its workers)."""
        preload_decoders()

    def __getitem__(self, batch: torch.Tensor) -> dict[str, torch.Tensor]:
        rows = self.rows(batch)
        pixels, kept = self.pixels(self.docs, rows.tolist())
        if len(kept) < len(rows):  # records left out under on_error="skip"
            if not kept:
                n, last = len(self.indices), int(batch[-1])
                after = (int(self.indices[(last + k) % n]) for k in range(1, n + 1))
                pixels, kept = self.pixels(self.docs, [self.pixels.fill(self.docs, after)])
            rows = torch.tensor(kept, dtype=torch.int64)
        ids, mask, _ = gather_padded(self.docs.encoded, rows, self.pad_id, "right")
        flags, _, _ = gather_padded(self.docs.trained, rows, 0, "right")
        return {
            "input_ids": ids,
            "labels": ids.masked_fill(flags == 0, IGNORE_INDEX),
            "attention_mask": mask,
            "pixel_values": pixels,
        }


class BudgetBatches:
    """A split's records packed once under both budgets (see the module docstring).

    Args:
        docs: The split's records.
        indices: Positions of the split's records in ``docs``.
        seq_length: Tokens per row.
        batch_size: Rows per batch, at most.
        max_images: Images per batch, at most (None: no image budget).
        shuffle: Pack the records in an order drawn from ``seed`` (else in split order).
        seed: The seed of that order and of the plan.
    """

    def __init__(
        self, docs: ImageConversations, indices: torch.Tensor, seq_length: int,
        batch_size: int, max_images: int | None, shuffle: bool, seed: int,
    ) -> None:  # fmt: skip
        positions = indices.numpy().astype(np.int64)
        if shuffle:
            positions = positions[np.random.default_rng(seed).permutation(len(positions))]
        #: The records in the order they were planned (the plan's ``doc`` indexes this).
        self.order = positions
        images = docs.images[positions]
        budget = int(max_images) if max_images is not None else max(int(images.sum()), 1)
        self.plan: BudgetPlan = budget_plan(
            docs.lengths[positions], images, seq_length=seq_length, batch_size=batch_size,
            max_images=budget, seed=seed,
        )  # fmt: skip
        self.seq_length, self.max_images = seq_length, max_images
        self.batch_size = batch_size
        self.image_tokens = docs.image_tokens
        self.offsets = docs.starts[positions]
        self.table = RowTable.from_plan(self.plan.rows, self.offsets, seq_length)
        self.fingerprint = (
            f"{docs.fingerprint()}-{seq_length}-{batch_size}-{max_images}-{shuffle}-{seed}"
        )

    @property
    def num_batches(self) -> int:
        """Planned batches of the split."""
        return self.plan.num_batches

    def rows(self, batch: int) -> list[int]:
        """The plan rows of batch ``batch``."""
        ptr = self.plan.batch_ptr
        return list(range(int(ptr[batch]), int(ptr[batch + 1])))

    def records(self, rows: list[int]) -> list[int]:
        """The records of ``rows``, row by row, in their order in each row."""
        row_ptr, doc = self.plan.rows.row_ptr, self.plan.rows.doc
        return [int(self.order[d]) for r in rows for d in doc[row_ptr[r] : row_ptr[r + 1]]]

    def after(self, rows: list[int]) -> Iterator[int]:
        """The plan's records after those of ``rows`` (its last), wrapping around."""
        doc, n = self.plan.rows.doc, len(self.plan.rows.doc)
        end = int(self.plan.rows.row_ptr[rows[-1] + 1])
        return (int(self.order[doc[(end + k) % n]]) for k in range(n))

    def table_of(self, rows: list[int], kept: list[int]) -> RowTable:
        """The rows of ``rows`` holding only the records ``kept``, rows left empty dropped;
        a record ``kept`` outside them (one that fills the batch) in a row of its own."""
        plan, keep, seen = self.plan.rows, set(kept), set()
        pieces: list[int] = []
        row_ptr = [0]
        for r in rows:
            for p in range(int(plan.row_ptr[r]), int(plan.row_ptr[r + 1])):
                if int(self.order[plan.doc[p]]) in keep:
                    pieces.append(p)
                    seen.add(int(self.order[plan.doc[p]]))
            if len(pieces) > row_ptr[-1]:
                row_ptr.append(len(pieces))
        for record in keep - seen:
            pieces.append(int(np.flatnonzero(self.order[plan.doc] == record)[0]))
            row_ptr.append(len(pieces))
        at = np.asarray(pieces, np.int64)
        part = PackPlan(plan.doc[at], plan.start[at], plan.length[at], np.asarray(row_ptr))
        return RowTable.from_plan(part, self.offsets, self.seq_length)

    def efficiencies(self) -> tuple[float, float]:
        """``(token efficiency, image efficiency)`` of the plan: tokens per row slot, and
        images per batch against ``max_images`` (1.0 without an image budget)."""
        images = 1.0 if self.max_images is None else float(self.plan.image_efficiency)
        return float(self.plan.token_efficiency), images


class PackedConversationView(SplitView):
    """Packed batches: one planned batch per index (see the module docstring).

    Args:
        docs: The split's records.
        batches: The split's plan.
        pixels: The split's image path (its transform, ``decode`` and ``on_error``).
        pad_id: Id written at padding.
    """

    def __init__(
        self, docs: ImageConversations, batches: BudgetBatches, pixels: BatchPixels, pad_id: int
    ) -> None:
        super().__init__(torch.arange(batches.num_batches, dtype=torch.int64), None)
        self.docs, self.batches, self.pixels, self.pad_id = docs, batches, pixels, pad_id

    def preload(self) -> None:
        """Imports the image decoders (before the loader forks its workers)."""
        preload_decoders()

    def __getitem__(self, batch: torch.Tensor) -> dict[str, Any]:
        if batch.numel() != 1:
            raise ValueError(f"a packed conversation batch is one planned batch, got {batch}.")
        rows = self.batches.rows(int(batch))
        table = self.batches.table
        records = self.batches.records(rows)
        pixels, kept = self.pixels(self.docs, records)
        if len(kept) < len(records):  # records left out under on_error="skip"
            if not kept:
                filler = self.pixels.fill(self.docs, self.batches.after(rows))
                pixels, kept = self.pixels(self.docs, [filler])
            table = self.batches.table_of(rows, kept)
            rows = list(range(table.num_rows))
        out = gather_rows(self.docs.tokens_np, table, rows, self.pad_id)
        flags = gather_rows(self.docs.trained_np, table, rows, 0)["input_ids"]
        out["labels"].masked_fill_(flags == 0, IGNORE_INDEX)
        out["pixel_values"] = pixels
        return out


class PlannedBatchSampler(IndexBatchSampler):
    """The core sampler over a split's planned batches, one per step (see the module docstring).

    Args:
        batches: The split's plan.
        shuffle: Shuffle the planned batches per epoch (from ``seed + epoch``).
        drop_last: Drop a rank's last batch where the ranks' shares differ.
        seed: Base seed.
        num_replicas: World size.
        rank: Global rank.
    """

    unit = "planned batch"
    resumes_packed_rows = True

    def __init__(
        self, batches: BudgetBatches, *, shuffle: bool, drop_last: bool, seed: int,
        num_replicas: int, rank: int,
    ) -> None:  # fmt: skip
        self.plan_fingerprint = batches.fingerprint
        super().__init__(
            batches.num_batches, 1, shuffle=shuffle, drop_last=drop_last, seed=seed,
            num_replicas=num_replicas, rank=rank,
        )  # fmt: skip

    def state_dict(self, consumed_batches: int | None = None) -> dict[str, Any]:
        """The core sampler's position plus what decides the plan."""
        return {**super().state_dict(consumed_batches), "packing": self.plan_fingerprint}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a position saved by :meth:`state_dict`.

        Raises:
            ValueError: The checkpoint's plan differs (other records, ``seq_length``,
                ``batch_size``, ``max_images`` or seed), or it was saved without packing.
        """
        saved = state.get("packing")
        if saved != self.plan_fingerprint:
            raise ValueError(
                "cannot resume the packed conversations exactly: the checkpoint's plan "
                f"({saved!r}) differs from this run's ({self.plan_fingerprint!r}); keep the "
                "records, seq_length, batch_size, max_images and shuffle_seed as they were."
            )
        super().load_state_dict(state)


def image_efficiency_line(batches: BudgetBatches, split: str) -> str:
    """One summary line of a split's plan: batches, rows, and both efficiencies (tokens per
    row slot of ``batch_size`` rows a batch, per row built, and of text alone per row built)."""
    tokens, images = batches.efficiencies()
    plan = batches.plan
    rows, width = plan.rows.num_rows, batches.seq_length
    filled = plan.rows.num_tokens / (rows * width) if rows else 0.0
    text = (plan.rows.num_tokens - plan.num_images * batches.image_tokens) / (rows * width or 1)
    budget = "no image budget" if batches.max_images is None else f"max_images={batches.max_images}"
    return (
        f"  {split} packed: {plan.num_batches:,} batches, {rows:,} rows of {width} "
        f"({rows / max(plan.num_batches, 1):.2f} a batch on average, batch_size="
        f"{batches.batch_size} at most), {plan.num_images:,} images ({budget}); "
        f"token efficiency {tokens:.4f} per row slot, {filled:.4f} per row ({text:.4f} text "
        f"alone); image efficiency {images:.4f}"
    )
