"""A stream's train mix continued from a checkpoint, possibly changed since.

:class:`StreamMixResume` is mixed into :class:`~datamodules.StreamingDataModule`. When
``load_state_dict`` meets a checkpoint of a mixed train split (its stream position holds the
saved epoch's mix), the DataModule:

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

from typing import Any

from datamodules.core.context import log
from datamodules.core.mixture import Mixture, Source, resume_message
from datamodules.shards.dataset_index import ShardTable
from datamodules.stream_engine.mixed import interrupted
from datamodules.stream_parts.splits import SplitSource

__all__ = ["StreamMixResume"]


class StreamMixResume:
    """Continuing a checkpoint's train mix (a mixin; see the module docstring)."""

    shards: dict[str, ShardTable]
    mixes: dict[str, list[SplitSource]]
    mixtures: dict[str, Mixture]
    _mix_resume: tuple[dict[str, Any], bool] | None
    _resumed_mixture: Mixture | None

    def _resume_mix(self, stream_state: dict[str, Any]) -> None:
        """Keeps the checkpoint's mix, applied now if the train split is indexed, else when
        it is."""
        self._mix_resume = (stream_state["mix"], interrupted(stream_state))
        if "train" in self.shards:
            self._apply_mix_resume()

    def _apply_mix_resume(self) -> None:
        assert self._mix_resume is not None
        saved, cut = self._mix_resume
        self._mix_resume = None
        names = {m.source.label for m in self.mixes["train"]}
        owing = [s for s in saved["sources"] if cut and s["quota"] and s["name"] not in names]
        if owing:
            self._add_hidden(owing, int(saved["epoch"]))
        base = self.mixtures["train"]
        resumed = base.resumed(saved, cut)  # raises if a source holds other shards
        self._resumed_mixture = resumed
        changes = base.changes(saved)
        if changes and self._rank_world()[0] == 0:
            log.info(resume_message(type(self).__name__, changes, int(saved["epoch"]), cut))

    def _add_hidden(self, owing: list[dict[str, Any]], epoch: int) -> None:
        """Indexes sources removed since the checkpoint that still owe records to the epoch it
        interrupted."""
        for s in owing:
            name, listing = s["name"], s.get("listing") or []
            paths = [str(item[0]) for item in listing]
            try:
                found = self._index_paths(paths, f"train_files (source {name!r})")
            except (OSError, ValueError) as err:
                raise ValueError(
                    f"cannot end epoch {epoch} as it was planned: source {name!r}, no longer in "
                    f"train_files, still owes it {s['quota']} record(s), but its shards cannot "
                    f"be read ({err}). Keep its files, or resume from a checkpoint taken at the "
                    "end of an epoch."
                ) from err
            shards = self.shards["train"]
            first = len(shards)
            self.shards["train"] = ShardTable.join([shards, ShardTable.of(found)])
            records = sum(f.count for f in found)
            own = tuple(range(first, first + len(found)))
            source = Source(paths, name=name)
            self.mixes["train"].append(SplitSource(source, own, records, hidden=True))
        self._set_mixture("train")
