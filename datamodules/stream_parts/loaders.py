"""How a StreamingDataModule builds its loaders: a :class:`ShardedStream` per split and rank,
in a :class:`StreamLoader` with the resolved settings, wired to the Trainer for resume.

:class:`StreamLoaders` is mixed into :class:`~datamodules.StreamingDataModule`; the engine
itself is :mod:`datamodules.stream_engine`.
"""

from __future__ import annotations

import weakref
from typing import Any

from lightning.pytorch.utilities.rank_zero import rank_zero_warn
from lightning.pytorch.utilities.warnings import PossibleUserWarning
from torch.utils.data import DataLoader

from datamodules.core.base import FEW_WORKERS_WARNING
from datamodules.core.hardware import AUTO
from datamodules.core.mixture import Mixture
from datamodules.core.quiet import HeldFilters
from datamodules.remote.cache import ShardCache
from datamodules.shards.dataset_index import ShardTable, shard_formats
from datamodules.stream_engine.batching import factory_loader
from datamodules.stream_engine.columnar import columnar_reason
from datamodules.stream_engine.loader import StreamLoader, gathered_prefetch
from datamodules.stream_engine.readers import ShardReader, SliceReader
from datamodules.stream_engine.stream import ShardedStream
from datamodules.stream_parts.splits import SplitSource
from datamodules.stream_parts.trainer_links import (
    ConsumedBatches,
    ResumedEpochEnd,
    TrainerLength,
    restored_inside_finished_epoch,
)

__all__ = ["StreamLoaders"]

#: Lightning's advice for a dataset whose length it cannot trust; ours is exact.
_ITERABLE_LEN = r"Your `IterableDataset` has `__len__` defined"
#: torch's warning when workers outnumber CPUs.
_MANY_WORKERS = r"This DataLoader will create \d+ worker processes in total"


class StreamLoaders:
    """The loader side of :class:`~datamodules.StreamingDataModule` (a mixin)."""

    _train_stream: ShardedStream | None
    _pending_stream_state: dict[str, Any] | None
    _train_loader_ref: Any

    def make_stream(
        self, split: str, rank: int, world: int, source: int | None = None
    ) -> ShardedStream:
        """The :class:`ShardedStream` of a split for this rank (train: shuffled, resumable).

        The train stream runs ``trainer.current_epoch`` under a Trainer; outside one, the
        epoch after the previous train loader's (0 at first). ``source``: only that source of
        a split of Sources (``eval_per_source``).
        """
        shards = self._index(split)
        mix = self.mixes.get(split)
        mixture = self.mixture(split)
        if source is not None:  # one source alone, read once
            assert mix is not None
            one = mix[source]
            shards = ShardTable.of([shards[k] for k in one.shards])
            mix = [SplitSource(one.source, tuple(range(len(shards))), one.records)]
            mixture = Mixture.fixed([one.source.label], [one.records])
        train = split == "train"
        # (path, count) pairs: a dataset index of a million shards makes no object per shard.
        listed: list[Any] = list(zip(shards.paths, shards.counts, strict=True))
        if self._custom_reader():
            reader: Any = SliceReader(self._detached().read_shard)
        else:
            cache = None
            if self.cache_dir is not None:
                cache = ShardCache(self.cache_dir, self.cache_limit, self.remote)
            reader = ShardReader(
                shards, self.on_error, self.columns, self.remote, cache, self.prefetch_shards,
                index_cache=self.index_cache,
            )  # fmt: skip
        reader, transform, collate = self.stream_parts(split, reader)
        trainer = self._trainer()
        overfit = train and trainer is not None and trainer.overfit_batches > 0
        if not train:
            epoch = 0
        elif trainer is not None:
            epoch = int(trainer.current_epoch)
        else:  # outside a Trainer: the epoch after the last train loader's
            last = self._train_stream
            epoch = 0 if last is None else last.next_epoch_outside_trainer()
        return ShardedStream(
            listed,
            batch_size=self.batch_size,
            rank=rank,
            world_size=world,
            # overfit_batches: the same first batches every epoch (Lightning turns off the
            # shuffle of the loaders it can re-sample; a stream does it here).
            shuffle=self.shuffle and train and not overfit,
            shuffle_buffer=self.shuffle_buffer,
            seed=self.shuffle_seed,
            epoch=epoch,
            drop_last=self.drop_last and train,
            transform=transform,
            collate=collate,
            reader=reader,
            on_error=self.on_error,
            sources=None if mix is None else [m.engine() for m in mix],
            mix=mixture,
            source_key=self.source_key,
            columnar=columnar_reason(
                shard_formats(shards), hasattr(reader, "blocks"), transform, collate
            )
            is None,
        )

    def _per_source(self, split: str) -> bool:
        return self.eval_per_source and split != "train" and bool(self.source_names(split))

    def _source_loaders(self, split: str) -> list[DataLoader]:
        """One loader per source of an evaluation split of Sources, in order (those without
        records left out, with a warning)."""
        self._index(split)
        loaders = []
        for k, m in enumerate(self.mixes[split]):
            if m.records:
                loaders.append(self.make_loader(split, source=k))
            else:
                rank_zero_warn(f"{split}_files: source {m.source.label!r} holds no records.")
        return loaders

    def make_loader(self, split: str, source: int | None = None) -> DataLoader | None:
        """Builds the loader of a split: a :class:`StreamLoader` over :meth:`make_stream` with
        the resolved settings; or a plain DataLoader over ``dataset_factory``'s dataset (None
        when the factory has no such split). ``source``: one source of a split of Sources."""
        rank, world = self._rank_world()
        settings = self.loader_settings(split)
        # Advice that does not apply to this loader, silenced while Lightning checks it (and,
        # for torch's, while an iteration starts): see datamodules/core/quiet.py.
        advice: list[tuple[str, type[Warning]]] = []
        if self.num_workers == AUTO:
            # "auto" chose this count on purpose: Lightning's advice to raise it and torch's to
            # stay within the CPU count (I/O-bound workers mostly wait) do not apply.
            advice.append((FEW_WORKERS_WARNING, PossibleUserWarning))
        if self.dataset_factory is not None:
            assert self.dataset_factory is not None
            dataset = self.dataset_factory(split, rank, world)
            loader = factory_loader(self, dataset, split, rank, world, settings.loader_kwargs())
        else:
            # Our length is exact on every rank and worker count (Lightning cannot know that).
            advice.append((_ITERABLE_LEN, UserWarning))
            stream = self.make_stream(split, rank, world, source)
            settings = self._settings[split] = gathered_prefetch(settings, stream, self)
            loader = StreamLoader(
                stream, reuse_batch_memory=self.reuse_batch_memory, **settings.loader_kwargs()
            )
            if split == "train":
                loader.consumed_batches = ConsumedBatches(self)
                loader.on_last_batch = ResumedEpochEnd(self, stream)
                self._train_loader_ref = weakref.ref(loader)
                self._train_stream = stream
                pending = self._pending_stream_state
                if pending is not None:
                    loader.load_state_dict(pending)
                    self._pending_stream_state = None
                    if restored_inside_finished_epoch(self._trainer(), pending, len(loader)):
                        ended = int(pending["ended_length"])
                        loader.on_second_batch = TrainerLength(self, stream, ended)
        if loader is not None:
            if advice:
                loader.held_filters = HeldFilters(advice, loader)
            loader.quiet_while_starting = (
                [(_MANY_WORKERS, UserWarning)] if self.num_workers == AUTO else []
            )
        if not self._logged:
            self._logged = True
            self._log_summary()
        return loader
