"""The parts the stream DataModules are assembled from, below both of them.

:class:`~datamodules.StreamingDataModule` and :class:`~datamodules.ImageTextDataModule` each
hold these parts as attributes (composition, not a stack of mixins), each part with its own
state:

* :mod:`~datamodules.stream_parts.splits`: ``ShardSplits``, the splits' files, shards, sources and
  mixtures (``dm.stream_splits``), with
  :mod:`~datamodules.stream_parts.mix_resume` (a checkpoint's mix continued);
* :mod:`~datamodules.stream_parts.loaders`: ``StreamLoaders``, the loaders and the train
  position (``dm.stream_loaders``), with :mod:`~datamodules.stream_parts.trainer_links`;
* :mod:`~datamodules.stream_parts.image_records` and
  :mod:`~datamodules.stream_parts.image_batches`: ``ImageRecords``, the image path of
  records (``dm.image_records``);
* :mod:`~datamodules.stream_parts.arguments` and :mod:`~datamodules.stream_parts.assembly`: the
  argument checks, and the parts built from the arguments.

What the loaders of both guarantee (the engine is :mod:`datamodules.stream_engine`):

* **Exactly once.** In one epoch every record of a split is delivered once across all DDP
  ranks and DataLoader workers, however many shards there are and however uneven, and every
  rank yields the same number of batches (DDP never hangs). Validation and test follow the
  same rule. The record counts this needs are indexed once, in ``setup``, and cached on disk
  (keyed by path, size and modification time; see :mod:`datamodules.shards.index`).
* **Shuffle.** The train split shuffles its shard order and its records (a bounded buffer of
  ``shuffle_buffer`` records per worker) from ``shuffle_seed`` and the epoch. The same seed,
  worker count and world size give the same batches. Eval splits are never shuffled nor
  dropped: each batch is a run of consecutive records, in file order with ``num_workers=0``;
  with several workers each worker reads a contiguous block of batches and the loader takes
  one batch from each worker in turn, so blocks interleave (carry an id in the records to
  pair predictions with them).
* **Epochs.** Under a Trainer the train stream runs ``trainer.current_epoch``; outside one,
  each new iteration of a train loader (the same or a new one) is the next epoch, reshuffled
  from ``shuffle_seed + epoch``; ``loader.set_epoch(e)`` decides explicitly.
  ``Trainer(overfit_batches=n)`` turns the train shuffle off: the same first ``n`` batches.
* **Resume.** The train position is in ``state_dict()`` and in the loader's state, which
  Lightning saves in every checkpoint: ``trainer.fit(ckpt_path=...)`` from a mid-epoch
  checkpoint yields exactly the records of that epoch not yet seen, also on another world
  size, worker count or batch size (re-split with equal batches per rank, see
  :mod:`~datamodules.stream_engine.elastic`); later epochs are a fresh run's on the new layout.
  Other shards, ``shuffle_seed``, ``shuffle``, ``shuffle_buffer`` or ``drop_last`` raise.
* **Bounded memory.** Nothing holds more than the shuffle buffer and a few batches per worker
  (and, in an epoch resumed on another layout, the positions of this rank's share and of
  the few old workers' buffers it overlaps: :mod:`~datamodules.stream_engine.remainder`).
* **Bad records.** Invalid JSON or UTF-8, a CSV row with the wrong number of fields, or a
  shard that cannot be read raise an error naming the shard and the line; with
  ``on_error="skip"`` they are left out, counted (``dm.skipped``) and
  reported in the log and the summary.
"""

__all__: list[str] = []
