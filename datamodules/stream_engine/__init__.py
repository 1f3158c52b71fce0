"""The sharded stream engine: what delivers every record of a stream exactly once, resumably.

How it works is on the design page "How the stream engine works" (docs/design/stream-engine.md).
Its modules:

* :mod:`~datamodules.stream_engine.stream`: :class:`ShardedStream`, an IterableDataset over
  shards, exactly once across ranks and workers.
* :mod:`~datamodules.stream_engine.position`: epochs, ``state_dict`` and resumes.
* :mod:`~datamodules.stream_engine.layout`: records cut into ranks, batches and workers.
* :mod:`~datamodules.stream_engine.elastic` and :mod:`~datamodules.stream_engine.remainder`:
  the rest of an interrupted epoch on another layout.
* :mod:`~datamodules.stream_engine.shuffle`: the bounded shuffle buffer and its replay.
* :mod:`~datamodules.stream_engine.mixing`: weighted sources with exact quotas.
* :mod:`~datamodules.stream_engine.readers`: range readers of one shard (local or cached).
* :mod:`~datamodules.stream_engine.loader`: :class:`StreamLoader`, the stream's DataLoader.
* :mod:`~datamodules.stream_engine.columnar`, :mod:`~datamodules.stream_engine.columns`
  and :mod:`~datamodules.stream_engine.gather`: batches gathered from columns.
* :mod:`~datamodules.stream_engine.messages`: several batches a worker message.
* :mod:`~datamodules.stream_engine.batching`: the default collate of records.
* :mod:`~datamodules.stream_engine.failures`: errors that name the record a batch failed on.

The engine reads shards only through :mod:`datamodules.shards`.
"""

__all__: list[str] = []
