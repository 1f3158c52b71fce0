"""ShardedStream: an IterableDataset over record shards, exactly once across ranks and workers.

How records are placed (one epoch):

1. The shards, in an order shuffled from ``seed + epoch`` (or as given), form one global
   sequence of ``N`` records; each shard contributes its record count (from
   :func:`~datamodules.streaming.index.index_shards`).
2. Rank ``r`` of ``R`` takes a contiguous range of that sequence, the ranges as even as
   possible, and cuts it into ``ceil(ceil(N / R) / batch_size)`` batches, the same count on
   every rank: all full except the last one, or the last two when a rank holds one batch less
   one record (they then split one batch's worth). With ``drop_last`` every rank takes
   ``floor(floor(N / R) / batch_size)`` full batches and the rest of the epoch is dropped.
3. The rank's batches are dealt to its DataLoader workers in contiguous blocks (worker ``w``
   of ``W`` gets ``nb // W`` batches, one more if ``w < nb % W``). A worker reads its range
   shard piece by shard piece, seeking to the first record (a Parquet row group, a line offset
   from the index), shuffles it through a buffer of ``shuffle_buffer`` records seeded from
   ``(seed, epoch, rank, worker)``, and yields whole collated batches.

So every record is delivered exactly once per epoch across all ranks and workers, whatever
the number and sizes of the shards, and every rank yields the same number of batches, so DDP
never waits on a rank that ran out. The only exception is a split too small for that (fewer
records than ranks, or ``batch_size=1`` with ``N % R != 0``): the few ranks short of a
record then repeat records from the start of the epoch, as ``DistributedSampler`` does, and
a warning says how many (:attr:`ShardedStream.num_padded`).

The DataLoader takes batches from its workers round-robin (``in_order=True``), so after the
rank has delivered ``k`` batches worker ``w`` has delivered ``k // W + (w < k % W)`` of them. A
position is thus ``(epoch, k)``: on resume each worker replays its shuffle buffer over record
*positions* (cheap, no I/O), re-reads only the records still in the buffer and continues, and
the workers' roles rotate so the round-robin continues where it stopped. Resuming needs the
same world size, worker count, shards, batch size, seed and shuffle settings; anything else
raises a ValueError instead of silently duplicating or dropping records.

Use :class:`~datamodules.streaming.loader.StreamLoader` (a DataLoader) to iterate: it numbers the
epochs, counts delivered batches for ``state_dict`` and passes both to persistent workers
through shared memory.
"""

from __future__ import annotations

import hashlib
import json
import random
import warnings
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import count, islice
from operator import itemgetter
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

from datamodules.core.loaders import passthrough
from datamodules.streaming.index import ShardIndex
from datamodules.streaming.readers import Reader, ShardReader
from datamodules.streaming.shuffle import replay_shuffle, shuffle_buffer

__all__ = ["ShardedStream"]

_STATE_VERSION = 1
_first = itemgetter(0)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _check_int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} is not accepted: use an int >= {minimum}.")
    return value


