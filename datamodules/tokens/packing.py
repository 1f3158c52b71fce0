"""Packing for language-model training: rows of ``seq_length`` tokens, dealt to ranks as units.

Packing works in index space. A *pack plan* (:class:`collates.pack_plan.PackPlan`) lists, for
one split and one epoch, each row's pieces ``(document, first token, token count)``; it is
computed from the documents' lengths alone by :class:`PackPlanner`, deterministically from
``shuffle_seed + epoch`` (train) or in split order (eval, and ``shuffle=False``):

* ``"split"``: the documents, shuffled, laid end to end and cut every ``seq_length`` tokens:
  ``ceil(tokens / seq_length)`` rows, the same every epoch, only the last one short.
* ``"whole"``: no document is split. One best-fit decreasing pass over all the split's
  documents, made once, fixes the rows' *places*: how many rows, and the lengths of the
  documents each row holds. Documents of equal length are interchangeable in such a plan,
  so each epoch deals the documents of every length, in the epoch's random order, to that
  length's places. Every epoch thus has the same row count (a Trainer reads a loader's
  length once) and the best fill the pass gives, its rows hold other documents, and
  planning it is a sort rather than a best-fit pass (about 40 ms for 50,000 documents).
  Which documents share a row changes nothing for a model whose attention stays within
  documents; which rows share a batch is the sampler's shuffle.

The rows are the units :class:`PackedRowSampler` (an
:class:`~datamodules.core.samplers.IndexBatchSampler`) shuffles and deals to ranks, so DDP
evenness, mid-epoch resume and elastic resume are the core's. The sampler yields row ids that also
carry the epoch (``epoch * rows + row``); :class:`PackedTextView` (what a DataLoader worker
holds) rebuilds the epoch's plan from that, lays it out once as a
:class:`collates.pack_rows.RowTable`, and gathers each batch from the flat token buffer in
one vectorised step (:func:`collates.pack_rows.gather_rows`).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from collates.pack_plan import POOL_DOCUMENTS, PackPlan, best_fit_plan, split_plan
from collates.pack_rows import RowTable, gather_rows
from datamodules.core.samplers import IndexBatchSampler
from datamodules.core.summary import counted
from datamodules.core.views import SplitView
from datamodules.tokens.encoding import EncodedTexts

__all__ = ["PackPlanner", "PackedRowSampler", "PackedTextView", "check_packable", "packing_lines"]


class PackPlanner:
    """The pack plan of one split for any epoch, from its documents' lengths.

    Args:
        lengths: Tokens per document, in split order.
        seq_length: Tokens per row.
        pack_mode: ``"split"`` or ``"whole"``.
        shuffle: Reshuffle the plan every epoch from ``seed + epoch``; else one fixed plan in
            split order.
        seed: Base seed.
        pool: Documents per best-fit pool (``"whole"`` without shuffling, where the plan
            follows split order).
    """

    def __init__(
        self,
        lengths: np.ndarray,
        seq_length: int,
        pack_mode: str,
        shuffle: bool,
        seed: int,
        pool: int = POOL_DOCUMENTS,
    ) -> None:
        self.pool = pool
        self.lengths = np.ascontiguousarray(lengths, dtype=np.int64)
        self.seq_length, self.pack_mode = seq_length, pack_mode
        self.shuffle, self.seed = shuffle, seed
        self._cache: OrderedDict[int, PackPlan] = OrderedDict()
        #: "whole" with shuffling: the one best-fit plan whose places every epoch refills,
        #: and its places sorted by length (stable).
        self._places: PackPlan | None = None
        self._places_by_length: np.ndarray | None = None
        total = int(self.lengths.sum())
        if pack_mode == "split" or not total:
            self.num_rows = -(-total // seq_length)
        elif shuffle:
            self._places = best_fit_plan(self.lengths, seq_length, pool=None)
            self._places_by_length = np.argsort(self._places.length, kind="stable")
            self.num_rows = self._places.num_rows
        else:
            self.num_rows = self.plan(0).num_rows

    @property
    def num_tokens(self) -> int:
        """Real tokens per epoch."""
        return int(self.lengths.sum())

    def fill(self) -> float:
        """Real tokens over the rows' capacity (``rows x seq_length``), the same every epoch."""
        return self.num_tokens / max(self.num_rows * self.seq_length, 1)

    def order(self, epoch: int) -> np.ndarray:
        """The epoch's document order (positions in the split)."""
        n = len(self.lengths)
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        generator = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(n, generator=generator).numpy()

    def plan(self, epoch: int) -> PackPlan:
        """The plan of ``epoch`` (any epoch when not shuffling); pieces name split positions."""
        key = epoch if self.shuffle else 0
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        order = self.order(key)
        if self._places is not None:
            plan = self._deal_places(order)
        elif self.pack_mode == "split":
            plan = split_plan(self.lengths[order], self.seq_length).remap(order)
        else:
            plan = best_fit_plan(self.lengths[order], self.seq_length, self.pool).remap(order)
        self._cache[key] = plan
        while len(self._cache) > 2:
            self._cache.popitem(last=False)
        return plan

    def _deal_places(self, order: np.ndarray) -> PackPlan:
        """The "whole" plan whose places of each length get that length's documents in
        ``order``."""
        places = self._places
        documents = order[self.lengths[order] > 0]  # empty documents have no place
        by_length = documents[np.argsort(self.lengths[documents], kind="stable")]
        doc = np.empty_like(places.doc)
        doc[self._places_by_length] = by_length
        return PackPlan(doc, places.start, places.length, places.row_ptr)

    def fingerprint(self) -> str:
        """A short hash of the lengths and options: what decides every epoch's rows."""
        digest = hashlib.blake2b(self.lengths.tobytes(), digest_size=8)
        digest.update(f"{self.seq_length}/{self.pack_mode}/{self.shuffle}".encode())
        return digest.hexdigest()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = OrderedDict()  # workers rebuild the plans they need
        return state


