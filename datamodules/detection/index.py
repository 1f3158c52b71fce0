"""Finds the format of a detection split, parses it once, and maps the cached index.

:func:`load_index` takes what a user gives for a split (a COCO JSON file, a YOLO
``data.yaml`` or folder, a Pascal VOC root or split file), keys the index by the annotation
files' names, sizes and modification times and by the arguments that change it, and maps the
index from the cache when it is there. Otherwise one process per machine (under a file lock)
parses the annotations and writes the index; DDP ranks and workers of the job then map it.

The cache sits beside the data (``.datamodules-detection/`` next to the annotations) when
that folder is writable, else in ``$DATAMODULES_CACHE/detection``; ``cache=`` names another
folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

from datamodules.core.build_once import build_once
from datamodules.detection.arrays import (
    FORMAT_VERSION,
    AnnotationIndex,
    IndexArrays,
    IndexBuilder,
)
from datamodules.detection.coco import parse_coco
from datamodules.detection.problems import AnnotationError
from datamodules.detection.voc import is_voc_root, parse_voc, resolve_voc
from datamodules.detection.yolo import label_path, parse_yolo, resolve_yolo

__all__ = ["BESIDE", "detect_format", "load_index"]

#: The folder beside the annotations that holds their indexes.
BESIDE = ".datamodules-detection"


def detect_format(spec: str) -> str:
    """``"coco"``, ``"yolo"`` or ``"voc"`` for a split's spec; raises naming what is accepted."""
    if spec.endswith(".json") and os.path.isfile(spec):
        return "coco"
    if spec.endswith((".yaml", ".yml")) and os.path.isfile(spec):
        return "yolo"
    if spec.endswith(".txt") and os.path.isfile(spec):
        return "voc"
    if os.path.isdir(spec):
        return "voc" if is_voc_root(spec) else "yolo"
    raise AnnotationError(
        f"{spec}: not a detection dataset: give a COCO JSON file, a YOLO data.yaml or folder "
        "(images/ + labels/), or a Pascal VOC root (Annotations/, JPEGImages/) or split file"
    )


def _stats(paths: Sequence[str]) -> list[list[Any]]:
    out = []
    for path in paths:
        with contextlib.suppress(OSError):
            st = os.stat(path)
            out.append([path, st.st_size, st.st_mtime_ns])
    return out


def _walk(folder: str) -> list[str]:
    found = []
    for top, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != BESIDE)
        found += [os.path.join(top, f) for f in sorted(files)]
    return found


def _plan(
    spec: str,
    split: str,
    images: str | None,
    classes: Sequence[str] | None,
    on_error: str,
    segmentations: bool,
) -> tuple[list[str], str, Callable[[], IndexBuilder | IndexArrays]] | None:
    """What the index depends on (files to stat), where it sits beside, and how to build it;
    None when the spec has no such split (a data.yaml without ``val``)."""
    fmt = detect_format(spec)
    given = None if classes is None else list(classes)
    if fmt == "coco":
        path = os.path.abspath(spec)
        return (
            [path],
            os.path.dirname(path),
            lambda: parse_coco(
                path,
                images=images,
                classes=given,
                on_error=on_error,
                segmentations=segmentations,
            ),
        )
    if fmt == "yolo":
        folder, names = resolve_yolo(spec, split)
        if folder is None:
            return None
        names = given if given is not None else names
        files = [p for p in _walk(folder)]
        files += [label_path(p) for p in files]
        if spec.endswith((".yaml", ".yml")):
            files.append(os.path.abspath(spec))
        beside = os.path.dirname(os.path.abspath(spec)) if os.path.isfile(spec) else spec
        return files, beside, lambda: parse_yolo(folder, classes=names, on_error=on_error)
    resolved = resolve_voc(spec, split)
    if resolved is None:
        return None
    root, ids = resolved
    files = [os.path.join(root, "Annotations", f"{i}.xml") for i in ids]
    return files, root, lambda: parse_voc(root, ids, classes=given, on_error=on_error)


def _cache_folder(beside: str, cache: str | None) -> str:
    if cache is not None:
        return cache
    here = os.path.join(beside, BESIDE)
    if os.access(beside, os.W_OK):
        return here
    from datamodules.remote.listing import cache_root

    return cache_root("detection")


def load_index(
    spec: str | os.PathLike,
    split: str,
    *,
    images: str | os.PathLike | None = None,
    classes: Sequence[str] | None = None,
    on_error: str = "raise",
    cache: str | os.PathLike | None = None,
    segmentations: bool = True,
) -> AnnotationIndex | None:
    """Maps the annotation index of one split, parsing the annotations first when needed.

    Args:
        spec: A COCO JSON file, a YOLO ``data.yaml`` or folder, a VOC root or split file.
        split: ``"train"``, ``"val"`` or ``"test"``: which split of a ``data.yaml`` or VOC
            root this is.
        images: The image folder of a COCO file (default: the file's folder).
        classes: Class names to keep labels equal to another split's.
        on_error: ``"raise"`` or ``"skip"``.
        cache: The folder of indexes (default: beside the data, else the cache directory).
        segmentations: Check and keep every COCO polygon and RLE (a malformed one is a bad
            annotation); False leaves them unread and out of the index (boxes only, for
            ``masks=False``), which makes parsing a COCO file several times faster. The two
            indexes are cached apart.

    Returns:
        The index, or None when a ``data.yaml`` or VOC root has no such split.
    """
    spec = os.fspath(spec)
    folder = None if images is None else os.path.abspath(os.fspath(images))
    kept = bool(segmentations) or detect_format(spec) != "coco"
    plan = _plan(spec, split, folder, classes, on_error, kept)
    if plan is None:
        return None
    files, beside, build = plan
    key_text = json.dumps(
        [FORMAT_VERSION, os.path.abspath(spec), split, folder, classes, on_error, _stats(files)]
        + ([] if kept else ["no segmentations"]),
        default=str,
    )
    key = hashlib.sha1(key_text.encode(), usedforsecurity=False).hexdigest()[:20]
    where = os.path.join(_cache_folder(beside, None if cache is None else os.fspath(cache)), key)
    meta = {"split": split, "segmentations": kept}
    build_once(where, lambda: build().write(where, meta))
    return AnnotationIndex.open(where)
