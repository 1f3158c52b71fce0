"""A stream's mix over epochs: each epoch's records and layout, and a mix changed on resume.

:class:`MixedStream` is mixed into :class:`~datamodules.stream_engine.stream.ShardedStream`.
With sources, the stream holds a :class:`~datamodules.core.mixture.Mixture`: per epoch, each
source's quota and its position in its run of passes (weights and schedules, repeats), which
:func:`~datamodules.stream_engine.mixing.epoch_pieces` turns into the epoch's records. An
epoch's record count, and so its layout (:class:`~datamodules.stream_engine.layout.Plan`),
is the mixture's total for that epoch: the same every epoch of a run, except an epoch that a
resume with a changed mix finishes as it was planned.

What a checkpoint keeps (``state_dict()["mix"]``): the mix of the saved epoch, every source
with its shards (paths and record counts), weight or repeat, position and quota, removed
sources included. :meth:`MixedStream.load_state_dict` continues it: the same mix resumes as
it was; a changed one (other weights or schedules, sources added or removed) ends the
interrupted epoch as planned and applies from the next epoch, each source continuing its run
(:meth:`~datamodules.core.mixture.Mixture.resumed`). A source of the same name over other
shards is refused.
"""

from __future__ import annotations

from typing import Any

from datamodules.core.mixture import Mixture
from datamodules.stream_engine.layout import Plan, order_pieces
from datamodules.stream_engine.mixing import StreamSource, epoch_pieces

__all__ = ["MixedStream", "interrupted"]


def interrupted(state: dict[str, Any]) -> bool:
    """Whether a saved position is inside its epoch (some batches delivered), not at its
    start."""
    return bool(int(state.get("batches", 0))) or bool(state.get("segments"))


class MixedStream:
    """Per-epoch records, layout and the mix in ``state_dict`` of a
    :class:`~datamodules.stream_engine.stream.ShardedStream` (a mixin)."""

    sources: list[StreamSource] | None
    reader: Any
    counts: list[int]
    paths: list[str]
    epoch: int
    seed: int
    shuffle: bool
    world_size: int
    batch_size: int
    drop_last: bool
    _yielded: int
    _pending_state: dict[str, Any] | None

    def _init_mix(self, mix: Mixture | None) -> None:
        self._plans: dict[int, Plan] = {}
        self._unmixed_records = sum(self.counts)
        self.mix: Mixture | None = None
        if self.sources is None:
            return
        if mix is None:
            missing = [s.name for s in self.sources if s.quota is None]
            if missing:
                raise ValueError(f"sources {missing} give no quota: give quota= or mix=.")
            mix = Mixture.fixed(
                [s.name for s in self.sources], [int(s.quota) for s in self.sources]
            )  # type: ignore[arg-type]
        self._set_mix(mix)

    def _set_mix(self, mix: Mixture) -> None:
        assert self.sources is not None
        mine = {s.name: k for k, s in enumerate(self.sources)}
        unknown = [n for n in mine if n not in mix.names]
        if unknown:
            raise ValueError(f"the sources {unknown} are not in the mixture {mix.names}.")
        #: Per entry of the mixture, its source in ``sources`` (-1: not read by this stream).
        self._entry_source = [mine.get(n, -1) for n in mix.names]
        self.mix, self._plans = mix, {}

    # ------------------------------------------------------------------ per epoch
    def records_of(self, epoch: int) -> int:
        """Records of ``epoch`` over all ranks."""
        return self._unmixed_records if self.mix is None else self.mix.total(epoch)

    @property
    def num_records(self) -> int:
        """Records of the current epoch over all ranks."""
        return self.records_of(self.epoch)

    def plan_of(self, epoch: int) -> Plan:
        """The layout of ``epoch`` over ranks (its batches)."""
        n = self.records_of(epoch)
        plan = self._plans.get(n)
        if plan is None:
            plan = self._plans[n] = Plan.make(n, self.world_size, self.batch_size, self.drop_last)
        return plan

    @property
    def _plan(self) -> Plan:
        return self.plan_of(self.epoch)

    def _mixed_order(self, epoch: int) -> list[tuple[int, int, int, int]]:
        """The epoch's record sequence as ``(shard, start, stop, source)`` pieces."""
        assert self.sources is not None and self.mix is not None
        plan = []
        for entry, start, quota in self.mix.plan(epoch):
            source = self._entry_source[entry]
            if source < 0:
                raise ValueError(
                    f"epoch {epoch} draws {quota} records of source {self.mix.names[entry]!r}, "
                    "which this stream does not read: give it again (or resume at an epoch "
                    "boundary)."
                )
            plan.append((source, start, quota))
        counts = [[self.counts[k] for k in s.shards] for s in self.sources]
        names = [s.name for s in self.sources]
        return [
            (self.sources[p.source].shards[p.shard], p.start, p.stop, p.source)
            for p in epoch_pieces(counts, plan, self.seed, epoch, self.shuffle, names=names)
        ]

    def _expect_reads(
        self, order: list[tuple[int, int, int, int]], cum: list[int], u: int, v: int
    ) -> None:
        """Tells a reader that continues reads (a mixed stream's) which range of each shard
        positions ``[u, v)`` read, so that it reads no further ahead."""
        expect = getattr(self.reader, "expect", None)
        if expect is None or not getattr(self.reader, "continues", False):
            return
        extents: dict[str, list[list[int]]] = {}
        for shard, first, stop, _ in order_pieces(order, cum, u, v):
            ranges = extents.setdefault(self.paths[shard], [])
            for extent in ranges:
                if extent[1] == first:
                    extent[1] = stop
                    break
            else:
                ranges.append([first, stop])
        expect({p: [(a, b) for a, b in r] for p, r in extents.items()})

    # ------------------------------------------------------------------ state
    def state_dict(self, batches: int | None = None) -> dict[str, Any]:
        """The position (see :class:`~datamodules.stream_engine.position.StreamPosition`),
        plus, for a mixed stream, the ``mix`` of the saved epoch."""
        state = super().state_dict(batches)  # type: ignore[misc]
        if self.mix is None or self._pending_state is not None:
            return state  # a restored position not started yet holds its mix already
        epoch = int(state["epoch"])
        state["mix"] = self.mix.state(epoch)
        if (
            "ended_length" not in state
            and state.get("level") == "rank"
            and epoch == self.epoch + 1
            and len(self) != self.plan_of(epoch).nb  # type: ignore[arg-type]
        ):  # the finished epoch (a changed mix's last old one) had another length
            state["ended_length"] = len(self)  # type: ignore[arg-type]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a position; a mixed one continues the saved mix (see the module
        docstring).

        Raises:
            ValueError: What the position cannot resume (see
                :meth:`~datamodules.stream_engine.position.StreamPosition.load_state_dict`),
                or a source of the same name over other shards.
        """
        saved = state.get("mix")
        if self.mix is None or saved is None:
            super().load_state_dict(state)  # type: ignore[misc]
            return
        base = self.mix.base or self.mix
        self._set_mix(base.resumed(saved, interrupted(state)))
        epoch = int(state["epoch"])
        self.epoch = epoch
        self._mixed_order(epoch)  # raises now if a source the epoch draws is not read here
        # The shards a position depends on are the mix's, checked source by source above.
        mine = self._config()  # type: ignore[attr-defined]
        super().load_state_dict(  # type: ignore[misc]
            {**state, "shards": mine["shards"], "num_records": self.records_of(epoch)}
        )