class PackedTextView(SplitView):
    """A split of tokenized texts whose item is a batch of packed rows.

    Indexed with one batch of row ids from :class:`PackedRowSampler` (``epoch * rows +
    row``), it returns the batch dict of :mod:`collates.packing` (``document_ids`` are
    positions in the split).

    A packed batch is cheap to build (about 0.1 ms for 8 rows of 2,048), so with workers eight
    of them travel as one message (``batches_per_message``; see
    :mod:`datamodules.core.loaders`): indexed with a list of row-id batches, the view returns
    the list of their batches.

    Args:
        encoded: The tokenized texts of the split's source.
        indices: Positions of the split's documents in ``encoded``.
        transform: Applied to each whole batch dict.
        planner: The split's pack planner.
        pad_id: Id written at padding.
    """

    batches_per_message = 8

    def __init__(
        self,
        encoded: EncodedTexts,
        indices: torch.Tensor,
        transform: Callable[[Any], Any] | None,
        planner: PackPlanner,
        pad_id: int,
    ) -> None:
        super().__init__(indices, transform)
        self.encoded = encoded
        self.planner = planner
        self.pad_id = pad_id
        self.offsets = encoded.offsets_np[:-1][indices.numpy()]
        self._tables: OrderedDict[int, RowTable] = OrderedDict()

    @property
    def num_rows(self) -> int:
        """Rows per epoch."""
        return self.planner.num_rows

    def plan(self, epoch: int) -> PackPlan:
        """The epoch's pack plan (see :class:`PackPlanner`)."""
        return self.planner.plan(epoch)

    def __getitem__(self, batch: torch.Tensor | list[torch.Tensor]) -> Any:
        if isinstance(batch, list):  # several batches for one worker message
            return [self[b] for b in batch]
        epoch, rows = self._rows(batch)
        out = gather_rows(self.encoded.tokens_np, self.row_table(epoch), rows, self.pad_id)
        return self.transform(out) if self.transform is not None else out

    def _rows(self, batch: torch.Tensor) -> tuple[int, list[int]]:
        """The epoch and the plan rows of one batch of row ids (``epoch * rows + row``)."""
        ids = batch.tolist()
        rows = self.planner.num_rows
        epoch = ids[0] // rows if ids else 0
        if ids and ids[-1] // rows != epoch:
            raise ValueError("a packed batch holds rows of two epochs.")
        if epoch:
            base = epoch * rows
            ids = [i - base for i in ids]
        return epoch, ids

    def row_table(self, epoch: int) -> RowTable:
        """The epoch's plan laid out for batch gathers (:class:`collates.pack_rows.RowTable`)."""
        key = epoch if self.planner.shuffle else 0
        cached = self._tables.get(key)
        if cached is None:
            plan = self.planner.plan(key)
            cached = RowTable.from_plan(plan, self.offsets, self.planner.seq_length)
            self._tables[key] = cached
            while len(self._tables) > 2:
                self._tables.popitem(last=False)
        return cached

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_tables"] = OrderedDict()  # workers rebuild the tables they need
        return state


