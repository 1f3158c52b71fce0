"""Blends of token corpora: several sources in one split, exact quotas per epoch, rows per source.

A blend is what ``TextDataModule(token_files=[Source(...), ...])`` or ``train_file=[Source(...),
...]`` reads: Megatron prefixes, flat token files or token stores, each a source of a
:class:`~datamodules.core.mixture.Mixture` (weights and schedules, repeats, ``epoch_size``).

* :class:`BlendCorpus`: the sources' documents, source after source, as one dataset (the
  random ``val_split`` / ``test_split`` cut it as they cut one corpus).
* A source's *units* are what a batch holds per row: packed rows with ``packing=True`` (each
  source packs its own documents, so a row never mixes sources), else documents. They are
  drawn as an endless run of passes: pass ``p`` is the source's pack plan of epoch ``p`` (or
  its documents) in an order shuffled from ``(seed, source name, p)``; epoch ``e`` takes the
  units ``[start, start + quota)`` of that run that the mixture gives it.
* :class:`MixedPackedView` / :class:`MixedDocView`: the epoch's units of every source, laid out
  once per epoch over one virtual token buffer (:class:`MultiBuffer`: the sources' buffers
  end to end, each read in place), so a batch is still one gather
  (:func:`collates.pack_rows.gather_rows`, :func:`~datamodules.tokens.encoding.gather_padded`);
  a batch's rows come grouped by source, and each group is one slice of one buffer.
* :class:`MixedSampler`: an :class:`~datamodules.core.samplers.IndexBatchSampler` over the
  epoch's units (ids ``epoch << 32 | unit``), so DDP-even batches, exact and elastic resume
  are the core's; sized per epoch, since a mix changed on resume
  (:mod:`datamodules.tokens.blend_resume`) can change the epoch's unit count.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from collates.pack_plan import PackPlan
from collates.pack_rows import RowTable, gather_rows
from datamodules.core.mixture import Mixture
from datamodules.core.samplers import IndexBatchSampler
from datamodules.core.views import SplitView
from datamodules.tokens.encoding import gather_padded
from datamodules.tokens.packing import PackPlanner

__all__ = [
    "BlendCorpus",
    "BlendUnits",
    "MixedDocView",
    "MixedPackedView",
    "MixedSampler",
    "MultiBuffer",
    "blend_parts",
    "interrupted",
    "mixed_units",
]

#: Unit ids carry their epoch in the high bits.
EPOCH_SHIFT = 32
UNIT_MASK = (1 << EPOCH_SHIFT) - 1


class BlendCorpus:
    """The documents of several corpora (token files, token stores), source after source.

    Args:
        parts: The corpora (each with ``encoded``, ``len`` and ``where``).
        names: Their source names.
    """

    labels = None

    def __init__(self, parts: list[Any], names: list[str]) -> None:
        self.parts, self.names = parts, names
        self.bounds = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in parts], out=self.bounds[1:])

    def __len__(self) -> int:
        return int(self.bounds[-1])

    def _locate(self, index: int) -> tuple[int, int]:
        s = int(np.searchsorted(self.bounds, index, side="right")) - 1
        return s, index - int(self.bounds[s])

    def where(self, index: int) -> str:
        """Names a document: its source's name for it."""
        s, local = self._locate(index)
        return self.parts[s].where(local)

    def __getitem__(self, index: int) -> Any:
        s, local = self._locate(index)
        return self.parts[s][local]

    def split(self, indices: torch.Tensor) -> list[np.ndarray]:
        """Per source, its documents among ``indices`` (positions in the blend), local."""
        index = indices.numpy()
        out = []
        for s in range(len(self.parts)):
            lo, hi = self.bounds[s], self.bounds[s + 1]
            out.append(np.sort(index[(index >= lo) & (index < hi)]) - lo)
        return out


def blend_parts(datasets: Any) -> list[Any]:
    """The distinct corpora of some split datasets, a blend's sources in its place."""
    out: list[Any] = []
    for dataset in datasets:
        for part in dataset.parts if isinstance(dataset, BlendCorpus) else [dataset]:
            if all(part is not seen for seen in out):
                out.append(part)
    return out


