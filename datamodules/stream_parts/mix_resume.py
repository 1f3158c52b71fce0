"""A stream's train mix continued from a checkpoint, possibly changed since.

:class:`MixResume` is a part of :class:`~datamodules.stream_parts.splits.ShardSplits`. When a
stream DataModule's ``load_state_dict`` meets a checkpoint of a mixed train split (its stream
position holds the saved epoch's mix), the DataModule:

* checks every source that kept its name against its shards in the checkpoint (other paths or
  record counts raise, naming the source and what changed);
* when the checkpoint interrupted an epoch, indexes the sources removed since that still owe
  records to it, as hidden sources (they give nothing in later epochs), so that the epoch ends
  exactly as it was planned;
* continues the mix (:meth:`~datamodules.core.mixture.Mixture.resumed`): the new weights,
  schedules and sources apply from the next epoch (from the saved one when it had not
  started), each source continuing its run of passes where it stopped; every train stream it
  builds from then on uses it;
* says on rank 0 what changed.
"""

from __future__ import annotations

from typing import Any, Protocol

from datamodules.core.context import log
from datamodules.core.mixture import Mixture, resume_message
from datamodules.stream_engine.mixed import interrupted

__all__ = ["MixResume", "MixedSplits"]


class MixedSplits(Protocol):
    """What :class:`MixResume` needs of the splits that hold it
    (:class:`~datamodules.stream_parts.splits.ShardSplits`, which imports this module)."""

    owner: str
    shards: dict[str, Any]
    mixes: dict[str, list[Any]]
    mixtures: dict[str, Mixture]

    def add_hidden(self, owing: list[dict[str, Any]], epoch: int) -> None:
        """Indexes sources removed since the checkpoint that still owe records to ``epoch``."""


class MixResume:
    """How a checkpoint's train mix continues (a part of
    :class:`~datamodules.stream_parts.splits.ShardSplits`; see the module docstring).

    Attributes:
        pending: The checkpoint's mix and whether it interrupted an epoch, until the train
            split is indexed.
        resumed: The mix continued from the checkpoint (None: the run's own mix).
        rank: This process's rank (rank 0 says what changed).
    """

    def __init__(self) -> None:
        self.pending: tuple[dict[str, Any], bool] | None = None
        self.resumed: Mixture | None = None
        self.rank = 0

    def keep(self, splits: MixedSplits, stream_state: dict[str, Any], rank: int) -> None:
        """Keeps the checkpoint's mix, applied now if the train split is indexed, else when
        it is."""
        self.pending, self.rank = (stream_state["mix"], interrupted(stream_state)), rank
        if "train" in splits.shards:
            self.apply(splits)

    def apply(self, splits: MixedSplits) -> None:
        """Continues the kept mix over the indexed train split (nothing kept: nothing done)."""
        if self.pending is None:
            return
        saved, cut = self.pending
        self.pending = None
        names = {m.source.label for m in splits.mixes["train"]}
        owing = [s for s in saved["sources"] if cut and s["quota"] and s["name"] not in names]
        if owing:
            splits.add_hidden(owing, int(saved["epoch"]))
        base = splits.mixtures["train"]
        resumed = base.resumed(saved, cut)  # raises if a source holds other shards
        self.resumed = resumed
        changes = base.changes(saved)
        if changes and self.rank == 0:
            log.info(resume_message(splits.owner, changes, int(saved["epoch"]), cut))
