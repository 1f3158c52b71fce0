"""A detection dataset into shards: :func:`write_detection_shards`.

A COCO JSON file, a YOLO ``data.yaml`` or folder, or a Pascal VOC root is read as
DetectionDataModule reads it (parsed once into the annotation index: boxes clipped to their
image, those without area left out, categories mapped to contiguous labels), and each image
becomes one record (the schema of :mod:`~datamodules.detection.shard_index`):

* tar (webdataset's layout): ``KEY.<ext>``, the image file's bytes as they are (``ext`` from
  its content: ``jpg``, ``png``, ``webp``, ...), and ``KEY.json``;
* Parquet: the columns ``__key__``, ``image`` (Hugging Face's ``Image`` feature) and ``json``
  (the JSON text).

The JSON holds ``image_id``, ``file_name``, ``width``, ``height``, ``boxes`` (XYXY pixels),
``labels`` (positions in ``classes.json``), ``iscrowd``, ``annotation_id``,
``segmentation`` (polygons or RLE as the source gave them, or null) and, for COCO, each
object's original ``category_id``. ``OUT/classes.json`` lists the class names (as
``python -m datamodules shards`` writes it) and ``OUT/{prefix}.index.json`` the shards
(webdataset's wids index). Reading the shards gives the same images, boxes, labels and masks
as reading the source.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from datamodules.core.checks import check_choice, rejected
from datamodules.detection.arrays import AnnotationIndex
from datamodules.detection.coco import coco_classes
from datamodules.detection.index import detect_format, load_index
from datamodules.detection.problems import AnnotationError
from datamodules.imaging.decoding import read_image_file
from datamodules.shards.writer import write_shards

__all__ = ["image_extension", "write_detection_shards"]

_SIGNATURES = (
    (b"\xff\xd8\xff", "jpg"), (b"\x89PNG", "png"), (b"GIF8", "gif"), (b"BM", "bmp"),
    (b"II*\x00", "tif"), (b"MM\x00*", "tif"),
)  # fmt: skip


def image_extension(data: bytes | bytearray, path: str) -> str:
    """The extension of an encoded image, from its signature (else its file's)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    for signature, ext in _SIGNATURES:
        if data.startswith(signature):
            return ext
    return os.path.splitext(path)[1].lstrip(".").lower() or "bin"


def _keys(index: AnnotationIndex) -> Iterator[str]:
    """A key per image: its file's stem (dots and odd characters as ``_``), made unique."""
    seen: set[str] = set()
    for i in range(len(index)):
        stem = os.path.splitext(os.path.basename(index.image_path(i)))[0]
        key = re.sub(r"[^A-Za-z0-9_-]", "_", stem) or "image"
        if key in seen:
            key = f"{key}_{i}"
        seen.add(key)
        yield key


def _category_ids(source: str, fmt: str, classes: list[str]) -> list[int] | None:
    if fmt != "coco":
        return None
    with open(source, "rb") as handle:
        ids, names = coco_classes(json.load(handle), source)
    return ids if names == classes else None


def _records(
    index: AnnotationIndex, fmt: str, category_ids: list[int] | None
) -> Iterator[dict[str, Any]]:
    for i, key in enumerate(_keys(index)):
        path = index.image_path(i)
        data = bytes(read_image_file(path))
        rows = index.rows(i)
        boxes, labels, crowd = index.objects(i)
        meta: dict[str, Any] = {
            "image_id": int(index.image_ids[i]),
            "file_name": os.path.basename(path),
            "width": int(index.widths[i]),
            "height": int(index.heights[i]),
            "boxes": boxes.tolist(),
            "labels": labels.tolist(),
            "iscrowd": crowd.astype(int).tolist(),
            "annotation_id": [int(v) for v in index.annotation_ids[rows]],
            "segmentation": [index.segmentation(r) for r in range(rows.start, rows.stop)],
        }
        if category_ids is not None:
            meta["category_id"] = [category_ids[label] for label in labels.tolist()]
        if fmt == "tar":
            yield {"__key__": key, image_extension(data, path): data, "json": meta}
        else:
            yield {"__key__": key, "image": data, "json": json.dumps(meta)}


def write_detection_shards(
    source: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    split: str = "train",
    images: str | os.PathLike | None = None,
    fmt: str = "tar",
    max_bytes: int | str = "256MB",
    max_records: int | None = None,
    prefix: str | None = None,
    cache: str | os.PathLike | None = None,
) -> list[str]:
    """Writes one split of a COCO, YOLO or VOC dataset into tar or Parquet shards, with
    ``classes.json`` and the split's dataset index beside them; returns the shards' paths.

    ``DetectionDataModule("OUT/train-{000000..000003}.tar")`` (or the folder, or the
    ``.index.json``'s shards) reads them back.

    Args:
        source: A COCO JSON file, a YOLO ``data.yaml`` or folder, or a VOC root.
        out_dir: The folder of the shards (made if missing).
        split: Which split of a ``data.yaml`` or VOC root (and the shards' default prefix).
        images: The image folder of a COCO file (default: the file's folder).
        fmt: ``"tar"`` or ``"parquet"``.
        max_bytes: Bytes per shard (an int or ``"256MB"``).
        max_records: Images per shard at most (None: no limit).
        prefix: Shards are named ``{prefix}-{k:06d}.{fmt}`` (default: ``split``).
        cache: Where the source's annotation index is kept (as DetectionDataModule's).

    Raises:
        AnnotationError: The source has no such split, a bad annotation, or ``classes.json``
            in ``out_dir`` names other classes (another dataset's shards).
    """
    check_choice(fmt, "fmt", ("tar", "parquet"))
    source = os.fspath(source)
    index = load_index(source, split, images=images, cache=cache)
    if index is None:
        raise rejected("split", split, f"a split that {source} has")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    classes_file = out / "classes.json"
    if classes_file.exists():
        found = json.loads(classes_file.read_text())
        if found != index.classes:
            raise AnnotationError(
                f"{classes_file}: names the classes {found}, but {source} has {index.classes}; "
                "write another dataset's shards into another folder"
            )
    else:
        partial = out / ".classes.json.tmp"
        partial.write_text(json.dumps(index.classes, indent=1) + "\n")
        os.replace(partial, classes_file)
    category_ids = _category_ids(source, detect_format(source), index.classes)
    return write_shards(
        _records(index, fmt, category_ids), out, fmt=fmt, max_bytes=max_bytes,
        max_records=max_records, prefix=prefix or split,
    )  # fmt: skip