class MultiBuffer:
    """The sources' token buffers, read as one: offsets are within each source's buffer, and
    a read's rows (``width`` ids each) come grouped by source, in the order :meth:`expect`
    was told, each group one ``take`` of its buffer.

    The buffers are plain views of the sources' (memory-mapped) arrays, so a take does not
    go through ``np.memmap``'s per-result bookkeeping; the view is rebuilt from the sources
    after unpickling, never pickled itself.
    """

    def __init__(self, buffers: list[np.ndarray]) -> None:
        self.buffers = [np.asarray(b) for b in buffers]
        self.size = sum(len(b) for b in buffers)
        dtypes = {b.dtype for b in self.buffers}
        self.dtype = dtypes.pop() if len(dtypes) == 1 else np.dtype(np.int64)
        self._groups: list[tuple[int, int, int]] = [(0, 0, 0)]

    def __len__(self) -> int:
        return self.size

    def expect(self, groups: list[tuple[int, int, int]]) -> None:
        """The next read's row groups: ``(source, first row, end row)``."""
        self._groups = groups

    def take(self, index: np.ndarray, mode: str = "clip") -> np.ndarray:
        """The ids at ``index`` (offsets within each row's source buffer)."""
        groups = self._groups
        if len(groups) == 1:
            return self.buffers[groups[0][0]].take(index, mode=mode)
        width = len(index) // groups[-1][2]
        out = np.empty(len(index), dtype=self.dtype)
        buffers, dtype = self.buffers, self.dtype
        for s, lo, hi in groups:  # the method, not np.take: its wrapper costs a third
            a, b = lo * width, hi * width
            if buffers[s].dtype == dtype:
                buffers[s].take(index[a:b], out=out[a:b], mode=mode)
            else:  # a take writes only its own dtype: sources of other widths are widened
                out[a:b] = buffers[s].take(index[a:b], mode=mode)
        return out

    def __getitem__(self, index: np.ndarray) -> np.ndarray:
        return self.take(index.reshape(-1)).reshape(index.shape)


def _groups(
    rows: list[int], runs: list[tuple[int, int, int]]
) -> tuple[list[int], list[tuple[int, int, int]]]:
    """A batch's rows grouped by source (stable), and the groups ``(source, first, end)``;
    ``runs``: the epoch's ``(first unit, end unit, source)`` by source (each source's units
    are one run of the layout: a list comprehension per source, no lookup and sort per row)."""
    if len(runs) == 1:
        return rows, [(runs[0][2], 0, len(rows))]
    out: list[int] = []
    groups: list[tuple[int, int, int]] = []
    for lo, hi, s in runs:
        part = [r for r in rows if lo <= r < hi]
        if part:
            groups.append((s, len(out), len(out) + len(part)))
            out += part
    return out, groups