class ShardedStream(IterableDataset):
    """Streams collated batches from shards; exactly once per epoch over ranks x workers.

    Args:
        shards: :class:`~datamodules.streaming.index.ShardIndex` objects (from
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
    ) -> None:
        super().__init__()
        self.batch_size = _check_int(batch_size, "batch_size", 1)
        self.world_size = _check_int(world_size, "world_size", 1)
        self.rank = _check_int(rank, "rank", 0)
        if rank >= world_size:
            raise ValueError(f"rank={rank} is not accepted: use 0 <= rank < {world_size}.")
        self.shuffle_buffer = _check_int(shuffle_buffer, "shuffle_buffer", 0)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed={seed!r} is not accepted: use an int.")
        self.seed = seed
        self.epoch = _check_int(epoch, "epoch", 0)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error={on_error!r} is not accepted: use 'raise' or 'skip'.")
        self.on_error = on_error
        self.paths, self.counts = [], []
        indexes = {}
        for shard in shards:
            if isinstance(shard, ShardIndex):
                if shard.fmt != "parquet" and shard.on_error != on_error:
                    raise ValueError(
                        f"shard {shard.path!r} was indexed with on_error={shard.on_error!r} but "
                        f"the stream reads with on_error={on_error!r}; index it again."
                    )
                indexes[shard.path] = shard
                path, count = shard.path, shard.count
            else:
                path, count = shard
            self.paths.append(str(path))
            self.counts.append(_check_int(count, f"record count of {path!r}", 0))
        if not self.paths:
            raise ValueError("shards=[] is not accepted: give at least one shard.")
        if len(set(self.paths)) != len(self.paths):
            twice = next(p for p in self.paths if self.paths.count(p) > 1)
            raise ValueError(f"shard {twice!r} is listed twice; its records would be read twice.")
        self.transform = transform
        self.collate = collate if collate is not None else passthrough
        self.reader = reader if reader is not None else ShardReader(indexes, on_error)
        self.num_records = sum(self.counts)
        self._layout()
        if self.num_padded:
            warnings.warn(
                f"{self.num_records} record(s) cannot give {self.world_size} ranks "
                f"{self._nb} non-empty batch(es) each: {self.num_padded} record(s) are "
                "repeated so that every rank yields the same number of batches.",
                stacklevel=2,
            )
        # [epoch, batches already delivered in it, worker count they were delivered with];
        # shared memory, so that persistent workers see a new epoch or a resume position.
        self._shared = torch.tensor([self.epoch, 0, 0], dtype=torch.int64).share_memory_()
        self._yielded = 0
        self._iterated = False
        self._workers: int | None = None
        self._pending: tuple[int, int, int] | None = None
        self._worker_resume: tuple[int, int] | None = None

    # ------------------------------------------------------------------ layout
    def _layout(self) -> None:
        n, ranks, b = self.num_records, self.world_size, self.batch_size
        self.num_padded = self.num_dropped = 0
        if self.drop_last:
            self._nb = (n // ranks) // b
            self._rank_size = [self._nb * b] * ranks
            self.num_dropped = n - ranks * self._nb * b
        elif n == 0:
            self._nb, self._rank_size = 0, [0] * ranks
        else:
            self._nb = _ceil_div(_ceil_div(n, ranks), b)
            # A rank holding fewer records than batches (n < ranks, or b == 1 and n % ranks)
            # is topped up: every rank then holds exactly nb records.
            total = ranks * self._nb if n // ranks < self._nb else n
            self.num_padded = total - n
            self._rank_size = [total // ranks + (r < total % ranks) for r in range(ranks)]
        self._rank_start = [0]
        for size in self._rank_size[:-1]:
            self._rank_start.append(self._rank_start[-1] + size)

    def __len__(self) -> int:
        """Batches this rank yields per epoch (the same on every rank)."""
        return self._nb

    def _sizes(self, n: int) -> tuple[int, tuple[int, ...]]:
        """This rank's batches: ``(number of full batches, sizes of the ones after)``."""
        nb, b = self._nb, self.batch_size
        if nb == 0:
            return 0, ()
        last = n - b * (nb - 1)
        if last >= 1:
            return nb - 1, (last,)
        return nb - 2, ((b + 1) // 2, b // 2)  # one record short of a boundary: split one

    def _prefix(self, j: int, full: int, tail: tuple[int, ...]) -> int:
        return min(j, full) * self.batch_size + sum(tail[: max(0, j - full)])

    def summary(self) -> dict[str, int]:
        """Records, batches per rank, repeated and dropped records of one epoch."""
        return {
            "records": self.num_records,
            "shards": len(self.paths),
            "batches_per_rank": self._nb,
            "rank_records": self._rank_size[self.rank],
            "padded": self.num_padded,
            "dropped": self.num_dropped,
        }

    def _order(self, epoch: int) -> tuple[list[int], list[int]]:
        order = list(range(len(self.paths)))
        if self.shuffle:
            random.Random(f"{self.seed}:{epoch}:shards").shuffle(order)
        cum = [0]
        for k in order:
            cum.append(cum[-1] + self.counts[k])
        return order, cum

    def _read(self, order: list[int], cum: list[int], u: int, v: int) -> Iterator[Any]:
        """Records at global positions ``[u, v)`` (past ``N``: wrapped, for padding)."""
        n = cum[-1]
        while u < v:
            base = (u // n) * n
            lo, hi = u - base, min(v - base, n)
            k = bisect_right(cum, lo) - 1
            while lo < hi:
                a, b = lo - cum[k], min(hi, cum[k + 1]) - cum[k]
                if b > a:
                    path = self.paths[order[k]]
                    tally = count()  # zip advances it only for records the reader gave
                    records = islice(self.reader(path, a, b), b - a)
                    yield from map(_first, zip(records, tally, strict=False))
                    got = next(tally)
                    if got != b - a:
                        raise RuntimeError(
                            f"shard {path!r} ended after record {a + got}, but its index "
                            f"promised {self.counts[order[k]]}: was it changed after indexing? "
                            "Index it again (delete its cache entry)."
                        )
                    lo = cum[k] + b
                k += 1
            u = base + hi

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        epoch, skip, saved = (int(x) for x in self._shared.tolist())
        if info is None:  # main process: a resume position is used once
            self._shared[1] = 0
            self._pending = None
            self._workers = 1
        done = 0
        if self._worker_resume is not None:  # set in this worker by load_state_dict
            epoch, done = self._worker_resume
            self._worker_resume = None
        elif skip:
            if saved != workers:
                raise RuntimeError(
                    f"cannot resume: {skip} batches were delivered by {saved} worker(s); this "
                    f"loader has {workers}. Use num_workers={saved} (0 and 1 are the same)."
                )
            # The DataLoader restarts its round-robin at worker 0; the saved order continued
            # with worker ``skip % workers``, so loader worker ``i`` plays that one + i.
            worker = (worker + skip) % workers
            done = skip // workers + (worker < skip % workers)
        self.epoch, self._yielded = epoch, done
        return self._batches(epoch, worker, workers, done)

    def _batches(self, epoch: int, worker: int, workers: int, done: int) -> Iterator[Any]:
        """Worker ``worker``'s share of this rank's batches, from its ``done``-th on."""
        nb = self._nb
        mine = nb // workers + (worker < nb % workers)  # a contiguous block of batches
        first = worker * (nb // workers) + min(worker, nb % workers)
        if done >= mine:
            return
        full, tail = self._sizes(self._rank_size[self.rank])
        start = self._prefix(first, full, tail)
        base = self._rank_start[self.rank] + start
        n = self._prefix(first + mine, full, tail) - start  # its records
        t = self._prefix(first + done, full, tail) - start  # of which already delivered
        order, cum = self._order(epoch)
        records = self._records(order, cum, base, n, t, epoch, worker)
        transform, collate, b = self.transform, self.collate, self.batch_size
        for j in range(first + done, first + mine):
            size = b if j < full else tail[j - full]
            chunk = list(islice(records, size))
            if len(chunk) != size:
                raise RuntimeError(f"worker {worker} ran out of records in batch {j}.")
            if transform is not None:
                chunk = [transform(rec) for rec in chunk]
            self._yielded += 1
            batch = collate(chunk)
            yield batch

    def _records(self, order, cum, base: int, n: int, t: int, epoch: int, worker: int):
        """This worker's records after shuffling, from the ``t``-th on."""
        size = self.shuffle_buffer if self.shuffle else 0
        if size <= 1:
            return self._read(order, cum, base + t, base + n)
        rng = random.Random(f"{self.seed}:{epoch}:{self.rank}:{worker}:buffer")
        if t == 0:
            return shuffle_buffer(self._read(order, cum, base, base + n), size, rng, [])
        positions, p, flushing = replay_shuffle(n, t, size, rng)
        if not positions:
            return iter(())
        first = min(positions)
        items = self._read(order, cum, base + first, base + n)
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

    # ------------------------------------------------------------------ epochs and state
    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration run ``epoch`` from its start (drops a pending resume)."""
        self.epoch = _check_int(epoch, "epoch", 0)
        self._iterated, self._pending, self._yielded = False, None, 0
        self._shared.copy_(torch.tensor([epoch, 0, 0]))

    def _begin_epoch(self, workers: int) -> None:
        """Called by :class:`StreamLoader` before each iteration (in the main process)."""
        if self._pending is not None:
            epoch, skip, saved = self._pending
            self._pending = None
            if skip and saved != workers:
                raise ValueError(
                    f"cannot resume: the checkpoint's {skip} batches of epoch {epoch} were "
                    f"delivered by {saved} worker(s) per rank and this loader has "
                    f"{workers}; which records those were depends on the worker count. "
                    f"Resume with num_workers={saved} (0 and 1 are the same)."
                )
        else:
            epoch, skip = (self.epoch + 1 if self._iterated else self.epoch), 0
        self._iterated = True
        self.epoch, self._yielded, self._workers = epoch, skip, workers
        self._shared.copy_(torch.tensor([epoch, skip, workers]))

    def _config(self) -> dict[str, Any]:
        shards = json.dumps([[p, c] for p, c in zip(self.paths, self.counts, strict=True)])
        return {
            "version": _STATE_VERSION,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "shuffle_buffer": self.shuffle_buffer if self.shuffle else 0,
            "drop_last": self.drop_last,
            "num_records": self.num_records,
            "shards": hashlib.sha1(shards.encode()).hexdigest(),
        }

    def state_dict(self, batches: int | None = None) -> dict[str, Any]:
        """The position to resume from.

        In the main process: ``epoch`` and ``batches`` delivered by this rank in it (as
        counted by :class:`StreamLoader`, or ``batches`` if given, e.g. what the training
        loop consumed) and ``num_workers`` that delivered them. Inside a worker (torchdata's
        ``StatefulDataLoader`` asks there): that worker's own count, with ``level="worker"``.
        Plus the settings a resume must match (``world_size``, ``batch_size``, ``seed``,
        ``shuffle``, ``shuffle_buffer``, ``drop_last``, ``num_records``, ``shards``: a hash
        of the shard paths and counts). A finished epoch is saved as the next one at 0.
        """
        info = get_worker_info()
        if info is not None:
            return {
                **self._config(),
                "level": "worker",
                "epoch": self.epoch,
                "batches": self._yielded,
                "worker": info.id,
                "num_workers": info.num_workers,
            }
        done = self._yielded if batches is None else int(batches)
        epoch = self.epoch
        if self._nb and done >= self._nb:
            epoch, done = epoch + 1, 0
        return {
            **self._config(),
            "level": "rank",
            "epoch": epoch,
            "batches": done,
            "num_workers": self._workers or 1,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Makes the next iteration resume the saved epoch after its delivered batches.

        Raises:
            ValueError: The state was saved with other settings or shards (the message names
                the first difference), or a worker-level state is loaded outside a worker.
        """
        mine = self._config()
        for key, value in mine.items():
            if key == "shards" and state.get(key) != value:
                raise ValueError(
                    "cannot resume the stream exactly: the checkpoint was saved over other "
                    "shards (their paths, order or record counts differ). Resuming would "
                    "repeat or skip records; start the epoch over instead."
                )
            if state.get(key) != value:
                raise ValueError(
                    f"cannot resume the stream exactly: the checkpoint was saved with "
                    f"{key}={state.get(key)!r}, this stream has {key}={value!r}. Resuming "
                    "would repeat or skip records; start the epoch over instead."
                )
        epoch, batches = int(state["epoch"]), int(state["batches"])
        if not 0 <= batches <= self._nb:
            raise ValueError(f"cannot resume at batch {batches}: an epoch has {self._nb}.")
        if state.get("level") == "worker":
            info = get_worker_info()
            if info is None or (info.id, info.num_workers) != (
                state["worker"],
                state["num_workers"],
            ):
                where = f"worker {info.id} of {info.num_workers}" if info else "main process"
                raise ValueError(
                    f"cannot resume: state of worker {state['worker']} of "
                    f"{state['num_workers']} loaded in the {where}."
                )
            self.epoch, self._worker_resume = epoch, (epoch, batches)
            return
        workers = int(state["num_workers"])
        self.epoch, self._yielded, self._workers = epoch, batches, workers
        self._pending = (epoch, batches, workers)
        self._iterated = False
        self._shared.copy_(torch.tensor([epoch, batches, workers]))
