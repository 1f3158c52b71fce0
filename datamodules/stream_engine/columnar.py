"""The columnar path of a stream worker: blocks of columns in, batches gathered by field out.

:class:`ColumnarReading` is mixed into :class:`~datamodules.stream_engine.stream.ShardedStream`.
With ``columnar=True`` (what :class:`~datamodules.StreamingDataModule` sets for Parquet and
JSONL shards with the default collate and no ``transform``) a worker reads its records as
blocks (:func:`~datamodules.shards.records.read_blocks`), keeps them in a
:class:`~datamodules.stream_engine.columns.RowStore`, and shuffles the records' *positions*
through its buffer: the same positions, the same generator and the same draws as the record
path, so the same records in the same order, in the same batches. Each batch is then gathered
from the columns (:func:`~datamodules.stream_engine.gather.gather`), or, where only records give
it exactly, collated from the records the columns hold: the batches equal the record path's.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import numpy as np
from torch.utils.data import get_worker_info

from collates.padding import PadCollate
from datamodules.stream_engine.batching import LABEL_PAD_VALUE, stream_collate
from datamodules.stream_engine.columns import Block, RowStore, preload
from datamodules.stream_engine.elastic import runs
from datamodules.stream_engine.gather import gather, gather_group
from datamodules.stream_engine.layout import order_pieces
from datamodules.stream_engine.messages import (
    MESSAGE_BATCHES,
    MESSAGE_BYTES,
    PackedGroup,
    Views,
    flat_bytes,
)
from datamodules.stream_engine.readers import head_start
from datamodules.stream_engine.shuffle import replay_shuffle, shuffle_runs

__all__ = [
    "ColumnarReading",
    "DEFAULT_PADDING",
    "PositionQueue",
    "columnar_reason",
    "reads_columns",
]

#: The padding rules of the default collate (:func:`stream_collate`'s: label fields pad with
#: -100).
DEFAULT_PADDING = PadCollate(0, label_pad_value=LABEL_PAD_VALUE)


def columnar_reason(
    formats: set[str], reads_blocks: bool, transform: Any, collate: Any
) -> str | None:
    """Why a split's batches are collated from records; None when they are gathered from
    columns (Parquet and JSONL shards, the default collate, no transform)."""
    from datamodules.shards.records import COLUMNAR

    if not reads_blocks:
        return "records from read_shard(), or image records"
    if collate is not stream_collate:
        return "a collate= of its own"
    if transform is not None:
        return "transform= / train_transforms= / eval_transforms= take records"
    others = sorted(formats - set(COLUMNAR))
    if others:
        return f"{', '.join(others)} shards are read as records"
    return None


def reads_columns(shards: Any, reader: Any, transform: Any, collate: Any) -> bool:
    """Whether a split's batches are gathered from columns (:func:`columnar_reason`)."""
    formats = {shard.fmt for shard in shards}
    return columnar_reason(formats, hasattr(reader, "blocks"), transform, collate) is None


class PositionQueue:
    """Hands out the positions of arrays of them, ``k`` at a time, in order."""

    def __init__(self, arrays: Iterator[np.ndarray]) -> None:
        self._arrays = arrays
        self._head = np.zeros(0, dtype=np.int64)

    def take(self, k: int) -> np.ndarray:
        """The next ``k`` positions (fewer when the arrays run out)."""
        parts = []
        while k:
            if not len(self._head):
                head = next(self._arrays, None)
                if head is None:
                    break
                self._head = head
            part, self._head = self._head[:k], self._head[k:]
            parts.append(part)
            k -= len(part)
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


