"""What a stream says about itself: its summary, and what ``python -m datamodules inspect``
shows (lengths of a variable-length field, a picture of them, the records per split).

:class:`StreamInspection` is a part :class:`~datamodules.StreamingDataModule` holds
(``dm.inspection``): it keeps no state of its own and reads the DataModule it describes; the
DataModule's inspect hooks (see :meth:`~datamodules.BaseDataModule.describe_data`) hand their
work to it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from datamodules.core.mixture import schedule_lines
from datamodules.core.summary import counted, unsaved_lines
from datamodules.remote.files import is_remote
from datamodules.stream_engine.columnar import columnar_reason
from datamodules.stream_parts.splits import SPLITS

__all__ = ["StreamInspection"]


class StreamInspection:
    """The summary and inspect hooks of a :class:`~datamodules.StreamingDataModule`.

    Args:
        dm: The DataModule described.
    """

    def __init__(self, dm: Any) -> None:
        self.dm = dm

    def sequence_lengths(
        self, split: str = "train", max_batches: int = 50
    ) -> tuple[str, list[list[int]]] | None:
        """Lengths of the first variable-length field, batch by batch, for ``inspect``.

        Reads up to ``max_batches`` batches of the split's samples (after ``transform``,
        before the collate) in one process, and returns the name of the first dict field
        whose values are sequences of different lengths, with each batch's lengths; None
        when no field varies in length.
        """
        dm = self.dm
        dm.setup()
        if dm.dataset_factory is not None or not dm.shards.get(split):
            return None
        stream = dm.make_stream(split, 0, 1)
        stream.collate = list  # the samples themselves: their lengths before padding
        stream.columnar = False
        batches = []
        for samples in stream:
            batches.append(samples)
            if len(batches) >= max_batches:
                break
        first = batches[0][0] if batches and batches[0] else None
        if not isinstance(first, Mapping):
            return None
        for key, value in first.items():
            if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
                continue
            lengths = [[len(sample[key]) for sample in batch] for batch in batches]
            if len({n for batch in lengths for n in batch}) > 1:
                return str(key), lengths
        return None

    def plot_lengths(self, path: str | os.PathLike[str], split: str = "train") -> Any:
        """For records with a variable-length field: a histogram of its lengths over the first
        batches of ``split`` and the padding efficiency of those batches, written to ``path``
        (None, nothing written, when no field varies in length)."""
        from datamodules.tools.pictures import plot_lengths

        found = self.sequence_lengths(split)
        if found is None:
            return None
        key, lengths = found
        real = sum(sum(batch) for batch in lengths)
        padded = sum(len(batch) * max(batch) for batch in lengths if batch)
        flat = [n for batch in lengths for n in batch]
        title = (
            f"{split}: lengths of '{key}' in the first {len(lengths)} batches "
            f"({len(flat)} records); padded batches keep {real / padded:.1%} real tokens"
        )
        return plot_lengths(flat, path, title=title, efficiency=real / padded)

    def describe_data(self) -> list[str]:
        """Per split: shards, records, and what was skipped (for ``python -m datamodules
        inspect``)."""
        dm = self.dm
        dm.setup()
        return dm.stream_splits.describe()

    def summary(self) -> str:
        """Shards, records and batches per split, loader settings with reasons, bad records."""
        dm = self.dm
        lines = [type(dm).__name__]
        rank, world = dm._rank_world()
        if dm.dataset_factory is not None:
            lines.append(f"  data: from dataset_factory={dm.dataset_factory!r}")
        elif not dm.shards:
            lines.append("  shards: not indexed yet (call setup())")
        for split in SPLITS:
            shards = dm.shards.get(split)
            if shards is None:
                continue
            if not shards:
                lines.append(f"  {split}: none")
                continue
            n = dm.split_size(split)  # records per epoch (mixed: the sum of the quotas)
            formats = ", ".join(sorted({s.fmt for s in shards}))
            if dm.drop_last and split == "train":
                batches = n // world // dm.batch_size
            else:
                batches = math.ceil(math.ceil(n / world) / dm.batch_size)
            text = (
                f"  {split}: {counted(len(shards), 'shard')} ({formats}), "
                f"{counted(n, 'record')}; {counted(batches, 'batch')} of <= {dm.batch_size} "
                f"per rank (world={world})"
            )
            if split == "train":
                order = (
                    f"shuffle=True (shard order + a buffer of {dm.shuffle_buffer} records per "
                    f"worker, seed {dm.shuffle_seed})"
                    if dm.shuffle
                    else "shuffle=False (shards and records in file order)"
                )
                text += f", {order}, drop_last={dm.drop_last}"
            lines.append(text)
            lines.extend(self._source_lines(split))
            lines.append(self._batch_path_line(split, shards))
        settings = dm._settings.get("train") or dm.loader_settings("train")
        for key in ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor"):
            lines.append(f"  {key}={getattr(settings, key)!r}: {settings.reasons[key]}")
        lines.append(f"  bad records: on_error={dm.on_error!r}; {dm.skipped.summary()}")
        if any(is_remote(s.path) for shards in dm.shards.values() for s in shards):
            stats = dm.remote.stats
            cache = "none" if dm.cache_dir is None else f"{dm.cache_dir}"
            if dm.cache_limit is not None:
                cache += f" (limit {dm.cache_limit:,} bytes)"
            lines.append(
                f"  remote: {stats.retries} retried request(s), {stats.failures} failed for "
                f"good (retries={dm.remote.retries}, timeout={dm.remote.timeout:g} s); "
                f"cache {cache}; prefetch_shards={dm.prefetch_shards}"
            )
        stream = dm.stream_loaders.train_stream
        resumed = None if stream is None else stream.resumed()
        if resumed is not None:  # an epoch resumed on another layout
            epoch, layouts, repeats = resumed
            lines.append(
                f"  resume: train epoch {epoch} continues on {stream.world_size} rank(s) x "
                f"{stream.loader_workers} worker(s) after {layouts} earlier layout(s); "
                f"{repeats} record(s) repeated to keep ranks even"
            )
        lines.extend(dm.extra_summary())
        lines.extend(unsaved_lines(self))
        return "\n".join(lines)

    def _batch_path_line(self, split: str, shards: list[Any]) -> str:
        """How the split's batches are made: gathered from columns, or collated from records."""
        dm = self.dm
        image = bool(getattr(self, "image_keys", None))
        reads_blocks = not dm._custom_reader() and not image
        transform = dm.transform_for(split)
        reason = columnar_reason({s.fmt for s in shards}, reads_blocks, transform, dm._collate_fn())
        if reason is None:
            return "    batches: gathered from columns (the buffer shuffles record positions)"
        return f"    batches: collated from records ({reason})"

    def _source_lines(self, split: str) -> list[str]:
        """One line per source of a mixed split: shards, records, weight (or schedule) or
        repeat, records this epoch, passes so far, and the records it had skipped."""
        dm = self.dm
        mix = dm.mixes.get(split)
        mixture = dm.mixture(split) if mix else None
        if not mix or mixture is None:
            return []
        epoch = dm._current_epoch() if split == "train" else 0
        quota = dict(zip(mixture.names, mixture.quotas(epoch), strict=True))
        start = dict(zip(mixture.names, mixture.starts(epoch), strict=True))
        shards = dm.shards[split]
        lines = []
        for m in mix:
            name = m.source.label
            share = m.source.share() if split == "train" else "once"
            if m.hidden:
                share = "removed since the checkpoint"
            drawn = start[name] + quota[name]
            passes = drawn / m.records if m.records else 0.0
            skipped = sum(dm.skipped.counts.get(shards[k].path, 0) for k in m.shards)
            lines.append(
                f"    source {name!r}: {len(m.shards)} shard(s), {m.records} records, "
                f"{share}; {quota[name]} records this epoch; {passes:.2f} passes so far (epoch "
                f"{epoch}); {skipped} skipped"
            )
        if split == "train" and mixture.kind == "weight":
            lines.extend(schedule_lines(mixture, epoch))
        return lines
