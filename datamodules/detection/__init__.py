"""Object detection and segmentation: :class:`~datamodules.DetectionDataModule`,
:class:`~datamodules.SegmentationDataModule` and their parts.

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
* :mod:`~datamodules.detection.flip_path`: a batch built already flipped, for a lone flip
  (the default in training) or no transform;
* :mod:`~datamodules.detection.datamodule`: the DataModule that composes them;
* :mod:`~datamodules.detection.segmentation_index`: image / mask pairs from folders or VOC;
* :mod:`~datamodules.detection.segmentation_shards`: image / mask pairs from tar / Parquet
  shards (member references; the shared part is :mod:`datamodules.shards.member_shards`);
* :mod:`~datamodules.detection.segmentation_writer`: :func:`write_segmentation_shards`, folder
  pairs or a VOC root into such shards;
* :mod:`~datamodules.detection.segmentation_batches`: masks read, checked, transformed, padded;
* :mod:`~datamodules.detection.segmentation`: ``SegmentationDataModule``, composing those,
  core's samplers and detection's exact evaluation sampler.
"""

from __future__ import annotations

from datamodules.core.lazy import lazy_exports

__all__ = [
    "DetectionDataModule",
    "SegmentationDataModule",
    "write_detection_shards",
    "write_segmentation_shards",
]

#: Where each public name is defined (loaded on first use: the parsers stay light to import).
_HOMES = {
    "DetectionDataModule": "datamodules.detection.datamodule",
    "SegmentationDataModule": "datamodules.detection.segmentation",
    "write_detection_shards": "datamodules.detection.writer",
    "write_segmentation_shards": "datamodules.detection.segmentation_writer",
}

__getattr__, __dir__ = lazy_exports(__name__, globals(), _HOMES)