class ColumnarReading:
    """Reading blocks of columns and gathering batches from them (a mixin of the stream)."""

    paths: list[str]
    reader: Any
    sources: Any
    source_key: str | None
    collate: Any
    _send_messages: bool
    _yielded: int

    def _preload(self, planned: list[str]) -> None:
        """Imports the block decoders while a remote first shard's requests are answered
        (:func:`~datamodules.stream_engine.readers.head_start`)."""
        head_start(planned, "columns", preload)

    def _read_blocks(
        self, order: list[tuple[int, int, int, int]], cum: list[int], u: int, v: int
    ) -> Iterator[Block]:
        """The records at global positions ``[u, v)`` (past ``N``: wrapped) as blocks."""
        for shard, first, stop, source in order_pieces(order, cum, u, v):
            yield from self._shard_blocks(shard, first, stop, source)

    def _shard_blocks(self, shard: int, start: int, stop: int, source: int) -> Iterator[Block]:
        path = self.paths[shard]
        got = start
        for table, records in self.reader.blocks(path, start, stop):
            rows = table.num_rows if table is not None else len(records)
            positions = np.arange(got, got + rows, dtype=np.int64)
            if table is not None:
                block = Block.from_arrow(table, shard, positions)
            else:
                block = Block(None, rows, shard, positions, records)
            if source >= 0 and self.source_key is not None:
                if records is not None:
                    for record in records:
                        if not isinstance(record, MutableMapping):
                            raise TypeError(
                                f"source_key={self.source_key!r} needs dict records; shard "
                                f"{path!r} gave {type(record).__name__}."
                            )
                block = block.with_constant(self.source_key, self.sources[source].name)
            got += rows
            yield block
        if got != stop:
            raise RuntimeError(
                f"shard {path!r} ended after record {got}, but its index promised more "
                f"(up to {stop}): was it changed after indexing? Index it again (delete its "
                "cache entry)."
            )

    def _position_blocks(
        self, order: list[tuple[int, int, int, int]], cum: list[int], pos: np.ndarray
    ) -> Iterator[Block]:
        """The records at the global positions ``pos`` (ascending runs) as blocks, read
        range by range; rows between two wanted ones are read and left out."""
        for i, j, u, v in runs(pos):
            if j - i == v - u:
                yield from self._read_blocks(order, cum, u, v)
                continue
            keep = np.zeros(v - u, dtype=bool)
            keep[pos[i:j] - u] = True
            at = 0
            for block in self._read_blocks(order, cum, u, v):
                rows = np.flatnonzero(keep[at : at + block.n])
                at += block.n
                if len(rows):
                    yield block.take(rows)

    def _gathered(
        self,
        read_blocks: Callable[[int], Iterator[Block]],
        span: Any,
        plan: Any,
        done: int,
        worker: int,
        rng: random.Random,
    ) -> Iterator[Any]:
        """A worker's batches of a segment from its ``done``-th, gathered from columns
        (``read_blocks(i)`` reads its records ``i`` to ``span.n`` as blocks)."""
        store = RowStore()
        queue = PositionQueue(self._shuffled(store, read_blocks, span.n, span.t, rng))
        # Batches are gathered a group at a time (one message's worth in a worker), which
        # costs a few NumPy operations per group instead of per batch.
        sending = self._send_messages and get_worker_info() is not None
        j, end, per_group = span.first + done, span.first + span.mine, 1
        while j < end:
            sizes = [plan.batch_size_at(self.rank, i) for i in range(j, min(end, j + per_group))]
            chunks = []
            for i, size in enumerate(sizes):
                chunk = queue.take(size)
                if len(chunk) != size:
                    raise RuntimeError(f"worker {worker} ran out of records in batch {j + i}.")
                chunks.append(chunk)
            positions = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
            try:
                group = gather_group(store, positions, sizes, DEFAULT_PADDING, flat_bytes)
            except Exception:  # the batch by batch path raises what the user must see
                group = None
            j += len(sizes)
            if group is None:
                for chunk in chunks:
                    self._yielded += 1
                    batch = self._columnar_batch(store, chunk, self._collate_error)
                    store.release(chunk)
                    yield batch
                continue
            flat, layouts = group
            store.release(positions)
            per_group = max(1, min(MESSAGE_BATCHES, MESSAGE_BYTES * len(sizes) // len(flat)))
            if sending:
                self._yielded += len(sizes)
                yield PackedGroup(flat, layouts)
                continue
            views = Views(flat)
            for layout in layouts:
                self._yielded += 1
                yield views.rebuilt(layout)

    def _shuffled(
        self,
        store: RowStore,
        read_blocks: Callable[[int], Iterator[Block]],
        n: int,
        t: int,
        rng: random.Random,
    ) -> Iterator[np.ndarray]:
        """A worker's ``n`` record positions after shuffling, from the ``t``-th on, as arrays:
        the record path's order (:func:`~datamodules.stream_engine.shuffle.shuffle_runs`), each
        block kept in ``store`` before its positions can be emitted."""

        def runs(start: int) -> Iterator[tuple[int, int]]:
            cursor = start
            for block in read_blocks(start):
                store.add(block, cursor)
                yield cursor, cursor + block.n
                cursor += block.n

        size = self.shuffle_buffer if self.shuffle else 0
        if size <= 1:
            for a, b in runs(t):
                yield np.arange(a, b, dtype=np.int64)
            return
        if t == 0:
            yield from shuffle_runs(runs(0), size, rng, [])
            return
        positions, p, flushing = replay_shuffle(n, t, size, rng)
        if not positions:
            return
        held = np.asarray(positions, dtype=np.int64)

        def unread() -> Iterator[tuple[int, int]]:
            """The runs past ``p``; the records before it that were delivered are dropped."""
            for a, b in runs(int(held.min())):
                if a < p:
                    run = np.arange(a, min(b, p), dtype=np.int64)
                    delivered = run[~np.isin(run, held)]
                    if len(delivered):
                        store.release(delivered)
                if b > p:
                    yield max(a, p), b

        if flushing:  # the input had run out: the held records, in the replayed order
            for _ in unread():
                pass
            yield held
            return
        yield from shuffle_runs(unread(), size, rng, positions)

    def _columnar_batch(self, store: RowStore, positions: np.ndarray, where: Any) -> Any:
        """The batch of the records at ``positions``: from the columns, or from the records
        where only they give it exactly (errors then name the record, as the record path's)."""
        batch = None
        try:
            batch = gather(store, positions, DEFAULT_PADDING)
        except Exception:  # the record path raises what the user must see, naming the record
            batch = None
        if batch is not None:
            return batch
        items = [(store.record(p), *store.where(p)) for p in positions.tolist()]
        samples = [item[0] for item in items]
        try:
            return self.collate(samples)
        except Exception as err:
            raise where(err, items, samples) from err
