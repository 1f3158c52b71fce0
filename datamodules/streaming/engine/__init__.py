"""The sharded stream engine: what delivers every record of a stream exactly once, resumably.

How it works is on the design page "How the stream engine works" (docs/design/stream-engine.md).
Its modules:

* :mod:`~datamodules.streaming.engine.stream`: :class:`ShardedStream`, an IterableDataset over
  shards, exactly once across ranks and workers.
* :mod:`~datamodules.streaming.engine.position`: epochs, ``state_dict`` and resumes.
* :mod:`~datamodules.streaming.engine.layout`: records cut into ranks, batches and workers.
* :mod:`~datamodules.streaming.engine.elastic` and :mod:`~datamodules.streaming.engine.remainder`:
  the rest of an interrupted epoch on another layout.
* :mod:`~datamodules.streaming.engine.shuffle`: the bounded shuffle buffer and its replay.
* :mod:`~datamodules.streaming.engine.mixing`: weighted sources with exact quotas.
* :mod:`~datamodules.streaming.engine.readers`: range readers of one shard (local or cached).
* :mod:`~datamodules.streaming.engine.loader`: :class:`StreamLoader`, the stream's DataLoader.
* :mod:`~datamodules.streaming.engine.columnar`, :mod:`~datamodules.streaming.engine.columns`
  and :mod:`~datamodules.streaming.engine.gather`: batches gathered from columns.
* :mod:`~datamodules.streaming.engine.messages`: several batches a worker message.
* :mod:`~datamodules.streaming.engine.batching`: the default collate of records.
* :mod:`~datamodules.streaming.engine.failures`: errors that name the record a batch failed on.

The engine reads shards only through :mod:`datamodules.shards`.
"""

__all__: list[str] = []