def _runs(sources: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """``(first unit, end unit, source)`` by source, from the layout's ``(source, units)``
    pieces in layout order (each source's pieces adjacent)."""
    runs: dict[int, list[int]] = {}
    position = 0
    for s, n in sources:
        run = runs.setdefault(s, [position, position])
        if run[1] != position:
            raise ValueError(f"the blend's layout holds source {s} in two places.")
        run[1] = position = position + n
    return [(lo, hi, s) for s, (lo, hi) in sorted(runs.items()) if hi > lo] or [(0, 0, 0)]


def _name_seed(seed: int, name: str) -> int:
    digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


class BlendUnits:
    """One source's units and its run of passes.

    Args:
        name: The source's name.
        lengths: Tokens per document of the source in this split.
        planner: Its pack planner (packing), or None (units are documents).
        shuffle: Shuffle each pass (train); else pass 0 in order.
        seed: The shuffle seed.
    """

    def __init__(
        self, name: str, lengths: np.ndarray, planner: PackPlanner | None, shuffle: bool, seed: int
    ) -> None:
        self.name, self.lengths, self.planner = name, lengths, planner
        self.shuffle, self.seed = shuffle, _name_seed(seed, name)
        self.count = planner.num_rows if planner is not None else len(lengths)

    def pass_order(self, p: int) -> np.ndarray:
        """The units of pass ``p`` in the order the run takes them."""
        if not self.shuffle:
            return np.arange(self.count, dtype=np.int64)
        return np.random.default_rng([self.seed, p]).permutation(self.count)

    def take(self, start: int, stop: int) -> list[tuple[int, np.ndarray]]:
        """Positions ``[start, stop)`` of the run as ``(pass, units)`` pieces."""
        out = []
        position = start
        while position < stop and self.count:
            p, offset = divmod(position, self.count)
            n = min(self.count - offset, stop - position)
            out.append((p, self.pass_order(p)[offset : offset + n]))
            position += n
        return out


def mixed_units(
    units: list[BlendUnits], mixture: Mixture, epoch: int
) -> list[tuple[int, int, np.ndarray]]:
    """The epoch's units as ``(source, pass, units)`` pieces, source after source."""
    plan = mixture.plan(epoch)
    return [(s, p, u) for s, a, q in plan for p, u in units[s].take(a, a + q)]


class _MixedView(SplitView):
    """What both mixed views share: the sources, the epoch layouts, the batch's groups."""

    def __init__(
        self,
        encoded: list[Any],
        docs: list[np.ndarray],
        units: list[BlendUnits],
        mixture: Mixture,
        transform: Callable[[Any], Any] | None,
        pad_id: int,
    ) -> None:
        super().__init__(torch.arange(mixture.total(0), dtype=torch.int64), transform)
        self.encoded, self.docs, self.units, self.mixture = encoded, docs, units, mixture
        self.pad_id = pad_id
        self._tokens: MultiBuffer | None = None
        self._epochs: OrderedDict[int, Any] = OrderedDict()
        self._number_documents()

    def resume(
        self, mixture: Mixture, encoded: list[Any], docs: list[np.ndarray], units: list[BlendUnits]
    ) -> None:
        """Reads ``mixture`` (a changed mix continued from a checkpoint) over these sources
        (one per entry of it, in its order), from now on."""
        self.encoded, self.docs, self.units, self.mixture = encoded, docs, units, mixture
        self._number_documents()
        self._epochs.clear()
        self._tokens = None

    def _number_documents(self) -> None:
        """Numbers the split's documents across the blend (``doc_bases``) and gives each its
        first token's offset in its own source's buffer (``doc_offsets``), for the layouts."""
        self.doc_bases = np.zeros(len(self.encoded) + 1, dtype=np.int64)
        np.cumsum([len(d) for d in self.docs], out=self.doc_bases[1:])
        offsets = [e.offsets_np[:-1][d] for e, d in zip(self.encoded, self.docs, strict=True)]
        self.doc_offsets = np.concatenate(offsets) if offsets else np.zeros(0, np.int64)

    def layout(self, epoch: int) -> Any:
        """The epoch's layout (built once per epoch and worker, two kept)."""
        cached = self._epochs.get(epoch)
        if cached is None:
            cached = self._epochs[epoch] = self._build(epoch)
            while len(self._epochs) > 2:
                self._epochs.popitem(last=False)
        return cached

    @property
    def tokens(self) -> MultiBuffer:
        """The sources' token buffers as one (see :class:`MultiBuffer`)."""
        if self._tokens is None:
            self._tokens = MultiBuffer([e.tokens_np for e in self.encoded])
        return self._tokens

    def _build(self, epoch: int) -> Any:
        raise NotImplementedError

    def _grouped(self, batch: torch.Tensor) -> tuple[Any, list[int]]:
        """The layout of the batch's epoch and its units grouped by source; tells the buffer
        the groups. (One ``tolist`` per batch: indexing the tensor costs more than the
        grouping.)"""
        ids = batch.tolist()
        if not ids:
            self.tokens.expect([(0, 0, 0)])
            return self.layout(0), []
        layout = self.layout(ids[0] >> EPOCH_SHIFT)
        rows = [i & UNIT_MASK for i in ids]
        rows, groups = _groups(rows, layout[1])  # (table or documents, the runs, ...)
        self.tokens.expect(groups)
        return layout, rows

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_epochs"] = OrderedDict()  # workers lay out the epochs they need
        state["_tokens"] = None  # views of the sources' maps: rebuilt, never pickled
        return state


class MixedPackedView(_MixedView):
    """A blend's packed rows: a batch of unit ids -> the packed batch dict of
    :mod:`collates.packing` (``document_ids``: documents numbered across the blend's split,
    source after source)."""

    batches_per_message = 8

    def _build(self, epoch: int) -> tuple[RowTable, list[tuple[int, int, int]]]:
        width = self.units[0].planner.seq_length  # type: ignore[union-attr]
        docs_out, starts, lengths, counts, sources = [], [], [], [], []
        for s, p, rows in mixed_units(self.units, self.mixture, epoch):
            plan = self.units[s].planner.plan(p)  # type: ignore[union-attr]
            first = plan.row_ptr[rows]
            n = plan.row_ptr[rows + 1] - first
            piece = (first - n.cumsum() + n).repeat(n)
            piece += np.arange(len(piece), dtype=np.int64)
            doc = plan.doc[piece]
            doc += self.doc_bases[s]  # numbered across the blend's split
            docs_out.append(doc)
            starts.append(plan.start[piece])
            lengths.append(plan.length[piece])
            counts.append(n)
            sources.append((s, len(rows)))
        cat = lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.int64)  # noqa: E731
        count = cat(counts)
        row_ptr = np.zeros(len(count) + 1, dtype=np.int64)
        np.cumsum(count, out=row_ptr[1:])
        plan = PackPlan(cat(docs_out), cat(starts), cat(lengths), row_ptr)
        return RowTable.from_plan(plan, self.doc_offsets, width), _runs(sources)

    def __getitem__(self, batch: torch.Tensor | list[torch.Tensor]) -> Any:
        if isinstance(batch, list):  # several batches for one worker message
            return [self[b] for b in batch]
        (table, _), rows = self._grouped(batch)
        out = gather_rows(self.tokens, table, rows, self.pad_id)  # type: ignore[arg-type]
        return self.transform(out) if self.transform is not None else out


