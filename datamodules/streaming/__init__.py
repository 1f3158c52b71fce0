"""Record streams: :class:`~datamodules.StreamingDataModule` and the sharded stream engine.

* :mod:`~datamodules.streaming.datamodule`: the DataModule.
* :mod:`~datamodules.streaming.stream`: :class:`~datamodules.streaming.stream.ShardedStream`,
  exactly once across ranks and workers, resumable.
* :mod:`~datamodules.streaming.position`: the stream's epochs, ``state_dict`` and resumes.
* :mod:`~datamodules.streaming.layout`: how records are cut into ranks, batches and workers.
* :mod:`~datamodules.streaming.elastic`: resuming an epoch on another world size, worker
  count or batch size (what was delivered, recomputed in index space).
* :mod:`~datamodules.streaming.loader`: :class:`~datamodules.streaming.loader.StreamLoader`.
* :mod:`~datamodules.streaming.trainer_links`: how the train loader follows its Trainer.
* :mod:`~datamodules.streaming.shuffle`: the bounded shuffle buffer and its replay.
* :mod:`~datamodules.streaming.readers`: range readers of one shard.
* :mod:`~datamodules.streaming.formats`: shard formats (JSONL, text, CSV) and finding shards.
* :mod:`~datamodules.streaming.parquet`: Parquet shards, a row group at a time.
* :mod:`~datamodules.streaming.tar`: tar shards (WebDataset's records), on
  :mod:`~datamodules.streaming.tar_members` (the members of an archive, from any offset).
* :mod:`~datamodules.streaming.writer`: :func:`write_shards` (tar, Parquet, JSONL).
* :mod:`~datamodules.streaming.index`: record counts and seek offsets, cached on disk
  (:class:`~datamodules.streaming.shard_index.ShardIndex`).
* remote shards are opened through the shared layer :mod:`datamodules.remote` (retries, the
  shard cache, credentials), which text uses too.
* :mod:`~datamodules.streaming.errors`: record and shard errors, the skip counter.
* :mod:`~datamodules.streaming.batching`: the default collate of records.
* :mod:`~datamodules.streaming.inspection`: what ``inspect`` shows for a stream.
"""

from datamodules.streaming.writer import write_shards

__all__ = ["write_shards"]
