"""StreamingDataModule: records streamed from shards, exactly once across ranks and workers.

``StreamingDataModule(train_files, val_files, test_files)`` trains on more data than fits in
memory, local or remote (``http(s)://``, ``s3://`` with s3fs, anything fsspec opens). Each
``*_files`` is a path or URL, a glob, a directory, or a list of them; the format comes from
the extension: ``.jsonl`` / ``.ndjson`` (optionally ``.gz`` / ``.zst``), ``.txt`` (a record
per line), ``.csv`` (a dict per row), ``.parquet`` (read a row group at a time) and ``.tar``
(WebDataset's records; see :mod:`datamodules.shards.tar`). With ``image_key=`` records
are images, batched as :class:`~datamodules.ImageFolderDataModule` batches files
(:mod:`datamodules.stream_parts.image_records`).

What the loaders guarantee (exactly once across ranks and workers, shuffle, epochs, exact and
elastic resume, bounded memory, bad records named or counted) is said in
:mod:`datamodules.stream_parts`; the engine is :mod:`datamodules.stream_engine`.

Random splits do not apply to a stream: validation and test records come from ``val_files`` /
``test_files``. ``val_split`` and ``test_split`` are 0 (their defaults here); any other
value, ``splits`` or ``stratify=True`` raise.

Extension points: :meth:`StreamingDataModule.read_shard` (a new format, counted by
:meth:`count_records`) and ``dataset_factory`` (sources that are not files, sharded by the
dataset). Its parts: ``stream_splits``, ``stream_loaders``, ``image_records``, ``mix_log``,
``inspection``.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from datamodules.core.base import BaseDataModule
from datamodules.core.checks import check_bool
from datamodules.core.hardware import AUTO
from datamodules.core.keywords import shared_arguments
from datamodules.core.mix_logging import MixLog
from datamodules.core.mixture import Mixture, Source
from datamodules.core.skipped import Skipped
from datamodules.shards.records import read_records
from datamodules.stream_engine.batching import Chain, stream_collate
from datamodules.stream_engine.stream import ShardedStream
from datamodules.stream_parts.arguments import (
    check_files,
    check_mixing,
    check_stream_arguments,
    check_stream_split_arguments,
    stream_work,
)
from datamodules.stream_parts.assembly import stream_parts
from datamodules.stream_parts.image_records import (
    IMAGE_SHUFFLE_BUFFER,
    IMAGENET_MEAN,
    IMAGENET_STD,
    RECORD_SHUFFLE_BUFFER,
    ImageRecords,
    check_image_arguments,
    check_image_records,
)
from datamodules.stream_parts.splits import SplitsFingerprint
from datamodules.streaming.inspection import StreamInspection

__all__ = ["StreamingDataModule", "stream_collate"]

# A list first, so that LightningCLI parses a JSON list as a list, not as one path.
Files = Sequence[Source] | Sequence[str | os.PathLike] | str | os.PathLike


class StreamingDataModule(BaseDataModule):
    """Streams records from shards: ``StreamingDataModule("data/train-*.jsonl", "data/val.jsonl")``.

    Batches: by default :func:`stream_collate` of the (transformed) records: a dict of tensors
    for dict records (``{"id": LongTensor (B,), "tokens": LongTensor (B, L)}`` for records
    ``{"id": int, "tokens": list of ints}``), a list of strings for ``.txt`` lines. With
    ``image_key``: ``(images, labels)`` as :class:`~datamodules.ImageFolderDataModule` gives.

    Args:
        train_files: Shards of the train split: a path or URL, a glob (``"data/*.jsonl"``,
            ``"s3://bucket/train-*.parquet"``), a directory, or a list of them; or a list of
            :class:`~datamodules.Source` mixed by ``weight`` (a number, or a schedule
            ``[[epoch, weight], ...]``) or ``repeat`` with exact quotas per epoch
            (:meth:`quotas`; :mod:`datamodules.core.mixture`). Each epoch's quotas are logged
            to the Trainer's loggers as ``mix/<name>``; a resume may change the mix.
        val_files: Shards of the validation split (None: no validation); Sources here are
            each read once (with ``source_key``, for per-source metrics; with
            ``eval_per_source=True``, each in its own loader).
        test_files: Shards of the test split (None: no test split).
        transform: ``record -> sample``, applied in the workers to every split's records
            (before ``train_transforms`` / ``eval_transforms``, which then act on samples).
        collate: ``list of samples -> batch``; default :func:`stream_collate`.
        shuffle_buffer: Records each worker holds to shuffle the train split (0 or 1: only the
            shard order is shuffled). Memory grows with ``num_workers x shuffle_buffer``, and a
            worker's first batch waits until its buffer is full. None: 10,000 records, or
            1,000 image records (``image_key``: larger, and a full buffer of them is slow to
            fill from remote shards; measured in the images-at-scale guide).
        on_error: ``"raise"``: a bad record or unreadable shard raises, naming shard and line.
            ``"skip"``: they are left out and counted (:attr:`skipped`); counting then parses
            every record once, in ``setup``.
        fmt: Force the format of every shard (one of ``"jsonl"``, ``"txt"``, ``"csv"``,
            ``"tsv"``, ``"parquet"``, ``"arrow"``, ``"tar"``), not the extension's.
        columns: Parquet and Arrow only: the columns to read (None: all).
        index_cache: Where shard indexes are cached: a directory, None for the default
            (``$DATAMODULES_CACHE`` or ``~/.cache/datamodules``), False for memory only.
        epoch_size: With weighted train Sources: records per epoch over all ranks (default:
            all the sources' records), split between them by weight.
        source_key: With Sources: each (dict) record gets its source's name in this field.
        eval_per_source: With ``val_files`` / ``test_files`` lists of Sources: one loader per
            source, in order (:meth:`source_names`), so that a model logs a metric per
            source (Lightning suffixes it with ``/dataloader_idx_k``). False: one loader
            reads every source once.
        storage_options: Passed to fsspec for remote shards (e.g. an S3 ``endpoint_url``,
            ``key``, ``secret``), as pandas and HF datasets do. Checkpoints keep them without
            the credentials (:mod:`datamodules.remote.credentials`).
        retries: Retries of a transient remote failure (HTTP 5xx and 429, a reset or cut
            connection, S3 throttling, no byte within ``timeout``), with exponential backoff
            and jitter, resumed at the byte offset already read. Permanent failures (404, 403,
            bad credentials) fail at once naming the URL and the status.
        timeout: Seconds a remote request may go without producing a byte.
        cache_dir: Keep remote shards in this directory: downloaded once (atomically,
            validated by size and ETag / Last-Modified), reused by later epochs, runs and
            processes, one download per node under a file lock. None: read them in place.
        cache_limit: Bytes (or a string such as ``"50GB"``) the cache may hold; beyond it the
            least recently used shards are evicted, never one being read.
        prefetch_shards: Remote shards each worker downloads ahead of the one it reads, and
            copies it keeps waiting at most (0: none); no ``cache_dir``: in a temporary folder.
        image_key: Records are images: the field holding the encoded image (``"jpg"``), or
            alternatives tried in order (``"jpg;png;webp"``); bytes, or Hugging Face's
            ``{"bytes", "path"}``. Each is decoded, transformed (``train_transforms`` /
            ``eval_transforms``, on uint8 ``(3, H, W)``) and written into a uint8
            channels-last batch in the workers; float and normalised on the device.
        label_key: With ``image_key``: the label field (ints, or names through ``classes``);
            batches are ``(images, labels)``. None: a dict of ``"image"`` and the other fields.
        classes: Class names: a string label is mapped to its index (unknown names raise).
            ``dm.classes`` / ``dm.num_classes`` give them (or, for int labels, the largest + 1).
        image_size: What the default transforms produce (a square's side, or ``(height,
            width)``): RandomResizedCrop + flip to train, Resize + CenterCrop to evaluate.
        normalize: Subtract ``mean`` and divide by ``std`` after scaling to [0, 1].
        mean: Per-channel mean (ImageNet's by default).
        std: Per-channel standard deviation (ImageNet's by default).
        decode: With ``image_key``: ``"scaled"`` (default) decodes a JPEG that the transform
            shrinks 2x or more at the largest DCT scale (1/2, 1/4, 1/8) keeping the region it
            uses at or above the output size; ``"full"`` decodes every pixel. As for
            :class:`~datamodules.ImageFolderDataModule` (:mod:`datamodules.imaging.scaled`).
        dataset_factory: Instead of files: ``dataset_factory(split, rank, world_size)``
            returning an ``IterableDataset`` of records for ``"train"``, ``"val"`` or
            ``"test"`` (or None: no such split). Its records are transformed, batched by
            ``batch_size`` and collated here; everything else is the dataset's job: it must
            give each rank (``rank`` of ``world_size``) and each DataLoader worker
            (``torch.utils.data.get_worker_info()``) its own records, give every rank the same
            number of batches under DDP (or DDP may hang), and shuffle. Its loaders have no
            length and no resumable position: Lightning then warns that a mid-epoch resume
            restarts the epoch.
        val_split: 0: a stream is not split at random (records of the validation split come
            from ``val_files``); any other value raises. The same holds for ``test_split``,
            ``splits`` and ``stratify``.
        num_workers: As for :class:`~datamodules.BaseDataModule`; ``"auto"`` counts local
            shards as CPU work (parsing or decoding: the CPUs of this rank) and remote shards
            as I/O work (2 per CPU, at most 16); image records are decode work either way.
        train_transforms: Applied to train samples after ``transform``.
        eval_transforms: Applied to validation, test and predict samples after ``transform``.

    Raises:
        TypeError, ValueError: For bad arguments, naming the argument and what is accepted.

    Example:
        >>> dm = StreamingDataModule("shards/train-*.jsonl", "shards/val.jsonl", batch_size=64)
        >>> trainer.fit(model, datamodule=dm)  # doctest: +SKIP
    """

    work = "io"
    hparams_ignore = (*BaseDataModule.hparams_ignore, "transform", "collate", "dataset_factory")

    def __init__(
        self,
        train_files: Files | None = None,
        val_files: Files | None = None,
        test_files: Files | None = None,
        *,
        transform: Callable[[Any], Any] | None = None,
        collate: Callable[[list[Any]], Any] | None = None,
        shuffle_buffer: int | None = None,
        on_error: str = "raise",
        fmt: str | None = None,
        columns: Sequence[str] | None = None,
        index_cache: str | os.PathLike | bool | None = None,
        epoch_size: int | None = None,
        source_key: str | None = None,
        eval_per_source: bool = False,
        storage_options: dict[str, Any] | None = None,
        retries: int = 5,
        timeout: float = 60.0,
        cache_dir: str | os.PathLike | None = None,
        cache_limit: int | str | None = None,
        prefetch_shards: int = 1,
        image_key: str | None = None,
        label_key: str | None = "cls",
        classes: Sequence[str] | None = None,
        image_size: int | tuple[int, int] = 224,
        normalize: bool = True,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        decode: str = "scaled",
        dataset_factory: Callable[[str, int, int], IterableDataset | None] | None = None,
        batch_size: int = 32,
        val_split: int | float = 0,
        test_split: int | float = 0,
        split_seed: int = 42,
        splits: Mapping[str, Any] | None = None,
        stratify: bool = False,
        num_workers: int | str = AUTO,
        pin_memory: bool | str = AUTO,
        persistent_workers: bool | str = AUTO,
        prefetch_factor: int | str | None = AUTO,
        shuffle: bool = True,
        drop_last: bool = False,
        shuffle_seed: int | None = None,
        train_transforms: Callable[[Any], Any] | None = None,
        eval_transforms: Callable[[Any], Any] | None = None,
        reuse_batch_memory: bool = True,
    ) -> None:
        super().__init__(**shared_arguments(locals()))
        check_stream_split_arguments(self)
        files = {
            s: check_files(f, f"{s}_files")
            for s, f in (("train", train_files), ("val", val_files), ("test", test_files))
        }
        check_stream_arguments(
            files, transform=transform, collate=collate, dataset_factory=dataset_factory,
            shuffle_buffer=shuffle_buffer, on_error=on_error, fmt=fmt, columns=columns,
            index_cache=index_cache,
        )  # fmt: skip
        check_mixing(files, epoch_size, source_key)
        check_bool(eval_per_source, "eval_per_source")
        keys, names = check_image_records(
            image_key, label_key, classes, image_size, normalize, mean, std, collate, decode
        )
        self.image_key, self.image_keys = image_key, keys
        self.label_key = label_key if keys else None
        self.image_records = None
        if keys:
            self.image_records = ImageRecords(
                keys, label_key, names, image_size, mean, std, normalize, decode, on_error
            )
            self.train_transforms, self.eval_transforms = self.image_records.default_transforms(
                self.train_transforms, self.eval_transforms
            )
        # (a list from a config becomes a pair again; mean and std tuples of floats)
        self.image_size, self.mean, self.std = check_image_arguments(image_size, mean, std)
        self.normalize, self.decode = normalize, decode
        self.epoch_size, self.source_key = epoch_size, source_key
        self.eval_per_source, self.files = eval_per_source, files
        self.mix_log = MixLog()  # the train mix, logged once an epoch
        self.inspection = StreamInspection(self)  # summary() and the inspect hooks
        self.work = "decode" if self.image_keys else stream_work(files)  # images: local or not
        self.transform, self.collate_fn = transform, collate
        if shuffle_buffer is None:
            shuffle_buffer = IMAGE_SHUFFLE_BUFFER if self.image_keys else RECORD_SHUFFLE_BUFFER
        self.shuffle_buffer, self.on_error, self.fmt = shuffle_buffer, on_error, fmt
        self.columns = list(columns) if columns is not None else None
        self.index_cache, self.dataset_factory = index_cache, dataset_factory
        self._skips = Skipped()
        #: The remote options, the splits (shards, sources, mixtures) and the loaders.
        self.remote, self.stream_splits, self.stream_loaders = stream_parts(
            self, files, storage_options, retries, timeout, cache_dir, cache_limit,
            prefetch_shards, shuffle_buffer=shuffle_buffer, fmt=fmt, on_error=on_error,
            columns=self.columns, index_cache=index_cache, epoch_size=epoch_size,
            source_key=source_key, eval_per_source=eval_per_source,
            count_records=self.count_records if self._custom_reader() else None,
        )  # fmt: skip

    # ------------------------------------------------------------------ extension points
    def read_shard(self, path: str) -> Iterator[Any]:
        """Yields the records of one shard. Override to read a new format.

        The default reads the built-in formats (by extension, or ``fmt``) with ``on_error``
        and ``columns``; an override may call it and post-process the records. An override
        must yield the same records, in the same order, every time it is called; it runs in
        the DataLoader workers (with the ``spawn`` start method the DataModule is pickled
        there, without its Trainer and loaders).
        """
        return read_records(path, self.fmt, self.on_error, columns=self.columns)

    def count_records(self, path: str) -> int:
        """Number of records :meth:`read_shard` yields for ``path``; used only when
        :meth:`read_shard` is overridden (default: one pass over it). Override for a faster
        count (e.g. from a header)."""
        return sum(1 for _ in self.read_shard(path))

    @property
    def skipped(self) -> Skipped:
        """Bad records and unreadable shards left out under ``on_error="skip"``: a
        :class:`~datamodules.core.skipped.Skipped` list of ``(where, why)`` pairs (the first
        1,000), with complete counts per shard (``counts``, ``unreadable``)."""
        if self.image_records is not None:  # with what image workers left out so far
            self.image_records.drain(self._skips)
        return self._skips

    def _custom_reader(self) -> bool:
        return type(self).read_shard is not StreamingDataModule.read_shard

    def collate(self, samples: list[Any]) -> Any:
        """Turns a list of samples into a batch: ``collate=`` if given, else
        :func:`stream_collate`."""
        return (self.collate_fn or stream_collate)(samples)

    def _collate_fn(self) -> Callable[[list[Any]], Any]:
        # The function itself rather than the bound method, so that workers started with
        # "spawn" need not unpickle the DataModule; an overridden collate() is honoured.
        if type(self).collate is not StreamingDataModule.collate:
            return self._detached().collate
        return self.collate_fn or stream_collate

    def transform_for(self, split: str) -> Callable[[Any], Any] | None:
        """``transform`` then the split's ``train_transforms`` / ``eval_transforms``."""
        fns = [f for f in (self.transform, super().transform_for(split)) if f is not None]
        return None if not fns else fns[0] if len(fns) == 1 else Chain(*fns)

    def split_parts(self, split: str, reader: Any) -> tuple[Any, Any, Callable[[list], Any]]:
        """``(reader, transform, collate)`` of a split's stream: as given for plain records;
        for image records the record ``transform`` alone and the image collate."""
        images = self.image_records
        if images is None:
            return reader, self.transform_for(split), self._collate_fn()
        transform = self.train_transforms if split == "train" else self.eval_transforms
        return images.reader(reader), self.transform, images.collate(transform)

    # ------------------------------------------------------------------ splits
    def setup(self, stage: str | None = None) -> None:
        """Lists and indexes the shards of the splits ``stage`` needs (every split for None;
        :meth:`~datamodules.stream_parts.splits.ShardSplits.setup`)."""
        if self.dataset_factory is None:
            self.stream_splits.setup(stage)

    @property
    def shards(self) -> dict[str, Any]:
        """Shard indexes per split, once indexed (``setup``); an empty list: no such split."""
        return self.stream_splits.shards

    @property
    def mixes(self) -> dict[str, Any]:
        """Per mixed split, its sources once indexed (shards, records)."""
        return self.stream_splits.mixes

    fingerprint = SplitsFingerprint()

    def mixture(self, split: str) -> Mixture | None:
        """A split's mix (:meth:`~datamodules.stream_parts.splits.ShardSplits.mixture`)."""
        return self.stream_splits.mixture(split)

    def quotas(self, epoch: int, split: str = "train") -> dict[str, int]:
        """The records each source gives in ``epoch`` (:meth:`ShardSplits.quotas
        <datamodules.stream_parts.splits.ShardSplits.quotas>`)."""
        return self.stream_splits.quotas(epoch, split)

    def source_names(self, split: str) -> list[str]:
        """A split's Sources (:meth:`~datamodules.stream_parts.splits.ShardSplits.source_names`)."""
        return self.stream_splits.source_names(split)

    def _current_epoch(self) -> int:
        return self.stream_loaders.current_epoch(self._trainer())

    def split_size(self, split: str) -> int:
        """Records per epoch in ``"train"``, ``"val"`` or ``"test"`` (0 when not given): the
        shards' records, or for mixed sources the sum of their quotas (train: in the current
        epoch); indexes it."""
        if self.dataset_factory is not None:
            raise TypeError("the size of a dataset_factory split is not known in advance.")
        return self.stream_splits.split_size(split, self._current_epoch())

    def state_dict(self) -> dict[str, Any]:
        """The train shards' fingerprint, the split sizes and the train stream's position
        (the same dict the train loader's ``state_dict`` gives, which Lightning also saves)."""
        return self.stream_loaders.state_dict(self._current_epoch())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the train position, also on another world size, worker count or batch
        size, and a changed mix (:meth:`StreamLoaders.load_state_dict
        <datamodules.stream_parts.loaders.StreamLoaders.load_state_dict>`)."""
        self.stream_loaders.load_state_dict(state_dict, self._rank_world()[0])

    # ------------------------------------------------------------------ loaders
    def make_stream(
        self, split: str, rank: int, world: int, source: int | None = None
    ) -> ShardedStream:
        """The :class:`ShardedStream` of a split for this rank (train: shuffled, resumable;
        see :meth:`StreamLoaders.make_stream
        <datamodules.stream_parts.loaders.StreamLoaders.make_stream>`)."""
        return self.stream_loaders.make_stream(
            self, split, rank, world, self.split_parts, source, self._reader()
        )

    def make_loader(self, split: str, source: int | None = None) -> DataLoader | None:
        """Builds the loader of a split: a :class:`StreamLoader` over :meth:`make_stream` with
        the resolved settings; or a plain DataLoader over ``dataset_factory``'s dataset (None
        when the factory has no such split). ``source``: one source of a split of Sources."""
        loaders, parts, factory = self.stream_loaders, self.split_parts, self.dataset_factory
        return loaders.make_loader(self, split, parts, source, self._reader(), factory)

    def train_dataloader(self) -> DataLoader:
        """The train loader: shuffled per epoch, disjoint and even across ranks, resumable."""
        loader = self.make_loader("train")
        if loader is None:
            raise ValueError("dataset_factory('train', ...) returned None: nothing to train on.")
        return loader

    def _reader(self) -> Callable[[str], Iterator[Any]] | None:
        return self._detached().read_shard if self._custom_reader() else None

    def _split_loader(self, split: str) -> Any:
        loaders, parts, factory = self.stream_loaders, self.split_parts, self.dataset_factory
        return loaders.split_loader(self, split, parts, self._reader(), factory)

    def val_dataloader(self) -> DataLoader | list:
        """The validation loader, or an empty list (no validation) without val records; with
        ``eval_per_source=True`` and Sources, one loader per source."""
        loader = self._split_loader("val")
        return [] if loader is None else loader

    def test_dataloader(self) -> DataLoader | list:
        """The test loader (with ``eval_per_source=True`` and Sources, one per source)."""
        loader = self._split_loader("test")
        if loader is None:
            raise ValueError(
                f"{type(self).__name__} has no test records: pass test_files= (or have "
                "dataset_factory return a dataset for 'test')."
            )
        return loader

    def predict_dataloader(self) -> DataLoader:
        """A loader over the test records, else the validation records."""
        loaders, parts, factory = self.stream_loaders, self.split_parts, self.dataset_factory
        return loaders.predict_loader(self, parts, self._reader(), factory)

    tunable = False  # (the tuner times index-sampled loaders)

    @property
    def classes(self) -> list[str]:
        """Class names: ``classes=`` as given, else ``"0"``, ``"1"``, ... for int labels."""
        names = None if self.image_records is None else self.image_records.class_names
        return list(names) if names is not None else [str(i) for i in range(self.num_classes)]

    @property
    def num_classes(self) -> int:
        """``len(classes)``, else the largest int label of the splits + 1 (read once: only the
        label field of each shard)."""
        images = self.image_records
        if images is None or self.label_key is None:
            raise AttributeError(
                f"{type(self).__name__} has classes only with image_key= and label_key=."
            )
        if images.class_names is None:
            self.setup()
        return images.num_classes(
            self.shards, lambda shard: images.labels_of(shard, self.remote, self.read_shard)
        )

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Image records: uint8 images to float in [0, 1], normalised, on the device."""
        images = self.image_records
        return batch if images is None else images.on_device(self, batch, dataloader_idx)

    # ------------------------------------------------------------------ inspection
    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Logs the epoch's quotas as ``mix/<name>`` at its first train batch (Sources)."""
        self.mix_log.log(self._trainer(), self)
        return super().on_before_batch_transfer(batch, dataloader_idx)

    def summary(self) -> str:
        """Shards, records and batches per split, loader settings with reasons, bad records."""
        return self.inspection.summary()

    def describe_data(self) -> list[str]:
        """Per split: shards, records, and what was skipped (``python -m datamodules inspect``)."""
        return self.inspection.describe_data()

    def sequence_lengths(self, split: str = "train", max_batches: int = 50) -> Any:
        """Lengths of the first variable-length field, batch by batch (None: no such field)."""
        return self.inspection.sequence_lengths(split, max_batches)

    def plot_batch(self, batch: Any, path: str | os.PathLike[str], split: str = "train") -> Any:
        """The lengths of a variable-length field over the first batches, else the default."""
        drawn = self.inspection.plot_lengths(path, split)
        return super().plot_batch(batch, path) if drawn is None else drawn

    def extra_summary(self) -> list[str]:
        """The summary's lines about image records (none without ``image_key``)."""
        images = self.image_records
        if images is None:
            return []
        return images.lines(self.image_key, self.train_transforms, self.eval_transforms)

    def __getstate__(self) -> dict[str, Any]:
        """Pickles without the Trainer (for ``spawn`` workers; the loaders drop their own)."""
        return {**super().__getstate__(), "trainer": None}

    def _detached(self) -> StreamingDataModule:
        """A shallow copy without Trainer and loaders (no cycle through the loader)."""
        return copy.copy(self)