class _EpochDocs:
    """An epoch's documents as gather_padded reads them (lengths, offsets, one buffer)."""

    def __init__(self, tokens: MultiBuffer, lengths: np.ndarray, offsets: np.ndarray) -> None:
        self.tokens_np, self.lengths_np, self.offsets_np = tokens, lengths, offsets


class MixedDocView(_MixedView):
    """A blend's documents: a batch of unit ids -> the padded batch dict of
    :class:`~datamodules.tokens.encoding.TextBatchView` (``labels`` when every source has
    them)."""

    def __init__(self, *args: Any, padding_side: str = "right", pad_to: int | None = None) -> None:
        super().__init__(*args)
        self.padding_side, self.pad_to = padding_side, pad_to
        self.labelled = all(e.labels is not None for e in self.encoded)

    def _build(
        self, epoch: int
    ) -> tuple[_EpochDocs, list[tuple[int, int, int]], np.ndarray | None]:
        lengths, offsets, sources, labels = [], [], [], []
        for s, _, units in mixed_units(self.units, self.mixture, epoch):
            local = self.docs[s][units]
            lengths.append(self.encoded[s].lengths_np[local])
            offsets.append(self.doc_offsets[units + self.doc_bases[s]])  # in its own buffer
            sources.append((s, len(units)))
            if self.labelled:
                labels.append(self.encoded[s].labels_np[local])
        cat = lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.int64)  # noqa: E731
        docs = _EpochDocs(self.tokens, cat(lengths), cat(offsets))
        return docs, _runs(sources), cat(labels) if self.labelled else None

    def __getitem__(self, batch: torch.Tensor) -> dict[str, torch.Tensor]:
        (docs, _, labels), rows = self._grouped(batch)
        index = torch.tensor(rows, dtype=torch.int64)
        ids, mask, lengths = gather_padded(docs, index, self.pad_id, self.padding_side, self.pad_to)  # type: ignore[arg-type]
        out = {"input_ids": ids}
        if labels is not None:
            out["labels"] = torch.from_numpy(labels[rows])
        out["attention_mask"], out["lengths"] = mask, lengths
        return self.transform(out) if self.transform is not None else out


