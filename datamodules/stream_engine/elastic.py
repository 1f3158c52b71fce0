"""Elastic resume of a stream: the rest of an interrupted epoch, on another layout.

An epoch may be delivered in *segments*. The first one is the fresh layout (ranks, workers and
batch size of the run that started the epoch, over the epoch's records in shard order); each
resume on another world size, worker count or batch size starts a new one over the records not
delivered yet. A checkpoint stores the earlier segments (:class:`~datamodules.core.elastic.Segment`,
map-style resume's type too) as ``[world, workers, batch_size, batches delivered per rank]``
lists (a few ints each: the state grows with resumes, never with records).

:func:`remainder` recomputes, in index space and without reading a record, which records
each segment delivered. Rank ``r`` of a segment took a contiguous range of that segment's
sequence (:class:`~datamodules.stream_engine.layout.Plan`); after the rank delivered ``k``
batches its worker ``w`` delivered ``k // K + (w < k % K)`` of them; and replaying the
worker's shuffle buffer over its record positions (:func:`emitted`) says exactly which of
its records those batches held. What is left (unread tails, records still in buffers) is
the next segment's sequence, in epoch order: a sorted array of global record positions.
The new layout cuts it with the same rules (equal batch counts on every rank) and each worker
reads its positions as runs (:func:`runs`), shuffled through its buffer again.

What cannot be recomputed is refused (:func:`check_resumable`): other shards or record counts,
another ``shuffle_seed``, ``shuffle``, ``shuffle_buffer`` or ``drop_last``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from datamodules.core.elastic import Segment
from datamodules.stream_engine.layout import Plan, worker_done
from datamodules.stream_engine.shuffle import replay_shuffle

__all__ = [
    "MAX_SEGMENTS",
    "buffer_rng",
    "check_resumable",
    "emitted",
    "remainder",
    "runs",
]

#: Resumes on another layout within one epoch (the segments travel in shared memory).
MAX_SEGMENTS = 64
#: Records a worker reads and drops rather than seeking again between two wanted runs.
RUN_GAP = 1024  # (line offsets are indexed every 1024 lines)

#: What a resume must keep, with what to say about it.
_KEEP = {
    "seed": "shuffle_seed",
    "shuffle": "shuffle",
    "shuffle_buffer": "shuffle_buffer",
    "drop_last": "drop_last",
    "num_records": "the same shards",
}


def buffer_rng(seed: int, epoch: int, rank: int, worker: int, segment: int) -> random.Random:
    """The shuffle buffer's generator of one worker in one segment of an epoch."""
    suffix = "" if segment == 0 else f":{segment}"
    return random.Random(f"{seed}:{epoch}:{rank}:{worker}:buffer{suffix}")


def emitted(n: int, t: int, size: int, rng: random.Random) -> np.ndarray:
    """Which of a worker's ``n`` records (relative positions) its first ``t`` emitted.

    ``size`` is the shuffle buffer (0 or 1: records are emitted in order).
    """
    if t <= 0:
        return np.zeros(0, dtype=np.int64)
    if size <= 1 or t >= n:
        return np.arange(t, dtype=np.int64)
    held, p, flushing = replay_shuffle(n, t, size, rng)
    out = np.ones(n if flushing else p, dtype=bool)
    out[np.asarray(held, dtype=np.int64)] = False
    return np.flatnonzero(out)


def remainder(
    num_records: int,
    seed: int,
    epoch: int,
    size: int,
    drop_last: bool,
    segments: Sequence[Segment],
) -> np.ndarray:
    """Global positions (sorted) of the epoch's records no segment has delivered yet.

    Args:
        num_records: Records of the epoch (``N``).
        seed: The stream's seed.
        epoch: The epoch.
        size: Shuffle buffer per worker (0 without shuffling).
        drop_last: The stream's ``drop_last``.
        segments: The delivered segments, in order.

    Raises:
        ValueError: A segment claims more batches than its layout has.
    """
    seq = np.arange(num_records, dtype=np.int64)
    for index, segment in enumerate(segments):
        world, workers, batch_size = segment.world, segment.workers, segment.batch_size
        k = segment.batches
        m = len(seq)
        plan = Plan.make(m, world, batch_size, drop_last)
        if not 0 <= k <= plan.nb:
            raise ValueError(
                f"cannot resume: segment {index} of epoch {epoch} claims {k} batches; its "
                f"layout ({world} ranks, batch_size={batch_size}) has {plan.nb}."
            )
        if m == 0:
            continue
        delivered = np.zeros(m, dtype=bool)
        for rank in range(world):
            for worker in range(workers):
                done = worker_done(k, workers, worker)
                if not done:
                    continue
                span = plan.span(rank, worker, workers, done)
                rng = buffer_rng(seed, epoch, rank, worker, index)
                rel = emitted(span.n, span.t, size, rng)
                delivered[(span.base + rel) % m] = True
        seq = seq[~delivered]
    return seq


def runs(positions: np.ndarray, gap: int = RUN_GAP) -> list[tuple[int, int, int, int]]:
    """Cuts ascending runs of global positions into reads.

    Returns ``(i, j, u, v)`` items: ``positions[i:j]`` all lie in ``[u, v)``, increasing, with
    at most ``gap`` unwanted records between two of them (read and dropped: cheaper than
    seeking again). ``j - i == v - u`` means the whole range is wanted.
    """
    n = len(positions)
    if n == 0:
        return []
    step = np.diff(positions)
    cuts = np.flatnonzero((step <= 0) | (step > gap + 1)) + 1
    bounds = [0, *cuts.tolist(), n]
    out = []
    for i, j in zip(bounds[:-1], bounds[1:], strict=True):
        out.append((i, j, int(positions[i]), int(positions[j - 1]) + 1))
    return out


def check_resumable(state: Mapping[str, Any], mine: Mapping[str, Any]) -> None:
    """Raises a ValueError naming what differs when ``state`` cannot resume exactly here.

    World size, worker count and batch size may differ (the rest of the epoch is re-split);
    shards, record counts, seed, shuffle settings and ``drop_last`` must be the same.
    """
    if state.get("version") not in (1, 2):
        raise ValueError(
            f"cannot resume the stream: state version {state.get('version')!r} is not one "
            "this version of the library reads (1 or 2)."
        )
    for key, keep in _KEEP.items():
        if state.get(key) != mine[key]:
            raise ValueError(
                f"cannot resume the stream exactly: the checkpoint was saved with "
                f"{key}={state.get(key)!r}, this stream has {key}={mine[key]!r}. Which "
                "records were delivered depends on it: keep "
                f"{keep}{'' if keep.startswith('the') else '=' + repr(state.get(key))} to "
                "resume (world size, num_workers and batch_size may change)."
            )
    if state.get("shards") != mine["shards"]:
        raise ValueError(
            "cannot resume the stream exactly: the checkpoint was saved over other shards "
            "(their paths, order or record counts differ). Resuming would repeat or skip "
            "records; keep the checkpoint's train_files, or start the epoch over instead."
        )
