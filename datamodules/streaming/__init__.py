"""Record streams: :class:`~datamodules.StreamingDataModule`, image records, and the engine.

* :mod:`~datamodules.streaming.datamodule`: the DataModule (the glue: arguments, splits,
  checkpoints, loaders, inspection), with :mod:`~datamodules.stream_parts.arguments`,
  :mod:`~datamodules.stream_parts.splits`, :mod:`~datamodules.stream_parts.stream_state`,
  :mod:`~datamodules.stream_parts.trainer_links` and :mod:`~datamodules.streaming.inspection`.
* :mod:`~datamodules.stream_parts.image_records` and :mod:`~datamodules.stream_parts.image_batches`:
  image records (``image_key=``) on the fast image path.
* :mod:`datamodules.stream_engine`: the sharded stream engine (exactly once, resumable,
  elastic, mixed, columnar).
* Shards are read and written by the shard layer :mod:`datamodules.shards`; remote shards are
  opened through :mod:`datamodules.remote`.

``write_shards`` lives in :mod:`datamodules.shards.writer`; it is re-exported here, where the
contract names it (``from datamodules.streaming import write_shards``). So is
:class:`~datamodules.Source` (:mod:`datamodules.core.sources`, shared with text blends), which
streams mixed first (``from datamodules.streaming import Source``).
"""

from datamodules.core.sources import Source
from datamodules.shards.writer import write_shards

__all__ = ["Source", "write_shards"]
