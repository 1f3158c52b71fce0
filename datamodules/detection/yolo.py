"""YOLO datasets into an :class:`~datamodules.detection.arrays.IndexBuilder`.

A split is a ``data.yaml`` (Ultralytics' dataset file: ``path``, ``train`` / ``val`` /
``test`` image folders, ``names`` a list or an ``{id: name}`` mapping), a folder holding
``images/`` and ``labels/``, or an image folder whose path has an ``images`` component. Each
image's labels are the ``.txt`` at its path with the last ``images`` component replaced by
``labels`` (Ultralytics' rule); a missing label file is an image without objects.

A line is ``class cx cy w h`` (a box) or ``class x1 y1 x2 y2 ...`` (a ``-seg`` polygon of at
least 3 points; its box is the polygon's bounds), coordinates normalised to [0, 1]. A line
with another field count, a value outside [0, 1] or a class outside ``names`` is named with
its file and line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from datamodules.detection.arrays import IndexBuilder
from datamodules.detection.problems import AnnotationError, Problems
from datamodules.imaging.decoding import DECODABLE

__all__ = ["image_size", "label_path", "parse_yolo", "resolve_yolo"]


def image_size(path: str) -> tuple[int, int]:
    """(height, width) of an image as decoded (EXIF orientation applied), from its header."""
    from PIL import Image

    with Image.open(path) as img:
        width, height = img.size
        orientation = img.getexif().get(0x0112, 1)
    return (width, height) if orientation in (5, 6, 7, 8) else (height, width)


def label_path(image: str) -> str:
    """The label file of an image: the last ``images`` component -> ``labels``, ``.txt``."""
    images, labels = f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"
    head, sep, tail = image.rpartition(images)
    swapped = f"{head}{labels}{tail}" if sep else image
    return os.path.splitext(swapped)[0] + ".txt"


def _names(value: Any, where: str) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, int) for k in value):
        if sorted(value) != list(range(len(value))):
            raise AnnotationError(f"{where}: names ids {sorted(value)} are not 0..{len(value) - 1}")
        return [str(value[k]) for k in range(len(value))]
    raise AnnotationError(f"{where}: names must be a list or an {{id: name}} mapping")


def resolve_yolo(spec: str, split: str) -> tuple[str | None, list[str] | None]:
    """The image folder of ``split`` and the class names of a YOLO dataset spec.

    Args:
        spec: A ``data.yaml``, a folder with ``images/`` (and ``labels/``), or an image folder.
        split: ``"train"``, ``"val"`` or ``"test"`` (the key read from a ``data.yaml``).

    Returns:
        The folder (None when a ``data.yaml`` has no such split) and the names (None when
        no ``data.yaml`` gives them).
    """
    if spec.endswith((".yaml", ".yml")):
        import yaml

        try:
            with open(spec, encoding="utf-8") as handle:
                data = yaml.safe_load(handle)
        except (OSError, yaml.YAMLError) as exc:
            raise AnnotationError(f"{spec}: cannot read the YOLO data.yaml: {exc}") from exc
        if not isinstance(data, dict) or "names" not in data:
            raise AnnotationError(f"{spec}: a YOLO data.yaml needs 'names'")
        names = _names(data["names"], spec)
        root = os.path.join(os.path.dirname(os.path.abspath(spec)), str(data.get("path") or ""))
        folder = data.get(split)
        if folder is None:
            return None, names
        if not isinstance(folder, str):
            raise AnnotationError(f"{spec}: {split} must be one image folder, got {folder!r}")
        return os.path.normpath(os.path.join(root, folder)), names
    if os.path.isdir(os.path.join(spec, "images")):
        return os.path.join(spec, "images"), None
    return spec, None


def _images(folder: str) -> list[str]:
    found = []
    for top, dirs, files in os.walk(folder):
        dirs.sort()
        found += [os.path.join(top, f) for f in sorted(files) if f.lower().endswith(DECODABLE)]
    return found


def _parse_line(fields: list[str], classes: int | None) -> tuple[int, list[float]] | str:
    """A line's class and numbers, or what is wrong with it."""
    count = len(fields)
    if count != 5 and (count < 7 or count % 2 == 0):
        return (
            f"{count} fields; a line is 'class cx cy w h' (5) or 'class x1 y1 x2 y2 ...' "
            "(an odd count of 7 or more)"
        )
    try:
        label = int(fields[0])
        values = [float(v) for v in fields[1:]]
    except ValueError:
        return f"{' '.join(fields)!r} is not a class id followed by numbers"
    if label < 0 or (classes is not None and label >= classes):
        return f"class {label} is outside 0..{(classes or 1) - 1} (the names)"
    bad = [v for v in values if not 0.0 <= v <= 1.0]
    if bad:
        return f"value {bad[0]} is outside [0, 1] (coordinates are normalised)"
    return label, values


def parse_yolo(
    folder: str,
    *,
    classes: Sequence[str] | None = None,
    on_error: str = "raise",
) -> IndexBuilder:
    """Reads the images of a YOLO image folder and their label files.

    Args:
        folder: The image folder (see :func:`resolve_yolo`).
        classes: The class names (from ``data.yaml`` or another split); None: ``"0"`` ..
            the largest class id found.
        on_error: ``"raise"`` or ``"skip"`` (bad lines and unreadable images left out,
            counted).

    Returns:
        The builder, filled.
    """
    if not os.path.isdir(folder):
        raise AnnotationError(f"{folder}: no such YOLO image folder")
    skipped: list[tuple[str, str]] = []
    problem = Problems(on_error, skipped)
    limit = None if classes is None else len(classes)
    found: list[tuple[str, int, int, list[tuple[int, list[float], int]]]] = []
    for image in _images(folder):
        try:
            height, width = image_size(image)
        except Exception as exc:  # PIL raises many kinds for a file that is no image
            problem(image, f"cannot read the image's size: {exc}")
            continue
        rows: list[tuple[int, list[float], int]] = []
        labels = label_path(image)
        if os.path.isfile(labels):
            with open(labels, encoding="utf-8") as handle:
                for number, line in enumerate(handle, 1):
                    fields = line.split()
                    if not fields:
                        continue
                    parsed = _parse_line(fields, limit)
                    if isinstance(parsed, str):
                        problem(f"{labels}: line {number}", parsed)
                        continue
                    rows.append((parsed[0], parsed[1], number))
        found.append((image, height, width, rows))
    if classes is None:
        top = max((label for *_, rows in found for label, _, _ in rows), default=-1)
        classes = [str(i) for i in range(top + 1)]
    builder = IndexBuilder(classes, folder)
    builder.skipped.extend(skipped)
    for image_id, (image, height, width, rows) in enumerate(found):
        position = builder.add_image(image, image_id, height, width)
        for label, values, line in rows:
            if len(values) == 4:
                cx, cy, w, h = values
                box = ((cx - w / 2) * width, (cy - h / 2) * height,
                       (cx + w / 2) * width, (cy + h / 2) * height)  # fmt: skip
                polygon = None
            else:
                xs = [v * width for v in values[0::2]]
                ys = [v * height for v in values[1::2]]
                box = (min(xs), min(ys), max(xs), max(ys))
                polygon = [[c for pair in zip(xs, ys, strict=True) for c in pair]]
            builder.add_object(position, box, label, annotation_id=line, segmentation=polygon)
    return builder
