"""What every DataModule shares: the base class, hardware settings, splits, samplers, the
resumable loader, split views and the reused batch buffers.

``core`` imports no data kind and no tool; every other package of ``datamodules`` builds on
it. Its modules:

* :mod:`~datamodules.core.base`: :class:`~datamodules.BaseDataModule`.
* :mod:`~datamodules.core.checks`: the one set of argument checks every module uses (a wrong
  type raises TypeError, a wrong value ValueError); imports neither torch nor Lightning.
* :mod:`~datamodules.core.common_arguments`: the check of the arguments every DataModule takes.
* :mod:`~datamodules.core.context`: rank, world and devices from the Trainer or the process.
* :mod:`~datamodules.core.hardware`: the ``"auto"`` loader settings and the tuner's choice.
* :mod:`~datamodules.core.hooks`: where core hands work to the tools without importing them.
* :mod:`~datamodules.core.splits`: seeded random, stratified and explicit splits.
* :mod:`~datamodules.core.samplers`: :class:`~datamodules.core.samplers.IndexBatchSampler`,
  DDP-even and resumable.
* :mod:`~datamodules.core.buckets`: :class:`~datamodules.core.buckets.BucketBatchSampler`,
  batches by length.
* :mod:`~datamodules.core.loaders`: :class:`~datamodules.core.loaders.ResumableDataLoader`.
* :mod:`~datamodules.core.views`: how a split is fetched a batch at a time.
* :mod:`~datamodules.core.skipped`: :class:`~datamodules.core.skipped.Skipped`, what every
  ``dm.skipped`` is, and how workers send their skips to the main process.
* :mod:`~datamodules.core.shared_batches` and :mod:`~datamodules.core.tensor_memory`: batch
  buffers that workers reuse instead of a fresh shared-memory segment per batch.
"""

__all__: list[str] = []
