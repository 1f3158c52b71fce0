"""ShardedStream: an IterableDataset over record shards, exactly once across ranks and workers.

How records are placed (one epoch):

1. The shards, in an order shuffled from ``seed + epoch`` (or as given), form one global
   sequence of ``N`` records; each shard contributes its record count (from
   :func:`~datamodules.shards.index.index_shards`).
2. Rank ``r`` of ``R`` takes a contiguous range of that sequence, the ranges as even as
   possible, cut into the same number of batches on every rank, and deals its batches to
   its DataLoader workers in contiguous blocks (the rules:
   :class:`~datamodules.stream_engine.layout.Plan`). A worker reads its range shard piece by
   shard piece, seeking to the first record (a Parquet row group, a line offset from the
   index), shuffles it through a buffer of ``shuffle_buffer`` records seeded from ``(seed,
   epoch, rank, worker)``, and yields whole collated batches.

So every record is delivered exactly once per epoch across all ranks and workers, whatever
the number and sizes of the shards, and every rank yields the same number of batches, so DDP
never waits on a rank that ran out. The only exception is a split too small for that (fewer
records than ranks, or ``batch_size=1`` with ``N % R != 0``): the few ranks short of a
record then repeat records from the start of the epoch, as ``DistributedSampler`` does, and
a warning says how many (:attr:`ShardedStream.num_padded`).

Epochs: each iteration through a :class:`~datamodules.stream_engine.loader.StreamLoader` runs the
next epoch (reshuffled, as ``RandomSampler`` does); :meth:`ShardedStream.set_epoch` decides
explicitly. Without shuffling the order does not depend on the epoch. A ``transform`` or
``collate`` with a ``set_epoch(epoch)`` method is told each epoch as it starts, in the process
that iterates (image-text captions pick one of a record's captions per epoch).

Resume. The DataLoader takes batches from its workers round-robin (``in_order=True``), so
after the rank has delivered ``k`` batches worker ``w`` has delivered ``k // W + (w < k % W)``
of them. A position is thus ``(epoch, k)`` plus the layout that delivered it. On the same
layout (world size, worker count, batch size) each worker replays its shuffle buffer over
record *positions* (cheap, no I/O), re-reads only the records still in the buffer and
continues, and the workers' roles rotate so the round-robin continues where it stopped: the
same batches as without the interruption. On another layout the records not delivered yet
are recomputed in index space and re-split over the new ranks and workers
(:mod:`~datamodules.stream_engine.elastic`): still every record exactly once, the same number of
batches on every rank, and the next epochs are those of a fresh run on the new layout.
Other shards, another seed, ``shuffle``, ``shuffle_buffer`` or ``drop_last`` raise a
ValueError instead of silently duplicating or dropping records.

Use :class:`~datamodules.stream_engine.loader.StreamLoader` (a DataLoader) to iterate: it
numbers the
epochs, counts delivered batches for ``state_dict`` and passes both to persistent workers
through shared memory.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from itertools import compress, count, islice, repeat
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from datamodules.core.checks import check_int, check_on_error
from datamodules.core.elastic import Segment
from datamodules.core.loaders import passthrough
from datamodules.core.mixture import Mixture
from datamodules.shards.errors import RecordError
from datamodules.shards.formats import TABLE_FORMATS
from datamodules.shards.index import ShardIndex
from datamodules.stream_engine.columnar import ColumnarReading
from datamodules.stream_engine.columns import preload as preload_columns
from datamodules.stream_engine.elastic import buffer_rng, runs
from datamodules.stream_engine.failures import (
    COLLATE_HINT,
    TRANSFORM_HINT,
    batch_error,
    first_failing,
    record_place,
)
from datamodules.stream_engine.layout import Plan, order_pieces, worker_done
from datamodules.stream_engine.messages import messages
from datamodules.stream_engine.mixed import MixedStream
from datamodules.stream_engine.mixing import StreamSource, check_stream_sources
from datamodules.stream_engine.position import StreamPosition
from datamodules.stream_engine.readers import Reader, ShardReader
from datamodules.stream_engine.remainder import RemainingSequence, remaining_sequence
from datamodules.stream_engine.shuffle import replay_shuffle, shuffle_buffer

__all__ = ["ShardedStream"]


class ShardedStream(ColumnarReading, MixedStream, StreamPosition, IterableDataset):
    """Streams collated batches from shards; exactly once per epoch over ranks x workers.

    Args:
        shards: :class:`~datamodules.shards.index.ShardIndex` objects (from
            ``index_shards``) or ``(path, record_count)`` pairs, in a fixed order (the same
            on every rank).
        batch_size: Records per batch on each rank.
        rank: Global rank of this process.
        world_size: Global number of ranks.
        shuffle: Shuffle the shard order every epoch and records through the buffer.
        shuffle_buffer: Records each worker holds for shuffling (0 or 1: shard order only).
        seed: Base seed; epoch ``e`` shuffles from ``(seed, e)``.
        epoch: First epoch.
        drop_last: Every rank takes only full batches (the same number); the rest is dropped.
        transform: ``record -> sample``, applied in the worker after shuffling.
        collate: ``list of samples -> batch``; default keeps the list.
        reader: ``reader(path, start, stop) -> records``; default :class:`ShardReader` over
            the given indexes. Must be picklable for worker processes.
        on_error: ``"raise"`` or ``"skip"`` bad records (``ShardIndex`` shards must have been
            indexed with the same policy, so that counts match what is read).
        sources: Mix the shards as weighted sources (:mod:`~datamodules.stream_engine.mixing`):
            each a :class:`~datamodules.stream_engine.mixing.StreamSource` naming its shards (by
            position in ``shards``) and its quota of records per epoch. None: every shard once
            per epoch.
        mix: With ``sources``: a :class:`~datamodules.core.mixture.Mixture` that says each
            source's quota and position per epoch (weight schedules, a changed mix on resume)
            instead of the sources' fixed quotas.
        source_key: With ``sources``, each (dict) record gets its source's name in this field.
        columnar: Read Parquet and JSONL shards as blocks of columns and gather each batch
            by field (:mod:`~datamodules.stream_engine.columnar`): the batches of
            ``collate`` over the records, which must be the default collate
            (``stream_collate``); no ``transform``.

    Raises:
        ValueError: A bad argument (named in the message).
    """

    def __init__(
        self,
        shards: Sequence[ShardIndex | tuple[str, int]],
        *,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = False,
        shuffle_buffer: int = 10_000,
        seed: int = 0,
        epoch: int = 0,
        drop_last: bool = False,
        transform: Callable[[Any], Any] | None = None,
        collate: Callable[[list[Any]], Any] | None = None,
        reader: Reader | None = None,
        on_error: str = "raise",
        sources: Sequence[StreamSource] | None = None,
        source_key: str | None = None,
        columnar: bool = False,
        mix: Mixture | None = None,
    ) -> None:
        super().__init__()
        self.batch_size = check_int(batch_size, "batch_size", 1)
        self.world_size = check_int(world_size, "world_size", 1)
        self.rank = check_int(rank, "rank", 0, self.world_size - 1)
        self.shuffle_buffer = check_int(shuffle_buffer, "shuffle_buffer", 0)
        self.seed = check_int(seed, "seed")
        self.epoch = check_int(epoch, "epoch", 0)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        self.on_error = check_on_error(on_error)
        self.paths, self.counts = [], []
        indexes = {}
        for shard in shards:
            if isinstance(shard, ShardIndex):
                if shard.fmt not in TABLE_FORMATS and shard.on_error != on_error:
                    raise ValueError(
                        f"shard {shard.path!r} was indexed with on_error={shard.on_error!r} but "
                        f"the stream reads with on_error={on_error!r}; index it again."
                    )
                indexes[shard.path] = shard
                path, count = shard.path, shard.count
            else:
                path, count = shard
            self.paths.append(str(path))
            self.counts.append(check_int(count, f"record count of {path!r}", 0))
        if not self.paths:
            raise ValueError("shards=[] is not accepted: give at least one shard.")
        if len(set(self.paths)) != len(self.paths):
            twice = next(p for p in self.paths if self.paths.count(p) > 1)
            raise ValueError(f"shard {twice!r} is listed twice; its records would be read twice.")
        self.transform = transform
        self.collate = collate if collate is not None else passthrough
        self.reader = reader if reader is not None else ShardReader(indexes, on_error)
        self.sources = list(sources) if sources is not None else None
        self.source_key = source_key
        if columnar and (transform is not None or not hasattr(self.reader, "blocks")):
            raise ValueError(
                "columnar=True reads blocks of columns: it needs a reader with blocks() (the "
                "default ShardReader) and no transform."
            )
        self.columnar = bool(columnar)
        if self.sources is not None:
            check_stream_sources(self.sources, len(self.paths))
            if hasattr(self.reader, "continues"):  # it reads shards in chunks: continue them
                self.reader.continues = True
        self._init_mix(mix)
        self.num_padded, self.num_dropped = self._plan.padded, self._plan.dropped
        if self.num_padded:
            warnings.warn(
                f"{self.num_records} record(s) cannot give {self.world_size} ranks "
                f"{self._plan.nb} non-empty batch(es) each: {self.num_padded} record(s) are "
                "repeated so that every rank yields the same number of batches.",
                stacklevel=2,
            )
        self._init_position()
        self._cache: tuple[Any, Any, Plan] | None = None
        #: Set by a StreamLoader with workers: each worker sends its batches grouped in
        #: messages (:mod:`~datamodules.stream_engine.messages`).
        self._send_messages = False

    # ------------------------------------------------------------------ layout
    @property
    def _nb(self) -> int:
        return self._plan.nb

    def summary(self) -> dict[str, int]:
        """Records, batches per rank, repeated and dropped records of one epoch."""
        return {
            "records": self.num_records,
            "shards": len(self.paths),
            "batches_per_rank": self._plan.nb,
            "rank_records": self._plan.rank_size[self.rank],
            "padded": self.num_padded,
            "dropped": self.num_dropped,
            "resume_repeats": self.resume_repeats,
        }

    def _segment_plan(
        self, epoch: int, segments: tuple[Segment, ...]
    ) -> tuple[RemainingSequence | None, Plan]:
        """The sequence (None: the whole epoch) and layout of the segment after ``segments``;
        the sequence is built only where a worker reads it
        (:mod:`~datamodules.stream_engine.remainder`)."""
        if not segments:
            return None, self.plan_of(epoch)
        key = (epoch, segments)
        if self._cache is None or self._cache[0] != key:
            size = self.shuffle_buffer if self.shuffle else 0
            seq = remaining_sequence(
                self.records_of(epoch), self.seed, epoch, size, self.drop_last, segments
            )
            plan = Plan.make(len(seq), self.world_size, self.batch_size, self.drop_last)
            self._cache = (key, seq, plan)
        return self._cache[1], self._cache[2]

    def _order(self, epoch: int) -> tuple[list[tuple[int, int, int, int]], list[int]]:
        """The epoch's record sequence as pieces ``(shard, start, stop, source)`` (source -1:
        not mixed) and their cumulative lengths."""
        if self.sources is None:
            order = list(range(len(self.paths)))
            if self.shuffle:
                random.Random(f"{self.seed}:{epoch}:shards").shuffle(order)
            pieces = [(k, 0, self.counts[k], -1) for k in order]
        else:
            pieces = self._mixed_order(epoch)
        cum = [0]
        for _, start, stop, _ in pieces:
            cum.append(cum[-1] + stop - start)
        return pieces, cum

    def _read(
        self, order: list[tuple[int, int, int, int]], cum: list[int], u: int, v: int
    ) -> Iterator[tuple[Any, int, int]]:
        """Records at global positions ``[u, v)`` (past ``N``: wrapped, for padding), each as
        ``(record, shard, position in the shard)``, so that an error can name it."""
        for shard, first, stop, source in order_pieces(order, cum, u, v):
            path = self.paths[shard]
            tally = count(first)  # zip advances it only for records given
            records = islice(self.reader(path, first, stop), stop - first)
            if source >= 0 and self.source_key is not None:
                records = self._labelled(records, self.sources[source].name, path)
            yield from zip(records, repeat(shard), tally, strict=False)
            got = next(tally) - first
            if got != stop - first:
                raise RuntimeError(
                    f"shard {path!r} ended after record {first + got}, but its index "
                    f"promised {self.counts[shard]}: was it changed after indexing? Index it "
                    "again (delete its cache entry)."
                )

    def _labelled(self, records: Iterator[Any], name: str, path: str) -> Iterator[Any]:
        key = self.source_key
        for record in records:
            if not isinstance(record, MutableMapping):
                raise TypeError(
                    f"source_key={key!r} needs dict records; shard {path!r} gave "
                    f"{type(record).__name__}."
                )
            record[key] = name
            yield record

    def _plan_reads(
        self, order: list[tuple[int, int, int, int]], cum: list[int], positions: np.ndarray
    ) -> list[str]:
        """Tells a reader that prefetches (``reader.plan``) which shards come next, in order;
        returns them."""
        if not len(positions):
            return []
        pieces = np.searchsorted(np.asarray(cum[1:]), positions % cum[-1], side="right")
        shards = [order[int(k)][0] for k in pieces[np.r_[True, pieces[1:] != pieces[:-1]]]]
        planned = [self.paths[k] for k in dict.fromkeys(shards)]
        plan = getattr(self.reader, "plan", None)
        if plan is not None:
            plan(planned)
        return planned

    def _read_positions(self, order: list[int], cum: list[int], pos: np.ndarray) -> Iterator[Any]:
        """Records at the global positions ``pos`` (runs of them, read range by range)."""
        for i, j, u, v in runs(pos):
            if j - i == v - u:
                yield from self._read(order, cum, u, v)
            else:  # a few unwanted records between wanted ones: read past them
                keep = np.zeros(v - u, dtype=bool)
                keep[pos[i:j] - u] = True
                yield from compress(self._read(order, cum, u, v), keep.tolist())

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if info is None and self._pending is not None:  # iterated without a StreamLoader
            self.begin_epoch(1)
        epoch, skip, saved, segments = self._read_shared()
        if info is None:  # main process: a resume position is used once
            self._shared[1] = self._shared[3] = 0
            self._workers = 1
        done = 0
        if self._worker_resume is not None:  # set in this worker by load_state_dict
            epoch, done, segments = self._worker_resume
            self._worker_resume = None
        elif skip:
            if saved != workers:
                raise RuntimeError(
                    f"cannot resume: {skip} batches were delivered by {saved} worker(s); this "
                    f"loader has {workers}: iterate the stream through a StreamLoader."
                )
            # The DataLoader restarts its round-robin at worker 0; the saved order continued
            # with worker ``skip % workers``, so loader worker ``i`` plays that one + i.
            worker = (worker + skip) % workers
            done = worker_done(skip, workers, worker)
        seq, plan = self._segment_plan(epoch, segments)
        self.epoch = epoch
        for part in (self.transform, self.collate):  # parts that depend on the epoch
            follow = getattr(part, "set_epoch", None)
            if follow is not None:
                follow(epoch)
        self._yielded = done + (sum(s.batches for s in segments) if info is None else 0)
        batches = self._batches(epoch, worker, workers, done, seq, plan, len(segments))
        if info is not None and self._send_messages:  # a StreamLoader's worker
            return messages(batches, info.id)
        return batches

    def _batches(
        self,
        epoch: int,
        worker: int,
        workers: int,
        done: int,
        seq: RemainingSequence | None,
        plan: Plan,
        segment: int,
    ) -> Iterator[Any]:
        """Worker ``worker``'s share of this rank's batches of a segment, from its ``done``-th."""
        span = plan.span(self.rank, worker, workers, done)
        if done >= span.mine:
            return
        order, cum = self._order(epoch)
        if seq is None:
            planned = self._plan_reads(order, cum, span.base + np.arange(span.n))
            self._expect_reads(order, cum, span.base, span.base + span.n)

            def read_from(i: int) -> Iterator[Any]:
                return self._read(order, cum, span.base + i, span.base + span.n)

        else:
            wrap = span.base + span.n > len(seq)  # a padded layout repeats from the start
            pos = (
                seq.take((span.base + np.arange(span.n)) % len(seq))
                if wrap
                else seq.take_range(span.base, span.base + span.n)
            )
            planned = self._plan_reads(order, cum, pos)

            def read_from(i: int) -> Iterator[Any]:
                return self._read_positions(order, cum, pos[i:])

        rng = buffer_rng(self.seed, epoch, self.rank, worker, segment)
        if self.columnar:  # blocks of columns; the buffer shuffles the records' positions
            self._preload(planned)
            if seq is None:

                def read_blocks(i: int) -> Iterator[Any]:
                    return self._read_blocks(order, cum, span.base + i, span.base + span.n)

            else:

                def read_blocks(i: int) -> Iterator[Any]:
                    return self._position_blocks(order, cum, pos[i:])

            yield from self._gathered(read_blocks, span, plan, done, worker, rng)
            return
        records = self._records(read_from, span.n, span.t, rng)
        transform, collate = self.transform, self.collate
        set_fill = getattr(collate, "set_fill", None)
        if set_fill is not None:  # where a batch of only bad records finds its good one
            set_fill(lambda: _samples(read_from(0), transform))
        for j in range(span.first + done, span.first + span.mine):
            size = plan.batch_size_at(self.rank, j)
            chunk = list(islice(records, size))
            if len(chunk) != size:
                raise RuntimeError(f"worker {worker} ran out of records in batch {j}.")
            samples = [item[0] for item in chunk]
            if transform is not None:
                i = 0
                try:
                    for i, sample in enumerate(samples):
                        samples[i] = transform(sample)
                except Exception as err:
                    raise batch_error(err, self._where(chunk[i]), TRANSFORM_HINT) from err
            self._yielded += 1
            try:
                batch = collate(samples)
            except RecordError:  # it names its record already (an image record's collate)
                raise
            except Exception as err:
                raise self._collate_error(err, chunk, samples) from err
            yield batch

    def prepare_workers(self) -> None:
        """Imports, once in this process, what its DataLoader workers import on first use
        (the columnar readers; a reader's or collate's ``preload``), so that workers forked
        from it start with them instead of paying for them at every fresh start."""
        if self.columnar:
            preload_columns()
        for part in (self.reader, self.collate):
            preload = getattr(part, "preload", None)
            if preload is not None:
                preload()

    def _where(self, item: tuple[Any, int, int]) -> tuple[str, str, str | None]:
        """(shard, line or row, source name) of a record the stream carries."""
        _, shard, position = item
        path = self.paths[shard]
        index_of = getattr(self.reader, "index_of", None)
        index = index_of(path) if index_of is not None else None
        place = record_place(index, position, getattr(self.reader, "options", None))
        source = None
        if self.sources is not None:
            source = next((s.name for s in self.sources if shard in s.shards), None)
        return path, place, source

    def _collate_error(
        self, err: Exception, chunk: list[tuple[Any, int, int]], samples: list[Any]
    ) -> Exception:
        """The collate's error, naming the record of the batch it failed on."""
        culprit = first_failing(self.collate, samples)
        if culprit is None:  # only the whole batch fails: name its first record
            culprit = 0
        return batch_error(err, self._where(chunk[culprit]), COLLATE_HINT)

    def _records(
        self,
        read_from: Callable[[int], Iterator[Any]],
        n: int,
        t: int,
        rng: random.Random,
    ) -> Iterator[Any]:
        """A worker's ``n`` records after shuffling, from the ``t``-th on (``read_from(i)``
        reads its records ``i`` to ``n``)."""
        size = self.shuffle_buffer if self.shuffle else 0
        if size <= 1:
            return read_from(t)
        if t == 0:
            return shuffle_buffer(read_from(0), size, rng, [])
        positions, p, flushing = replay_shuffle(n, t, size, rng)
        if not positions:
            return iter(())
        first = min(positions)
        items = read_from(first)
        if flushing:  # the input had run out: emit the held records in the replayed order
            wanted = set(positions)
            held = {}
            for pos, rec in zip(range(first, n), items, strict=False):
                if pos in wanted:
                    held[pos] = rec
            return iter([held[pos] for pos in positions])
        slot = {pos: i for i, pos in enumerate(positions)}
        buf: list[Any] = [None] * len(positions)
        for pos in range(first, p):
            rec = next(items)
            if pos in slot:
                buf[slot[pos]] = rec
        return shuffle_buffer(items, size, rng, buf)


def _samples(items: Iterator[Any], transform: Callable[[Any], Any] | None) -> Iterator[Any]:
    """The samples of a worker's records ``(record, shard, position)`` in read order."""
    for item in items:
        yield item[0] if transform is None else transform(item[0])
