"""How a stream DataModule builds its loaders and keeps its train position.

:class:`StreamLoaders` is a part that the stream DataModules
(:class:`~datamodules.StreamingDataModule`, :class:`~datamodules.ImageTextDataModule`) hold,
with its own state (the train stream, its loader, a position restored before the loader
exists). It builds a :class:`ShardedStream` per split and rank over the
:class:`~datamodules.stream_parts.splits.ShardSplits`, in a :class:`StreamLoader` with the
DataModule's resolved settings, wired to the Trainer for resume, and gives and restores the
checkpoint state: the train shards' fingerprint, the split sizes and the train stream's
position (plain data; the same dict the train loader's ``state_dict`` gives, which Lightning
also saves with the loops). It restores elastically (:mod:`datamodules.stream_engine.elastic`);
a mixed train split's position holds its mix, which a resume continues, changed or not
(:mod:`datamodules.stream_parts.mix_resume`).

Methods that need the DataModule's shared settings (batch size, shuffle, seeds, the loader
settings, the Trainer) take it as an argument: the part keeps no reference to it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
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
from datamodules.stream_parts.splits import ShardSplits, SplitSource
from datamodules.stream_parts.trainer_links import (
    ConsumedBatches,
    ResumedEpochEnd,
    TrainerLength,
    restored_inside_finished_epoch,
)

__all__ = ["Parts", "StreamLoaders"]

#: ``(split, reader) -> (reader, transform, collate)``: what a DataModule makes of a split's
#: records (its reader wrapped, its transform and collate).
Parts = Callable[[str, Any], tuple[Any, Any, Callable[[list], Any]]]
#: Lightning's advice for a dataset whose length it cannot trust; ours is exact.
_ITERABLE_LEN = r"Your `IterableDataset` has `__len__` defined"
#: torch's warning when workers outnumber CPUs.
_MANY_WORKERS = r"This DataLoader will create \d+ worker processes in total"


class StreamLoaders:
    """The loaders and train position of a stream DataModule (a part it holds).

    Args:
        splits: The DataModule's splits.
        shuffle_buffer: Records each worker holds to shuffle the train split.
        cache_dir: Keep remote shards in this directory (None: read them in place).
        cache_limit: Bytes the cache may hold (None: no limit).
        prefetch_shards: Remote shards each worker downloads ahead of the one it reads.
        source_key: With Sources: each (dict) record gets its source's name in this field.
        eval_per_source: One loader per source of an evaluation split of Sources.
    """

    def __init__(
        self,
        splits: ShardSplits,
        *,
        shuffle_buffer: int,
        cache_dir: Any = None,
        cache_limit: int | None = None,
        prefetch_shards: int = 1,
        source_key: str | None = None,
        eval_per_source: bool = False,
    ) -> None:
        self.splits = splits
        self.shuffle_buffer = shuffle_buffer
        self.cache_dir, self.cache_limit, self.prefetch_shards = (
            cache_dir,
            cache_limit,
            prefetch_shards,
        )
        self.source_key, self.eval_per_source = source_key, eval_per_source
        # The train loader is held weakly. A DataModule is only freed by the cyclic garbage
        # collector (save_hyperparameters leaves a cycle of frames), and a DataLoader with
        # live persistent workers freed that way never gets its stop signal to the workers:
        # it waits 5 s per worker, then kills them. The stream holds no workers.
        self.train_loader_ref: weakref.ref[StreamLoader] | None = None
        self.train_stream: ShardedStream | None = None
        self.pending_state: dict[str, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickles without the loader and the stream (for ``spawn`` workers)."""
        return {**self.__dict__, "train_loader_ref": None, "train_stream": None}

    # ------------------------------------------------------------------ streams and loaders
    def make_stream(
        self,
        dm: Any,
        split: str,
        rank: int,
        world: int,
        parts: Parts,
        source: int | None = None,
        read_shard: Callable[[str], Iterator[Any]] | None = None,
    ) -> ShardedStream:
        """The :class:`ShardedStream` of a split for this rank (train: shuffled, resumable).

        The train stream runs ``trainer.current_epoch`` under a Trainer; outside one, the
        epoch after the previous train loader's (0 at first). ``source``: only that source of
        a split of Sources (``eval_per_source``). ``read_shard``: a custom reader of a shard.
        """
        splits = self.splits
        shards = splits._index(split)
        mix = splits.mixes.get(split)
        mixture = splits.mixture(split)
        if source is not None:  # one source alone, read once
            assert mix is not None
            one = mix[source]
            shards = ShardTable.of([shards[k] for k in one.shards])
            mix = [SplitSource(one.source, tuple(range(len(shards))), one.records)]
            mixture = Mixture.fixed([one.source.label], [one.records])
        train = split == "train"
        # (path, count) pairs: a dataset index of a million shards makes no object per shard.
        listed: list[Any] = list(zip(shards.paths, shards.counts, strict=True))
        if read_shard is not None:
            reader: Any = SliceReader(read_shard)
        else:
            cache = None
            if self.cache_dir is not None:
                cache = ShardCache(self.cache_dir, self.cache_limit, splits.remote)
            reader = ShardReader(
                shards, splits.on_error, splits.columns, splits.remote, cache,
                self.prefetch_shards, index_cache=splits.index_cache,
            )  # fmt: skip
        reader, transform, collate = parts(split, reader)
        trainer = dm._trainer()
        overfit = train and trainer is not None and trainer.overfit_batches > 0
        if not train:
            epoch = 0
        elif trainer is not None:
            epoch = int(trainer.current_epoch)
        else:  # outside a Trainer: the epoch after the last train loader's
            last = self.train_stream
            epoch = 0 if last is None else last.next_epoch_outside_trainer()
        return ShardedStream(
            listed,
            batch_size=dm.batch_size,
            rank=rank,
            world_size=world,
            # overfit_batches: the same first batches every epoch (Lightning turns off the
            # shuffle of the loaders it can re-sample; a stream does it here).
            shuffle=dm.shuffle and train and not overfit,
            shuffle_buffer=self.shuffle_buffer,
            seed=dm.shuffle_seed,
            epoch=epoch,
            drop_last=dm.drop_last and train,
            transform=transform,
            collate=collate,
            reader=reader,
            on_error=splits.on_error,
            sources=None if mix is None else [m.engine() for m in mix],
            mix=mixture,
            source_key=self.source_key,
            columnar=columnar_reason(
                shard_formats(shards), hasattr(reader, "blocks"), transform, collate
            )
            is None,
        )

    def per_source(self, split: str) -> bool:
        """Whether an evaluation split has one loader per source (``eval_per_source``)."""
        return self.eval_per_source and split != "train" and bool(self.splits.source_names(split))

    def source_loaders(self, dm: Any, split: str, parts: Parts, **kwargs: Any) -> list[DataLoader]:
        """One loader per source of an evaluation split of Sources, in order (those without
        records left out, with a warning)."""
        self.splits._index(split)
        loaders = []
        for k, m in enumerate(self.splits.mixes[split]):
            if m.records:
                loaders.append(self.make_loader(dm, split, parts, source=k, **kwargs))
            else:
                rank_zero_warn(f"{split}_files: source {m.source.label!r} holds no records.")
        return loaders

    def make_loader(
        self,
        dm: Any,
        split: str,
        parts: Parts,
        source: int | None = None,
        read_shard: Callable[[str], Iterator[Any]] | None = None,
        dataset_factory: Callable[[str, int, int], Any] | None = None,
    ) -> DataLoader | None:
        """Builds the loader of a split: a :class:`StreamLoader` over :meth:`make_stream` with
        the DataModule's resolved settings; or a plain DataLoader over ``dataset_factory``'s
        dataset (None when the factory has no such split). ``source``: one source of a split
        of Sources."""
        rank, world = dm._rank_world()
        settings = dm.loader_settings(split)
        # Advice that does not apply to this loader, silenced while Lightning checks it (and,
        # for torch's, while an iteration starts): see datamodules/core/quiet.py.
        advice: list[tuple[str, type[Warning]]] = []
        if dm.num_workers == AUTO:
            # "auto" chose this count on purpose: Lightning's advice to raise it and torch's to
            # stay within the CPU count (I/O-bound workers mostly wait) do not apply.
            advice.append((FEW_WORKERS_WARNING, PossibleUserWarning))
        if dataset_factory is not None:
            dataset = dataset_factory(split, rank, world)
            loader = factory_loader(dm, dataset, split, rank, world, settings.loader_kwargs())
        else:
            # Our length is exact on every rank and worker count (Lightning cannot know that).
            advice.append((_ITERABLE_LEN, UserWarning))
            stream = self.make_stream(dm, split, rank, world, parts, source, read_shard)
            settings = dm._settings[split] = gathered_prefetch(settings, stream, dm)
            loader = StreamLoader(
                stream, reuse_batch_memory=dm.reuse_batch_memory, **settings.loader_kwargs()
            )
            if split == "train":
                self._follow(dm, loader, stream)
        if loader is not None:
            if advice:
                loader.held_filters = HeldFilters(advice, loader)
            loader.quiet_while_starting = (
                [(_MANY_WORKERS, UserWarning)] if dm.num_workers == AUTO else []
            )
        if not dm._logged:
            dm._logged = True
            dm._log_summary()
        return loader

    def split_loader(
        self, dm: Any, split: str, parts: Parts, read_shard: Any = None, dataset_factory: Any = None
    ) -> DataLoader | list | None:
        """The loader of an evaluation split (with ``eval_per_source``, a list: one per
        source), or None when the split holds no records (or the factory has none)."""
        if self.per_source(split):
            return self.source_loaders(dm, split, parts, read_shard=read_shard)
        if dataset_factory is None and self.splits.split_size(split) == 0:
            return None
        return self.make_loader(dm, split, parts, None, read_shard, dataset_factory)

    def predict_loader(
        self, dm: Any, parts: Parts, read_shard: Any = None, dataset_factory: Any = None
    ) -> DataLoader:
        """A loader over the test records, else the validation records.

        Raises:
            ValueError: Neither split holds records.
        """
        for split in ("test", "val"):
            if dataset_factory is None and self.splits.split_size(split) == 0:
                continue
            loader = self.make_loader(dm, split, parts, None, read_shard, dataset_factory)
            if loader is not None:
                return loader
        raise ValueError(
            f"{self.splits.owner} has no test or validation records to predict on: pass "
            "test_files= or val_files=."
        )

    def _follow(self, dm: Any, loader: StreamLoader, stream: ShardedStream) -> None:
        """Wires the train loader to the Trainer and restores a pending position into it."""
        loader.consumed_batches = ConsumedBatches(dm)
        loader.on_last_batch = ResumedEpochEnd(dm, stream)
        self.train_loader_ref = weakref.ref(loader)
        self.train_stream = stream
        pending = self.pending_state
        if pending is not None:
            loader.load_state_dict(pending)
            self.pending_state = None
            if restored_inside_finished_epoch(dm._trainer(), pending, len(loader)):
                ended = int(pending["ended_length"])
                loader.on_second_batch = TrainerLength(dm, stream, ended)

    def live_train_loader(self) -> StreamLoader | None:
        """The train loader, while it lives."""
        return None if self.train_loader_ref is None else self.train_loader_ref()

    def current_epoch(self, trainer: Any) -> int:
        """The train stream's epoch, else the Trainer's (0 without either)."""
        if self.train_stream is not None:
            return int(self.train_stream.epoch)
        return 0 if trainer is None else int(trainer.current_epoch)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self, epoch: int) -> dict[str, Any]:
        """The train shards' fingerprint, the split sizes (``epoch``'s, for a mixed train
        split) and the train stream's position."""
        splits = self.splits
        state: dict[str, Any] = {"split_fingerprint": splits.fingerprint}
        if splits.shards:
            state["split_sizes"] = {k: splits.split_size(k, epoch) for k in splits.shards}
        loader = self.live_train_loader()
        if loader is not None:
            state["train_stream"] = loader.state_dict()
        elif self.pending_state is not None:
            state["train_stream"] = self.pending_state
        elif self.train_stream is not None:  # the loader is gone: what it delivered
            state["train_stream"] = self.train_stream.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any], rank: int) -> None:
        """Restores the train position; the next train epoch resumes after the saved batches
        (see the DataModules' ``load_state_dict``).

        Raises:
            ValueError: The train shards differ from the checkpoint's (for a mixed split: a
                source's shards under the same name), or (when the loader is built)
                ``shuffle_seed``, ``shuffle``, ``shuffle_buffer`` or ``drop_last`` differ.
        """
        splits = self.splits
        saved = state_dict.get("split_fingerprint")
        stream_state = state_dict.get("train_stream")
        current = splits.fingerprint
        mixed = str(saved).startswith("mix-") and str(current).startswith("mix-")
        if stream_state is not None and "mix" in stream_state and splits.mixes_train():
            splits.mix_resume.keep(splits, stream_state, rank)  # checks each source's shards
        elif saved is not None and current is not None and saved != current and not mixed:
            raise ValueError(
                f"{splits.owner}: the checkpoint's train shards (fingerprint {saved}) "
                f"differ from this run's ({current}): train_files lists other shards, "
                "or they hold other record counts; resuming would repeat or skip records."
            )
        if stream_state is None:
            return
        loader = self.live_train_loader()
        if loader is not None:
            loader.load_state_dict(stream_state)
        else:
            self.pending_state = stream_state