class PackedRowSampler(IndexBatchSampler):
    """Batches of packed rows: DDP-even, resumable and elastic as
    :class:`~datamodules.core.samplers.IndexBatchSampler` is, over rows.

    When shuffling, the epoch's rows are dealt in a random order from ``seed + epoch`` (rank
    ``r`` of ``W`` takes positions ``r, r + W, ...`` of it), so that a batch mixes rows from
    all over the epoch rather than consecutive rows of the same long documents (with
    ``"split"``, the plan's last row, the only short one, stays last); each yielded
    id is then ``epoch * rows + row``, which tells :class:`PackedTextView` the epoch's plan.
    Without shuffling (eval splits), rows go in plan order and ids are plain row numbers.

    Args:
        planner: The split's pack planner (its ``shuffle`` decides the sampler's).
        batch_size: Rows per batch.
        drop_last: Drop each rank's last incomplete batch.
        num_replicas: World size.
        rank: Global rank.
    """

    def __init__(
        self,
        planner: PackPlanner,
        batch_size: int,
        *,
        drop_last: bool = False,
        num_replicas: int | None = None,
        rank: int | None = None,
    ) -> None:
        self.planner = planner
        super().__init__(
            planner.num_rows,
            batch_size,
            shuffle=planner.shuffle,
            drop_last=drop_last,
            seed=planner.seed,
            num_replicas=num_replicas,
            rank=rank,
        )

    resumes_packed_rows = True
    unit = "row"

    def permutation(self, epoch: int) -> torch.Tensor:
        """The epoch's row ids: the plan's rows shuffled from ``seed + epoch`` (when shuffling),
        each carrying its epoch (``epoch * rows + row``)."""
        n = self.dataset_size
        if not self.shuffle:
            return torch.arange(n, dtype=torch.int64)
        generator = torch.Generator().manual_seed(self.seed + epoch)
        if self.planner.pack_mode == "split" and n:
            # The plan's last row, the only short one, stays the epoch's last.
            order = torch.cat([torch.randperm(n - 1, generator=generator), torch.tensor([n - 1])])
        else:
            order = torch.randperm(n, generator=generator)
        return order + epoch * n

    def epoch_batches(self, epoch: int) -> list[torch.Tensor]:
        """Every batch of ``epoch`` across all ranks (rank 0's first), as row ids."""
        return [
            b
            for r in range(self.num_replicas)
            for b in self._batches_from(self.permutation(epoch), r)
        ]

    def _packing_state(self) -> dict[str, Any]:
        return {
            "seq_length": self.planner.seq_length,
            "pack_mode": self.planner.pack_mode,
            "lengths": self.planner.fingerprint(),
        }

    def state_dict(self, consumed_batches: int | None = None) -> dict[str, Any]:
        """The core sampler's position plus the packing that decides the rows."""
        state = super().state_dict(consumed_batches)
        state["packing"] = self._packing_state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a position saved by :meth:`state_dict`.

        Raises:
            ValueError: If the checkpoint was saved without packing, or with another
                ``seq_length``, ``pack_mode`` or other document lengths, or (from the core)
                another seed, ``shuffle`` or ``drop_last``.
        """
        saved, mine = state.get("packing"), self._packing_state()
        if saved is None:
            raise ValueError(
                "cannot resume the packed rows: the checkpoint was saved without packing=True."
            )
        for key in ("seq_length", "pack_mode"):
            if saved.get(key) != mine[key]:
                raise ValueError(
                    f"cannot resume the packed rows exactly: the checkpoint was saved with "
                    f"{key}={saved.get(key)!r}, this run has {key}={mine[key]!r}; keep it as "
                    "it was to resume."
                )
        if saved.get("lengths") != mine["lengths"]:
            raise ValueError(
                "cannot resume the packed rows exactly: the document lengths differ from the "
                "checkpoint's (other texts, tokenizer or max_length)."
            )
        super().load_state_dict(state)


def packing_lines(planner: PackPlanner, split: str, epoch: int) -> str:
    """One summary line: rows per epoch, the share of real tokens, and how many documents
    are cut across rows."""
    plan = planner.plan(epoch)
    cut = plan.split_documents()
    return (
        f"{split}: {counted(planner.num_rows, 'row')} of {planner.seq_length} per epoch, real "
        f"tokens {planner.fill():.4f}, {counted(cut, 'document')} cut across rows "
        f"(epoch {epoch})"
    )


def check_packable(records: Any, label_key: str | None, seq_length: int, pack_mode: str) -> None:
    """Fails in ``setup`` on texts that cannot be packed, naming the file and line.

    Raises:
        ValueError: If the texts carry labels, or (``"whole"``) a document is longer than
            ``seq_length``.
    """
    if records.labels is not None and len(records):
        raise ValueError(
            f"{records.where(0)}: packing=True conflicts with labels: these texts have labels "
            f"(label_key={label_key or 'label'!r}), and packed rows are for texts without "
            "labels. Drop "
            "the labels or packing=True."
        )
    lengths = records.encoded.lengths_np
    if pack_mode == "whole" and len(lengths) and int(lengths.max()) > seq_length:
        i = int(np.argmax(lengths))
        raise ValueError(
            f"{records.where(i)}: {int(lengths[i])} tokens exceed seq_length={seq_length} and "
            "pack_mode='whole' never splits a document: set max_length <= seq_length to "
            "truncate, raise seq_length, or use pack_mode='split'."
        )
