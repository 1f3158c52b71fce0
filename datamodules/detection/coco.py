"""COCO JSON annotations into an :class:`~datamodules.detection.arrays.IndexBuilder`.

Boxes (``bbox`` ``[x, y, w, h]`` -> XYXY), polygons and RLE (kept as given, for masks),
``iscrowd``, and category ids that need not be contiguous (``1, 3, 90``): labels follow the
categories sorted by id, and ``classes`` names them. Images are taken in order of their ids,
as torchvision's ``CocoDetection`` takes them. A bad annotation is named with the file and its
annotation id: an image id not among the images, an unknown category id, a box that is not
four numbers, a malformed polygon or RLE (checked when segmentations are kept, for masks), a
missing image file.

A file without problems is read in bulk (:mod:`~datamodules.detection.coco_arrays`: no Python
work per object, polygons left unparsed unless kept); at the first sign of a problem the file
is read again object by object here, and the problem named.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from datamodules.core.gc_pause import paused_gc
from datamodules.detection.arrays import IndexArrays, IndexBuilder
from datamodules.detection.coco_arrays import coco_arrays, loads_marked
from datamodules.detection.problems import AnnotationError, Problems, segmentation_problem

__all__ = ["coco_classes", "parse_coco"]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: What a JSON number parses to (``bool`` is not among them).
def _loads(text: bytes) -> Any:
    """Parsed JSON: orjson's parser when installed (the same values, about 2x faster), else
    the stdlib's."""
    try:
        import orjson
    except ImportError:
        return json.loads(text)
    return orjson.loads(text)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise AnnotationError(f"{path}: cannot read COCO JSON: {exc}") from exc


def _load(path: str, text: bytes) -> dict[str, Any]:
    try:
        data = _loads(text)
    except ValueError as exc:
        raise AnnotationError(f"{path}: cannot read COCO JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise AnnotationError(f"{path}: not COCO JSON (no 'images' list)")
    return data


def coco_classes(data: dict[str, Any], path: str) -> tuple[list[int], list[str]]:
    """The category ids sorted, and their names."""
    categories = data.get("categories") or []
    try:
        pairs = sorted((int(c["id"]), str(c["name"])) for c in categories)
    except (KeyError, TypeError, ValueError) as exc:
        raise AnnotationError(f"{path}: a category has no integer 'id' or no 'name'") from exc
    return [i for i, _ in pairs], [n for _, n in pairs]


def _labels(
    data: dict[str, Any], path: str, classes: Sequence[str] | None
) -> tuple[list[int], list[str], dict[int, int]]:
    """The category ids, the class names, and each category id's label."""
    ids, names = coco_classes(data, path)
    if classes is None:
        classes = names
    known = {name: label for label, name in enumerate(classes)}
    label_of: dict[int, int] = {}
    for category_id, name in zip(ids, names, strict=True):
        if name not in known:
            raise AnnotationError(
                f"{path}: category {category_id} {name!r} is not among the classes of the "
                f"train split {list(classes)}"
            )
        label_of[category_id] = known[name]
    return ids, list(classes), label_of


def parse_coco(
    path: str,
    *,
    images: str | None = None,
    classes: Sequence[str] | None = None,
    on_error: str = "raise",
    segmentations: bool = True,
    bulk: bool = True,
) -> IndexBuilder | IndexArrays:
    """Reads a COCO JSON file.

    A file without problems is read in bulk (:mod:`~datamodules.detection.coco_arrays`);
    otherwise object by object, each problem named (raised, or skipped and counted).

    Args:
        path: The JSON file.
        images: The folder of the ``file_name``s (default: the JSON's folder).
        classes: The class names of another split to keep labels equal (category names
            outside them are refused); default: this file's categories by id.
        on_error: ``"raise"`` or ``"skip"`` (bad annotations and images left out, counted).
        segmentations: Check and keep each polygon and RLE (a malformed one is a problem);
            False leaves them unread and out (an index for boxes only: no masks).
        bulk: Try the bulk path first (False: object by object, as for a file with
            problems).

    Returns:
        What to write (``.write(directory, meta)``).
    """
    text = _read(path)
    folder = images if images is not None else os.path.dirname(os.path.abspath(path))
    with paused_gc():
        marked = loads_marked(text) if bulk else None
        if isinstance(marked, dict) and isinstance(marked.get("images"), list):
            _, names, label_of = _labels(marked, path, classes)
            built = coco_arrays(marked, path, folder, label_of, names, segmentations=segmentations)
            if built is not None:
                return built
        del marked
        return _parse_objects(_load(path, text), path, folder, classes, on_error, segmentations)


def _parse_objects(
    data: dict[str, Any],
    path: str,
    folder: str,
    classes: Sequence[str] | None,
    on_error: str,
    segmentations: bool,
) -> IndexBuilder:
    """The file object by object: each problem named, raised or skipped."""
    ids, classes, label_of = _labels(data, path, classes)
    builder = IndexBuilder(classes, path)
    problem = Problems(on_error, builder.skipped)
    by_id: dict[int, dict[str, Any]] = {}
    for image in data["images"]:
        try:
            by_id[int(image["id"])] = image
        except (KeyError, TypeError, ValueError):
            problem(path, f"image {image!r} has no integer 'id'")
    objects: dict[int, list[dict[str, Any]]] = {i: [] for i in by_id}
    for ann in data.get("annotations") or []:
        where = f"{path}: annotation id {ann.get('id')}"
        image_id = ann.get("image_id")
        if image_id not in objects:
            problem(where, f"image_id {image_id!r} is not among the file's images")
            continue
        if ann.get("category_id") not in label_of:
            problem(
                where,
                f"category_id {ann.get('category_id')!r} is not among the categories {ids}",
            )
            continue
        bbox = ann.get("bbox")
        if not (isinstance(bbox, list) and len(bbox) == 4 and all(_number(v) for v in bbox)):
            problem(where, f"bbox {bbox!r} is not four numbers [x, y, width, height]")
            continue
        why = segmentation_problem(ann.get("segmentation")) if segmentations else None
        if why is not None:
            problem(where, why)
            continue
        objects[image_id].append(ann)
    for image_id in sorted(by_id):
        image = by_id[image_id]
        where = f"{path}: image id {image_id}"
        try:
            file = os.path.join(folder, str(image["file_name"]))
            height, width = int(image["height"]), int(image["width"])
        except (KeyError, TypeError, ValueError):
            problem(where, "an image needs 'file_name', 'height' and 'width'")
            continue
        if not os.path.isfile(file):
            problem(where, f"image file {file} is missing")
            continue
        position = builder.add_image(file, image_id, height, width)
        for ann in objects[image_id]:
            x, y, w, h = ann["bbox"]
            builder.add_object(
                position, (x, y, x + w, y + h), label_of[ann["category_id"]],
                crowd=bool(ann.get("iscrowd", 0)), annotation_id=int(ann.get("id", -1)),
                segmentation=(ann.get("segmentation") or None) if segmentations else None,
            )  # fmt: skip
    return builder
