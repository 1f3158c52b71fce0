"""Object detection: :class:`~datamodules.DetectionDataModule` and its parts.

* :mod:`~datamodules.detection.arrays`: the annotation index as flat, memory-mapped arrays;
* :mod:`~datamodules.detection.coco`, :mod:`~datamodules.detection.yolo`,
  :mod:`~datamodules.detection.voc`: the format parsers;
* :mod:`~datamodules.detection.index`: format detection, the cache, parsing once;
* :mod:`~datamodules.detection.grouping`: aspect-ratio batches and exact evaluation shares;
* :mod:`~datamodules.detection.batches`: decoded images, targets, joint transforms;
* :mod:`~datamodules.detection.datamodule`: the DataModule that composes them.
"""

__all__: list[str] = []
