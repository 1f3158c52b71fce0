"""A segmentation dataset into shards: :func:`write_segmentation_shards`.

Image / mask folders or a Pascal VOC root (or split file) are paired as SegmentationDataModule
pairs them (a problem raises, named with its file), and each pair becomes one record (the
schema of :mod:`~datamodules.detection.segmentation_shards`):

* tar (webdataset's layout): ``KEY.<ext>``, the image file's bytes as they are (``ext`` from
  its content: ``jpg``, ``png``, ...), and ``KEY.mask.png``;
* Parquet: the columns ``__key__``, ``image`` and ``mask`` (Hugging Face's ``Image``
  feature, ``{"bytes", "path"}``).

A PNG mask is written as it is; another lossless one (BMP, TIFF, ...) is re-encoded as PNG
with its mode and palette. ``KEY`` is the image's path below its folder (or its VOC id), its
dots and odd characters as ``_``. ``OUT/{prefix}.index.json`` lists the shards. Reading the
shards gives the same batches as reading the source.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator
from typing import Any

from datamodules.core.checks import check_choice, rejected
from datamodules.detection.segmentation_index import (
    SegmentationIndex,
    check_split_spec,
    is_shard_split,
    load_pairs,
)
from datamodules.detection.writer import image_extension
from datamodules.imaging.decoding import read_image_file
from datamodules.shards.writer import write_shards

__all__ = ["write_segmentation_shards"]


def _mask_png(path: str) -> bytes:
    """The mask file's bytes if it is a PNG, else the mask re-encoded as one."""
    with open(path, "rb") as handle:
        data = handle.read()
    if data.startswith(b"\x89PNG"):
        return data
    from PIL import Image

    out = io.BytesIO()
    with Image.open(io.BytesIO(data)) as img:
        img.save(out, "PNG")
    return out.getvalue()


def _keys(index: SegmentationIndex, root: str | None) -> Iterator[str]:
    """A key per pair: the image's path below ``root`` (else its stem), dots and odd
    characters as ``_``, made unique."""
    seen: set[str] = set()
    for i in range(len(index)):
        path = index.image_path(i)
        rel = os.path.relpath(path, root) if root else os.path.basename(path)
        stem = os.path.splitext(rel)[0].replace(os.sep, "/")
        key = re.sub(r"[^A-Za-z0-9_/-]", "_", stem).strip("/") or "image"
        if key in seen:
            key = f"{key}_{i}"
        seen.add(key)
        yield key


def _records(index: SegmentationIndex, fmt: str, root: str | None) -> Iterator[dict[str, Any]]:
    for i, key in enumerate(_keys(index, root)):
        path = index.image_path(i)
        image = bytes(read_image_file(path))
        mask = _mask_png(index.mask_path(i))
        if fmt == "tar":
            yield {"__key__": key, image_extension(image, path): image, "mask.png": mask}
        else:
            yield {"__key__": key, "image": image, "mask": mask}


def write_segmentation_shards(
    source: Any,
    out_dir: str | os.PathLike,
    *,
    split: str = "train",
    fmt: str = "tar",
    max_bytes: int | str = "256MB",
    max_records: int | None = None,
    prefix: str | None = None,
) -> list[str]:
    """Writes one split of image / mask folders or a VOC root into tar or Parquet shards,
    with the split's dataset index beside them; returns the shards' paths.

    ``SegmentationDataModule("OUT/train-{000000..000003}.tar")`` (or the folder, or the
    ``.index.json``) reads them back.

    Args:
        source: A pair ``(image_folder, mask_folder)``, a Pascal VOC root or a VOC split file.
        out_dir: The folder of the shards (made if missing).
        split: Which split of a VOC root (and the shards' default prefix).
        fmt: ``"tar"`` or ``"parquet"``.
        max_bytes: Bytes per shard (an int or ``"256MB"``).
        max_records: Pairs per shard at most (None: no limit).
        prefix: Shards are named ``{prefix}-{k:06d}.{fmt}`` (default: ``split``).

    Raises:
        AnnotationError: A pairing problem (a stem on one side only, a lossy mask, a listed
            VOC id without its files), named with its file.
        ValueError: The source is shards or has no such split.
    """
    check_choice(fmt, "fmt", ("tar", "parquet"))
    spec = check_split_spec(source, "source")
    if spec is None or is_shard_split(spec):
        raise rejected(
            "source", source, "a pair (image_folder, mask_folder), a Pascal VOC root or split file"
        )
    index = load_pairs(spec, split)
    if index is None:
        raise rejected("split", split, f"a split that {spec} has")
    root = spec[0] if isinstance(spec, tuple) else None
    return write_shards(
        _records(index, fmt, root), out_dir, fmt=fmt, max_bytes=max_bytes,
        max_records=max_records, prefix=prefix or split,
    )  # fmt: skip
