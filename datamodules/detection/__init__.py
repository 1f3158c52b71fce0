"""Object detection: :class:`~datamodules.DetectionDataModule` and its parts.

* :mod:`~datamodules.detection.arrays`: the annotation index as flat, memory-mapped arrays;
* :mod:`~datamodules.detection.coco`, :mod:`~datamodules.detection.yolo`,
  :mod:`~datamodules.detection.voc`: the format parsers;
* :mod:`~datamodules.detection.index`: format detection, the cache, parsing once;
* :mod:`~datamodules.detection.shard_index`: tar / Parquet shards of an image and a JSON of
  boxes per record, parsed once into the same index; images read from the shards by byte
  range (the generic part, records with located members, is
  :mod:`datamodules.shards.member_records`);
* :mod:`~datamodules.detection.writer`: :func:`write_detection_shards`, a COCO, YOLO or VOC
  dataset into such shards;
* :mod:`~datamodules.detection.grouping`: aspect-ratio batches and exact evaluation shares;
* :mod:`~datamodules.detection.batches`: decoded images, targets, joint transforms;
* :mod:`~datamodules.detection.datamodule`: the DataModule that composes them.
"""

from datamodules.detection.writer import write_detection_shards

__all__ = ["write_detection_shards"]
