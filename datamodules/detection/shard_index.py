"""Detection shards into an :class:`~datamodules.detection.arrays.AnnotationIndex`: tar and
Parquet shards whose records hold an image and a JSON member of boxes, local or remote.

A record (what :func:`~datamodules.detection.writer.write_detection_shards` writes):

* tar: ``KEY.jpg`` (or ``png``, ``webp``, ...: the first of ``image_key``'s alternatives) and
  ``KEY.json``; Parquet: an image column (bytes or Hugging Face's ``{"bytes", "path"}``) and
  a ``json`` column (the JSON text, or a struct of the same fields);
* the JSON object: ``boxes`` ``[[x0, y0, x1, y1], ...]`` (XYXY, absolute pixels), ``labels``
  (positions in the classes, or class names), optional ``iscrowd`` (0 / 1 per object),
  ``segmentation`` (per object: COCO polygons, an RLE, or null), ``annotation_id``,
  ``image_id`` (default: the record's position among the split's good records), ``width``
  and ``height`` (default: read from the image's header). ``category_id`` and
  ``file_name`` (the source's) are kept by the writer and not read.

The classes are ``classes=`` (the train split's, for the others), else the ``classes.json``
(a list of names) beside the first shard, else the names the records use, sorted. Each
shard's JSON members are parsed once into the flat arrays every format gives; images stay in
the shards, and the index holds each one's
:class:`~datamodules.shards.member_records.MemberRef` (byte range or Parquet row) as its
path. The index is cached as the other formats' are, keyed by each shard's path or URL, size
and modification time or ETag.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Sequence
from typing import Any

from datamodules.core.build_once import build_once
from datamodules.detection.arrays import FORMAT_VERSION, AnnotationIndex, IndexBuilder
from datamodules.detection.index import BESIDE
from datamodules.detection.problems import AnnotationError, Problems, segmentation_problem
from datamodules.imaging.decoding import decode_image, decode_image_bytes
from datamodules.remote.files import is_remote
from datamodules.remote.listing import cache_root, file_version
from datamodules.remote.random_access import RandomAccessFiles, version_text
from datamodules.shards.errors import ShardError
from datamodules.shards.member_records import (
    MemberReader,
    MemberRecord,
    scan_members,
)
from datamodules.shards.member_shards import MemberBytes, is_member_spec, member_shard_files

__all__ = ["IMAGE_KEY", "ShardImages", "is_shard_spec", "load_shard_index", "shard_files"]

#: The image members tried in order, by default.
IMAGE_KEY = "jpg;jpeg;png;webp;bmp;tif;tiff;image"
#: Sub-folders of a YOLO or VOC dataset: a folder holding one is not a folder of shards.
LAYOUTS = ("Annotations", "labels", "images")


def is_shard_spec(spec: Any) -> bool:
    """Whether a split's spec names detection shards: a list, a URL, a brace pattern or glob,
    a ``.tar`` / ``.parquet`` file, or a folder holding such files and no YOLO or VOC layout
    (:func:`~datamodules.shards.member_shards.is_member_spec`)."""
    return is_member_spec(spec, LAYOUTS)


def shard_files(spec: Any, files: RandomAccessFiles) -> list[str]:
    """The shards a split names, in order (folders and globs sorted; a dataset index
    ``*.index.json`` gives the shards it lists)."""
    return member_shard_files(spec, files, "detection shard", AnnotationError)


def _classes_json(first: str, files: RandomAccessFiles) -> list[str] | None:
    """The ``classes.json`` beside the first shard, or None."""
    path = first.rsplit("/", 1)[0] + "/classes.json" if is_remote(first) else os.path.join(
        os.path.dirname(os.path.abspath(first)), "classes.json"
    )  # fmt: skip
    try:
        size = files.version(path)[1] if is_remote(path) else os.path.getsize(path)
        data = json.loads(files.read_range(path, 0, int(size or 0)))
    except (OSError, ValueError):
        return None
    if not (isinstance(data, list) and all(isinstance(c, str) for c in data)):
        raise AnnotationError(f"{path}: not a list of class names")
    return data


def _numbers(value: Any, count: int | None = None) -> bool:
    ok = isinstance(value, list) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
    )
    return ok and (count is None or len(value) == count)


def _annotation(record: MemberRecord, image_key: Sequence[str]) -> tuple[str, dict] | str:
    """``(image member, the JSON object)`` of a record, or what is wrong with it."""
    if record.problem:
        return record.problem
    image = next((k for k in image_key if k in record.located), None)
    if image is None:
        return f"no image member ({', '.join(image_key)})"
    raw = record.read.get("json")
    if raw is None:
        return "no json member"
    try:
        data = json.loads(raw) if isinstance(raw, (bytes, bytearray, str)) else raw
    except ValueError as err:
        return f"malformed JSON ({err})"
    if not isinstance(data, dict):
        return f"the json member is a {type(data).__name__}, not an object"
    boxes = data.get("boxes", [])
    if not isinstance(boxes, list) or not all(_numbers(b, 4) for b in boxes):
        return "'boxes' is not a list of [x0, y0, x1, y1] (absolute pixels)"
    for name in ("labels", "iscrowd", "segmentation", "annotation_id"):
        given = data.get(name)
        if (given is not None or name == "labels") and (
            not isinstance(given, list) or len(given) != len(boxes)
        ):
            return f"{name!r} is not a list of one entry per box ({len(boxes)})"
    for k, segmentation in enumerate(data.get("segmentation") or []):
        why = segmentation_problem(segmentation)
        if why is not None:
            return f"object {k}: {why}"
    if any(not isinstance(v, int) or isinstance(v, bool) for v in data.get("annotation_id") or []):
        return "'annotation_id' holds a value that is not an integer"
    if any(not isinstance(v, (int, float)) for v in data.get("iscrowd") or []):
        return "'iscrowd' holds a value that is not 0 or 1"
    for name in ("image_id", "width", "height"):
        value = data.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            return f"{name!r} {value!r} is not an integer"
    return image, data


def _image_size(record: MemberRecord, image: str, files: RandomAccessFiles) -> tuple[int, int]:
    from PIL import Image

    data = MemberReader(files).read(record.located[image])
    with Image.open(io.BytesIO(data)) as img:
        return img.height, img.width


class _Adder:
    """Adds good records to the builder: labels checked against the classes, sizes read
    from the image when the JSON has none."""

    def __init__(self, builder: IndexBuilder, problem: Problems, files: RandomAccessFiles):
        self.builder, self.problem, self.files = builder, problem, files
        self.position = {name: k for k, name in enumerate(builder.classes)}
        self.number = 0

    def __call__(self, record: MemberRecord, image: str, data: dict) -> None:
        classes, labels = self.builder.classes, []
        for value in data["labels"]:
            label = self.position.get(value) if isinstance(value, str) else value
            if not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < len(
                classes
            ):  # fmt: skip
                self.problem(record.where, f"unknown category {value!r} (classes: {classes})")
                return
            labels.append(label)
        height, width = data.get("height"), data.get("width")
        if height is None or width is None:
            try:
                height, width = _image_size(record, image, self.files)
            except OSError as err:
                self.problem(record.where, f"no width / height, and the image's: {err}")
                return
        ref = record.located[image].encode()
        at = self.builder.add_image(ref, data.get("image_id", self.number), height, width)
        self.number += 1
        n = len(labels)
        crowd = data.get("iscrowd") or [0] * n
        ids = data.get("annotation_id") or [-1] * n
        segmentations = data.get("segmentation") or [None] * n
        for k in range(n):
            self.builder.add_object(
                at, data["boxes"][k], labels[k], crowd=bool(crowd[k]),
                annotation_id=int(ids[k]), segmentation=segmentations[k] or None,
            )  # fmt: skip


def _build(
    shards: list[str],
    image_key: Sequence[str],
    classes: Sequence[str] | None,
    on_error: str,
    files: RandomAccessFiles,
    source: str,
) -> IndexBuilder:
    """Reads the shards once; with the classes known, each record goes into the index as it
    is read, else the records are kept until their class names are known."""
    skipped: list[tuple[str, str]] = []
    builder = IndexBuilder(classes or [], source)
    add = _Adder(builder, Problems(on_error, skipped), files) if classes is not None else None
    kept: list[tuple[MemberRecord, str, dict]] = []
    problem = Problems(on_error, skipped)
    for shard in shards:
        try:
            for record in scan_members(shard, read=["json"], located=list(image_key), files=files):
                found = _annotation(record, image_key)
                if isinstance(found, str):
                    problem(record.where, found)
                elif add is not None:
                    add(record, *found)
                else:
                    record.read.clear()  # the parsed JSON is kept, not its bytes
                    kept.append((record, *found))
        except ShardError as err:
            problem(shard, str(err).removeprefix(f"{shard}: "))
    if add is None:
        used = [v for _, _, data in kept for v in data["labels"]]
        if any(not isinstance(v, str) for v in used):
            raise AnnotationError(
                f"{shards[0]}: labels are class positions but no classes are known: put a "
                "classes.json (a list of names) beside the shards, or give classes="
            )
        builder.classes = sorted(set(used))
        add = _Adder(builder, Problems(on_error, skipped), files)
        for item in kept:
            add(*item)
    builder.skipped.extend(skipped)
    return builder


def load_shard_index(
    spec: Any,
    split: str,
    *,
    image_key: Sequence[str] = tuple(IMAGE_KEY.split(";")),
    classes: Sequence[str] | None = None,
    on_error: str = "raise",
    cache: str | os.PathLike | None = None,
    files: RandomAccessFiles | None = None,
) -> AnnotationIndex:
    """Maps the annotation index of one split of detection shards, parsing their JSON members
    first when needed (once per machine, under a file lock).

    Args:
        spec: Shards: a path or URL, a glob or brace pattern, a folder, a dataset index
            (``*.index.json``, as the writer writes), or a list of them.
        split: The split's name (kept in the index's meta).
        image_key: The image members (tar extensions, Parquet columns) tried in order.
        classes: Class names (default: ``classes.json`` beside the shards, else the names the
            records use, sorted).
        on_error: ``"raise"`` or ``"skip"`` bad records (named with shard and key, counted).
        cache: The folder of indexes (default: beside local shards when writable, else
            ``$DATAMODULES_CACHE/detection``).
        files: How remote shards are read (the remote options of streams).
    """
    files = files or RandomAccessFiles()
    shards = shard_files(spec, files)
    if classes is None:
        classes = _classes_json(shards[0], files)
    stats = []
    for shard in shards:
        try:
            found = file_version(shard, files.options)
        except FileNotFoundError as err:
            raise AnnotationError(f"{shard}: the shard does not exist") from err
        stats.append({k: v for k, v in (found or {"path": shard}).items()})
    given = None if classes is None else list(classes)
    key_text = json.dumps(
        [FORMAT_VERSION, "shards", split, list(image_key), given, on_error, stats], default=str
    )
    key = hashlib.sha1(key_text.encode(), usedforsecurity=False).hexdigest()[:20]
    if cache is not None:
        folder = os.fspath(cache)
    elif not is_remote(shards[0]) and os.access(
        os.path.dirname(os.path.abspath(shards[0])), os.W_OK
    ):
        folder = os.path.join(os.path.dirname(os.path.abspath(shards[0])), BESIDE)
    else:
        folder = cache_root("detection")
    where = os.path.join(folder, key)
    source = shards[0] if len(shards) == 1 else f"{shards[0]} and {len(shards) - 1} more shards"

    def build() -> None:
        built = _build(shards, image_key, given, on_error, files, source)
        versions = {shard: version_text(found) for shard, found in zip(shards, stats, strict=True)}
        built.write(where, {"split": split, "images": "shards", "versions": versions})

    build_once(where, build)
    return AnnotationIndex.open(where)


class ShardImages:
    """Decodes image ``i`` of an index: from its shard (by the byte range or Parquet row its
    path holds) when the index was built from shards, else from its file; a remote shard's
    version (size, ETag) is checked against the index's once per process. What a
    :class:`~datamodules.detection.batches.DetectionBatchView` reads images with.

    Args:
        files: How remote shards are read.
    """

    def __init__(self, files: RandomAccessFiles | None = None) -> None:
        self.read = MemberBytes(files)

    def __call__(self, index: AnnotationIndex, i: int) -> Any:
        if index.meta.get("images") != "shards":
            return decode_image(index.image_path(i))
        data, where = self.data(index, i)
        return decode_image_bytes(data, name=where)

    def data(self, index: AnnotationIndex, i: int) -> tuple[bytes, str]:
        """Image ``i``'s encoded bytes, read from its shard, and how errors name it."""
        # A remote shard's version: one request per shard and process; then a dict look-up.
        return self.read(index.image_path(i), index.meta["versions"])
