"""The position of a ShardedStream: epochs, ``state_dict`` / ``load_state_dict`` and resumes.

:class:`StreamPosition` is mixed into :class:`~datamodules.stream_engine.stream.ShardedStream`. A
position is the epoch, the batches this rank delivered in it, the layout that delivered them
(world size, workers, batch size) and the segments of the epoch delivered on earlier layouts
(:mod:`~datamodules.stream_engine.elastic`). The main process keeps it in attributes; persistent
DataLoader workers read it from a shared-memory tensor at the start of each iteration.
"""

from __future__ import annotations

import copy
import hashlib
import json
import warnings
from typing import Any

import torch
from torch.utils.data import get_worker_info

from datamodules.core.checks import check_int
from datamodules.core.elastic import Segment
from datamodules.stream_engine.elastic import MAX_SEGMENTS, check_resumable
from datamodules.stream_engine.layout import Plan

__all__ = ["StreamPosition", "check_int"]

_STATE_VERSION = 2
Pending = tuple[int, int, tuple[int, int, int], tuple[Segment, ...]]


class StreamPosition:
    """Epochs and resumable position of :class:`~datamodules.stream_engine.stream.ShardedStream`
    (a mixin; the stream provides the layout, the shards and ``_segment_plan``)."""

    epoch: int
    rank: int
    world_size: int
    batch_size: int
    seed: int
    shuffle: bool
    shuffle_buffer: int
    drop_last: bool
    num_records: int
    paths: list[str]
    counts: list[int]
    _plan: Plan

    def _init_position(self) -> None:
        # [epoch, batches delivered in its current segment, worker count they were delivered
        # with, number of earlier segments, then (world, workers, batch_size, batches) of
        # each]: shared memory, so that persistent workers see a new epoch or a resume.
        self._shared = torch.zeros(4 + 4 * MAX_SEGMENTS, dtype=torch.int64).share_memory_()
        self._shared[0] = self.epoch
        self._yielded = 0
        self._iterated = False
        self._workers: int | None = None
        #: DataLoader workers that will iterate this stream (set by StreamLoader).
        self._loader_workers = 1
        #: Earlier segments of the epoch in progress (a resume on another layout).
        self._segments: tuple[Segment, ...] = ()
        #: Records the current resumed segment repeats (a remainder smaller than the ranks).
        self.resume_repeats = 0
        self._pending: Pending | None = None
        self._pending_state: dict[str, Any] | None = None
        #: The length to report instead, while a Trainer restores (see trainer_links).
        self._len_override: int | None = None
        self._worker_resume: tuple[int, int, tuple[Segment, ...]] | None = None

    def _segment_plan(self, epoch: int, segments: tuple[Segment, ...]) -> tuple[Any, Plan]:
        raise NotImplementedError

    def __len__(self) -> int:
        """Batches this rank yields in the epoch (the same on every rank).

        For an epoch resumed on another layout: the batches its earlier segments delivered
        plus those of its rest, which is how the Trainer counts the resumed epoch.
        """
        if self._len_override is not None:
            return self._len_override
        if self._pending is not None:
            _, segments, _ = self._resolve(self._pending, self._loader_workers)
        else:
            segments = self._segments
        if not segments:
            return self._plan.nb
        _, plan = self._segment_plan(self.epoch, segments)
        return sum(s.batches for s in segments) + plan.nb

    # ------------------------------------------------------------------ epochs and state
    def _write_shared(
        self, epoch: int, skip: int, workers: int, segments: tuple[Segment, ...]
    ) -> None:
        flat = [epoch, skip, workers, len(segments)] + [x for s in segments for x in s.to_list()]
        self._shared.zero_()
        self._shared[: len(flat)] = torch.tensor(flat, dtype=torch.int64)

    def _read_shared(self) -> tuple[int, int, int, tuple[Segment, ...]]:
        values = [int(x) for x in self._shared.tolist()]
        segments = tuple(Segment.from_list(values[4 + 4 * i : 8 + 4 * i]) for i in range(values[3]))
        return values[0], values[1], values[2], segments

    def resumed(self) -> tuple[int, int, int] | None:
        """``(epoch, earlier layouts, records repeated)`` when the epoch in progress (or about
        to resume) continues on another layout than the one that started it; else None."""
        if self._pending is not None:
            epoch, segments, _ = self._resolve(self._pending, self._loader_workers)
        else:
            epoch, segments = self.epoch, self._segments
        if not segments:
            return None
        return epoch, len(segments), self._segment_plan(epoch, segments)[1].padded

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration run ``epoch`` from its start (drops a pending resume)."""
        self.epoch = check_int(epoch, "epoch", 0)
        self._iterated, self._pending, self._pending_state, self._yielded = False, None, None, 0
        self._segments, self.resume_repeats, self._len_override = (), 0, None
        self._write_shared(epoch, 0, 0, ())

    def _resolve(self, pending: Pending, workers: int) -> tuple[int, tuple[Segment, ...], int]:
        """``(epoch, earlier segments, batches to skip in the current one)`` of a resume."""
        epoch, total, layout, segments = pending
        current = total - sum(s.batches for s in segments)
        if layout == (self.world_size, workers, self.batch_size) or not current:
            return epoch, segments, current  # the same layout continues its segment
        return epoch, (*segments, Segment(*layout, current)), 0

    @property
    def loader_workers(self) -> int:
        """The DataLoader workers that iterate this stream (1 in-process)."""
        return self._loader_workers

    @property
    def delivered(self) -> int:
        """Batches of the current epoch delivered so far (what ``state_dict`` saves)."""
        return self._yielded

    def next_epoch_outside_trainer(self) -> int:
        """The epoch a new loader over this split starts outside a Trainer: this one again if
        it never ran, else the next."""
        return self.epoch + int(self._iterated)

    def override_length(self, batches: int | None) -> None:
        """Makes ``len()`` report ``batches`` until called with None (an epoch that a resume
        ended: the Trainer measures the loader and sees it over)."""
        self._len_override = batches

    def attach_loader(self, num_workers: int) -> None:
        """Called by the :class:`~datamodules.stream_engine.loader.StreamLoader` that
        iterates this stream: its worker count, and whether its workers send batches in
        messages (they do whenever there are workers)."""
        self._loader_workers = max(num_workers, 1)
        self._send_messages = num_workers > 0

    def count_delivered(self, batches: int = 1) -> None:
        """Counts batches handed to the consumer, in the main process (a loader with workers;
        in-process, the stream counts its own)."""
        self._yielded += batches

    def begin_epoch(self, workers: int) -> None:
        """Called by :class:`StreamLoader` before each iteration (in the main process)."""
        if self._pending is not None:
            epoch, segments, skip = self._resolve(self._pending, workers)
            self._pending = self._pending_state = None
            if len(segments) > MAX_SEGMENTS:
                raise ValueError(
                    f"cannot resume: epoch {epoch} was resumed on another layout "
                    f"{len(segments)} times; at most {MAX_SEGMENTS} are kept."
                )
        else:
            epoch, segments, skip = (self.epoch + 1 if self._iterated else self.epoch), (), 0
        self._iterated = True
        self.epoch, self._segments, self._workers = epoch, segments, workers
        self._yielded = sum(s.batches for s in segments) + skip
        self.resume_repeats = self._segment_plan(epoch, segments)[1].padded if segments else 0
        if self.resume_repeats:
            warnings.warn(
                f"resuming epoch {epoch} on {self.world_size} rank(s): the records left cannot "
                f"give every rank the same number of non-empty batches, so "
                f"{self.resume_repeats} record(s) are repeated.",
                stacklevel=2,
            )
        self._write_shared(epoch, skip, workers, segments)

    def _config(self) -> dict[str, Any]:
        shards = json.dumps([[p, c] for p, c in zip(self.paths, self.counts, strict=True)])
        return {
            "version": _STATE_VERSION,
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
        loop consumed), the layout that delivered them (``world_size``, ``num_workers``,
        ``batch_size``) and the ``segments`` of the epoch delivered on earlier layouts
        (``[world, workers, batch_size, batches]`` each; see
        :mod:`~datamodules.stream_engine.elastic`). Inside a worker (torchdata's
        ``StatefulDataLoader`` asks there): that worker's own count, with ``level="worker"``.
        Plus the settings a resume must keep (``seed``, ``shuffle``, ``shuffle_buffer``,
        ``drop_last``, ``num_records``, ``shards``: a hash of the shard paths and counts). A
        finished epoch is saved as the next one at 0 (after an epoch resumed on another
        layout, with ``ended_length``: its batches, for a Trainer restoring at its last
        batch). The size does not depend on the number of records.
        """
        layout = {"world_size": self.world_size, "batch_size": self.batch_size}
        info = get_worker_info()
        if info is not None:
            return {
                **self._config(),
                **layout,
                "level": "worker",
                "epoch": self.epoch,
                "batches": self._yielded,
                "worker": info.id,
                "num_workers": info.num_workers,
                "segments": [s.to_list() for s in self._read_shared()[3]],
            }
        if self._pending_state is not None:  # loaded, not started yet: the same position
            return copy.deepcopy(self._pending_state)
        done = self._yielded if batches is None else int(batches)
        epoch, segments = self.epoch, self._segments
        length = len(self)
        ended = {}
        if length and done >= length:
            if segments and length != self._plan.nb:  # a resumed epoch, of another length:
                ended = {"ended_length": length}  # how many batches it had, for a Trainer
            epoch, done, segments = epoch + 1, 0, ()
        return {
            **self._config(),
            **layout,
            "level": "rank",
            "epoch": epoch,
            "batches": done,
            "num_workers": self._workers or self._loader_workers,
            "segments": [s.to_list() for s in segments],
            **ended,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Makes the next iteration resume the saved epoch after its delivered batches.

        The world size, worker count and batch size may differ from the saved ones: the
        records of the epoch not delivered yet are then re-split over this layout (see
        :mod:`~datamodules.stream_engine.elastic`).

        Raises:
            ValueError: The state was saved over other shards or with another seed,
                ``shuffle``, ``shuffle_buffer`` or ``drop_last`` (the message names the first
                difference and what to keep), or a worker-level state is loaded outside a
                worker.
        """
        check_resumable(state, self._config())
        epoch, batches = int(state["epoch"]), int(state["batches"])
        segments = tuple(Segment.from_list(s) for s in state.get("segments", ()))
        layout = (
            int(state["world_size"]),
            max(int(state["num_workers"]), 1),
            int(state["batch_size"]),
        )
        earlier = sum(s.batches for s in segments)
        same = layout[::2] == (self.world_size, self.batch_size)
        nb = self._plan.nb
        if batches < earlier or (not segments and same and batches > nb):
            raise ValueError(f"cannot resume at batch {batches}: an epoch has {nb}.")
        if state.get("level") == "worker":
            if not same:
                raise ValueError(
                    "cannot resume: a worker's state (torchdata's StatefulDataLoader) resumes "
                    f"only on its layout (world_size={layout[0]}, batch_size={layout[2]}); "
                    "use StreamLoader, whose rank-level state resumes on any layout."
                )
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
            self.epoch, self._worker_resume = epoch, (epoch, batches, segments)
            return
        self.epoch, self._iterated = epoch, False
        self._pending = (epoch, batches, layout, segments)
        self._pending_state = copy.deepcopy(dict(state))
