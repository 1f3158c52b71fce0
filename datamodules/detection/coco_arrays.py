"""COCO JSON into the index's flat arrays in bulk: the path of a file without problems.

:func:`coco_arrays` reads a COCO file with a handful of C-level passes per field (``map``,
``set(map(type, ...))``, ``np.fromiter``) instead of Python work per object, and answers
None at the first sign of a problem: :func:`~datamodules.detection.coco.parse_coco` then
reads the file again object by object and names the problem (file, annotation or image id).
Either way the index holds the same arrays.

Polygons are most of a COCO file (COCO train2017: about 860k of them) and most of what a
JSON parser does with it, and only masks need them. Before parsing, every ``[[`` becomes
``"[[`` and every ``]]`` becomes ``]]"``: each polygon list (a list of lists of numbers)
is parsed as one string, its JSON text (the object's segmentation bytes, when kept). A ``[[``
or ``]]`` anywhere else (inside a string) leaves invalid JSON, so the bulk path is not taken.
With ``segmentations`` (``masks=True``) the polygons are parsed once more, together, and
checked; without it they are neither read nor kept (an index for boxes only).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

import numpy as np

from datamodules.detection.arrays import IndexArrays
from datamodules.detection.problems import segmentation_problem

__all__ = ["coco_arrays", "loads_marked"]

_INTS = frozenset((int,))
_NUMBERS = frozenset((int, float))


def loads_marked(raw: bytes) -> Any:
    """The JSON with each ``[[ ... ]]`` parsed as a string, or None (orjson missing, or the
    marked text is not JSON)."""
    try:
        import orjson
    except ImportError:
        return None
    try:
        return orjson.loads(raw.replace(b"[[", b'"[[').replace(b"]]", b']]"'))
    except orjson.JSONDecodeError:
        return None


def _ints(values: list[Any]) -> np.ndarray | None:
    """``values`` as int64 when every one is an ``int`` (not a bool, float or string)."""
    if not set(map(type, values)) <= _INTS:
        return None
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except OverflowError:
        return None


def _packed_text(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """One byte buffer of the texts (UTF-8; file names as ``os.fsencode``) and N + 1 offsets."""
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    joined = "".join(texts)
    if joined.isascii():
        data = joined.encode("ascii")
        np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)), out=offsets[1:])
    else:
        encoded = list(map(os.fsencode, texts))
        data = b"".join(encoded)
        np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(texts)), out=offsets[1:])
    return np.frombuffer(data, dtype=np.uint8), offsets


def _files(folder: str, names: list[str]) -> list[str] | None:
    """The images' paths, or None when one is missing (one directory listing per folder, not
    a stat per file)."""
    if os.sep not in "\0".join(names) and (os.altsep is None or os.altsep not in "".join(names)):
        prefix = os.path.join(folder, "")  # names without folders: one listing
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            present = {e.name for e in entries if e.is_file()}
            if present.issuperset(names):
                return list(map(prefix.__add__, names))
        return None
    files = list(map(os.path.join, repeat(folder), names))
    return files if all(map(os.path.isfile, files)) else None


def _values(items: list[dict[str, Any]], key: str, default: Any) -> list[Any]:
    """``item.get(key, default)`` of each item (``itemgetter`` in C when every item has it)."""
    try:
        return list(map(itemgetter(key), items))
    except KeyError:
        return [item.get(key, default) for item in items]


def _segmentation_text(segmentation: Any) -> str:
    """A segmentation that was not a marked polygon string (an RLE, an empty list, None) as
    JSON text (empty for none)."""
    if not segmentation:
        return ""
    import orjson

    return orjson.dumps(segmentation).decode()


def _segmentations_fine(segmentations: list[Any]) -> bool:
    """Whether every segmentation is well formed (polygons of 3+ points, an RLE with size and
    counts, or none), checked in bulk."""
    import orjson

    marked = [s for s in segmentations if s.__class__ is str]
    others = [s for s in segmentations if s.__class__ is not str]
    if any(segmentation_problem(s) is not None for s in others):
        return False
    try:
        parsed = orjson.loads("[" + ",".join(marked) + "]")
    except orjson.JSONDecodeError:
        return False
    polygons = list(chain.from_iterable(parsed))
    if not set(map(type, polygons)) <= {list} or not set(map(type, parsed)) <= {list}:
        return False
    if not set(map(type, chain.from_iterable(polygons))) <= _NUMBERS:
        return False
    lengths = np.fromiter(map(len, polygons), dtype=np.int64, count=len(polygons))
    return bool(np.all((lengths % 2 == 0) & (lengths >= 6)))


def _segmentation_arrays(
    anns: list[dict[str, Any]], rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """The kept objects' segmentations as JSON text (a marked polygon list as it stood in the
    file), packed; None when one is malformed."""
    segmentations = _values(anns, "segmentation", None)
    if not _segmentations_fine(segmentations):
        return None
    if len(rows) != len(segmentations) or np.any(rows != np.arange(len(rows))):
        segmentations = list(map(segmentations.__getitem__, rows.tolist()))
    texts = [s if s.__class__ is str else _segmentation_text(s) for s in segmentations]
    return _packed_text(texts)


def coco_arrays(
    data: Any,
    path: str,
    folder: str,
    label_of: dict[int, int],
    classes: Sequence[str],
    *,
    segmentations: bool,
) -> IndexArrays | None:
    """The index of a COCO file without problems, or None (then the checking parser runs).

    Args:
        data: The file as :func:`loads_marked` parsed it.
        path: The file (the index's source).
        folder: The folder of the images' ``file_name``s.
        label_of: Category id -> label.
        classes: The class names, by label.
        segmentations: Check and keep every polygon and RLE (masks are built from them);
            False leaves them unread.
    """
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        return None
    try:
        return _arrays(data, path, folder, label_of, classes, segmentations)
    except (KeyError, TypeError, AttributeError, ValueError, IndexError, OverflowError):
        return None


def _arrays(
    data: dict[str, Any],
    path: str,
    folder: str,
    label_of: dict[int, int],
    classes: Sequence[str],
    segmentations: bool,
) -> IndexArrays | None:
    images = data["images"]
    anns = data.get("annotations") or []
    if not isinstance(anns, list):
        return None
    image_ids = _ints(list(map(itemgetter("id"), images)))
    heights = _ints(list(map(itemgetter("height"), images)))
    widths = _ints(list(map(itemgetter("width"), images)))
    names = list(map(itemgetter("file_name"), images))
    if image_ids is None or heights is None or widths is None:
        return None
    if not set(map(type, names)) <= {str}:
        return None
    order = np.argsort(image_ids, kind="stable")
    sorted_ids = image_ids[order]
    if len(sorted_ids) > 1 and not np.all(sorted_ids[1:] > sorted_ids[:-1]):
        return None  # an image id twice
    if np.any(order != np.arange(len(order))):
        names = list(map(names.__getitem__, order.tolist()))
    files = _files(folder, names)
    if files is None:
        return None
    # The objects: each field in bulk; any value of another kind sends the file to the
    # checking parser.
    of_image = _ints(list(map(itemgetter("image_id"), anns)))
    categories = _ints(list(map(itemgetter("category_id"), anns)))
    ann_ids = _ints(_values(anns, "id", -1))
    bboxes = list(map(itemgetter("bbox"), anns))
    if of_image is None or categories is None or ann_ids is None:
        return None
    if not set(map(type, bboxes)) <= {list} or not set(map(len, bboxes)) <= {4}:
        return None
    if not set(map(type, chain.from_iterable(bboxes))) <= _NUMBERS:
        return None
    count = len(anns)
    xywh = np.fromiter(chain.from_iterable(bboxes), dtype=np.float64, count=4 * count)
    position = np.searchsorted(sorted_ids, of_image)
    if not np.array_equal(sorted_ids[np.minimum(position, len(sorted_ids) - 1)], of_image):
        return None  # an annotation of an image the file does not list
    known = np.sort(np.fromiter(label_of, dtype=np.int64, count=len(label_of)))
    at = np.searchsorted(known, categories)
    if not np.array_equal(known[np.minimum(at, len(known) - 1)], categories):
        return None  # an unknown category
    label_by_position = np.array([label_of[int(c)] for c in known], dtype=np.int64)
    labels = label_by_position[at] if count else np.zeros(0, dtype=np.int64)
    crowd = np.fromiter(map(bool, _values(anns, "iscrowd", 0)), dtype=np.bool_, count=count)
    # Boxes: XYWH -> XYXY, clipped to the image; those without area left out (counted).
    xywh = xywh.reshape(-1, 4)
    width = widths[order][position].astype(np.float64)
    height = heights[order][position].astype(np.float64)
    x1 = np.minimum(np.maximum(xywh[:, 0], 0.0), width)
    y1 = np.minimum(np.maximum(xywh[:, 1], 0.0), height)
    x2 = np.minimum(np.maximum(xywh[:, 0] + xywh[:, 2], 0.0), width)
    y2 = np.minimum(np.maximum(xywh[:, 1] + xywh[:, 3], 0.0), height)
    rows = np.flatnonzero(~((x2 <= x1) | (y2 <= y1)))
    rows = rows[np.argsort(position[rows], kind="stable")]  # by image, then file order
    if segmentations:
        packed = _segmentation_arrays(anns, rows)
        if packed is None:
            return None
        segm_bytes, segm_offsets = packed
    else:  # not kept: an index for boxes only
        segm_bytes, segm_offsets = np.zeros(0, np.uint8), np.zeros(len(rows) + 1, np.int64)
    path_bytes, path_offsets = _packed_text(files)
    offsets = np.zeros(len(files) + 1, dtype=np.int64)
    np.cumsum(np.bincount(position[rows], minlength=len(files)), out=offsets[1:])
    arrays = {
        "path_bytes": path_bytes,
        "path_offsets": path_offsets,
        "image_ids": sorted_ids,
        "heights": heights[order].astype(np.int32),
        "widths": widths[order].astype(np.int32),
        "offsets": offsets,
        "boxes": np.stack([x1, y1, x2, y2], axis=1)[rows].astype(np.float32).reshape(-1, 4),
        "labels": labels[rows],
        "crowd": crowd[rows],
        "annotation_ids": ann_ids[rows],
        "segm_bytes": segm_bytes,
        "segm_offsets": segm_offsets,
    }
    info = {"source": path, "skipped": [], "degenerate": int(count - len(rows))}
    return IndexArrays(classes, arrays, info)