class MixedSampler(IndexBatchSampler):
    """Batches of a blend's units: DDP-even, resumable and elastic as
    :class:`~datamodules.core.samplers.IndexBatchSampler` is, over each epoch's units.

    The core sampler's size (``dataset_size``) is the unit count of the epoch it is about
    to deal: the same every epoch for one mix (``epoch_size``, or all the sources' units),
    but a mix changed on resume has the interrupted epoch's count, then the new mix's.

    Args:
        mixture: The blend's mixture.
        batch_size: Units per batch.
        shuffle: Shuffle each epoch's units (from ``seed + epoch``); ids then carry the epoch.
        **kwargs: ``drop_last``, ``seed``, ``num_replicas``, ``rank``.
    """

    unit = "unit"

    def __init__(self, mixture: Mixture, batch_size: int, shuffle: bool, **kwargs: Any) -> None:
        self.mixture = mixture
        #: ``(saved mix, interrupted) -> Mixture``: continues a checkpoint's changed mix
        #: (the DataModule's, which also gives its views that mixture); None: refused.
        self.resume: Callable[[dict[str, Any], bool], Mixture] | None = None
        super().__init__(mixture.total(0), batch_size, shuffle=shuffle, **kwargs)

    def fit_epoch(self, epoch: int) -> None:
        """Sizes the core sampler for ``epoch``'s units (a changed mix changes the count)."""
        n = self.mixture.total(epoch)
        if n != self.dataset_size:
            self.dataset_size = n
            self._configure_layout()

    def __len__(self) -> int:
        if self.ended_length is None and not self._elastic_pending():
            self.fit_epoch(self.epoch)  # the epoch set, or the one being dealt
        return super().__len__()

    def epoch_length(self) -> int:
        """Batches the next iteration's epoch counts on this rank (see the core's)."""
        self.fit_epoch(self.next_epoch)
        return super().epoch_length()

    def batches(self, epoch: int) -> list[torch.Tensor]:
        """This rank's batches of ``epoch``."""
        self.fit_epoch(epoch)
        return super().batches(epoch)

    def __iter__(self) -> Iterator[torch.Tensor]:
        self.fit_epoch(self.next_epoch)
        return super().__iter__()

    def permutation(self, epoch: int) -> torch.Tensor:
        """The epoch's units (shuffled from ``seed + epoch`` when shuffling), each id carrying
        its epoch (``epoch << 32 | unit``): a schedule gives every epoch other units."""
        n = self.mixture.total(epoch)
        if n != self.dataset_size:
            raise ValueError(
                f"epoch {epoch} of the blend has {n} units, the sampler {self.dataset_size}."
            )
        if not self.shuffle:
            return torch.arange(n, dtype=torch.int64) + (epoch << EPOCH_SHIFT)
        generator = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(n, generator=generator) + (epoch << EPOCH_SHIFT)

    def state_dict(self, consumed_batches: int | None = None) -> dict[str, Any]:
        """The core sampler's position plus the mix of its epoch."""
        state = super().state_dict(consumed_batches)
        state["mix"] = self.mixture.state(int(state["epoch"]))
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a position saved by :meth:`state_dict`; a changed mix is continued by
        :attr:`resume` (the interrupted epoch ends as it was planned).

        Raises:
            ValueError: A changed mix without :attr:`resume`, what it refuses, or what the
                core sampler refuses.
        """
        saved = state.get("mix")
        if saved is None:
            super().load_state_dict(state)
            return
        epoch, cut = int(saved["epoch"]), interrupted(state)
        if self.mixture.saved != saved and saved != self.mixture.state(epoch):
            if self.resume is None:
                changes = self.mixture.changes(saved) or ["the sources' data or positions"]
                raise ValueError(
                    "cannot resume the blend: its mix differs from the checkpoint's ("
                    + "; ".join(changes)
                    + "); resume it through its TextDataModule."
                )
            self.mixture = self.resume(saved, cut)
        self.fit_epoch(epoch)
        if not cut:  # nothing of that epoch was dealt: it is the new mix's
            state = {**state, "num_samples": self.dataset_size}
        super().load_state_dict(state)
        if cut and self.ended_length is None and self._resume_batch >= self._num_batches:
            following = self.mixture.total(epoch + 1)
            if following != self.dataset_size:
                # The checkpoint saw the held epoch end: a restoring Trainer must see its
                # length to agree, then the next epoch's (the loader corrects it).
                self.ended_length = self._num_batches
                self.epoch, self._resume_epoch = epoch + 1, None


def interrupted(state: dict[str, Any]) -> bool:
    """Whether a saved sampler position is inside its epoch (some batches consumed)."""
    return int(state.get("batches_consumed", 0)) > 0
