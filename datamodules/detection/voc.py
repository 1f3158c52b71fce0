"""Pascal VOC annotations into an :class:`~datamodules.detection.arrays.IndexBuilder`.

A VOC root holds ``Annotations/<id>.xml``, ``JPEGImages/`` and ``ImageSets/Main/<split>.txt``
(the ids of a split). Each object's ``name``, ``bndbox`` (``xmin ymin xmax ymax``, kept as
the file gives them, as torchvision's ``VOCDetection`` does) and ``difficult`` flag are read;
``difficult`` objects are crowd objects (kept out of training boxes by ``crowd="ignore"``, as
VOC's evaluation ignores them). A bad file or object is named with the file and the object's
number.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence

from datamodules.detection.arrays import IndexBuilder
from datamodules.detection.problems import AnnotationError, Problems

__all__ = ["is_voc_root", "parse_voc", "resolve_voc"]


def is_voc_root(path: str) -> bool:
    """Whether ``path`` is a VOC root (it has ``Annotations/``)."""
    return os.path.isdir(os.path.join(path, "Annotations"))


def resolve_voc(spec: str, split: str) -> tuple[str, list[str]] | None:
    """The root and image ids of ``split`` of a VOC spec, or None when the root has no such
    split file (a train split without one takes every annotation).

    Args:
        spec: A VOC root, or a split file ``<root>/ImageSets/Main/<name>.txt``.
        split: ``"train"``, ``"val"`` or ``"test"`` (the file read under a root).
    """
    if spec.endswith(".txt"):
        root, listing = os.path.dirname(os.path.dirname(os.path.dirname(spec))), spec
    else:
        root, listing = spec, os.path.join(spec, "ImageSets", "Main", f"{split}.txt")
    if os.path.isfile(listing):
        with open(listing, encoding="utf-8") as handle:
            return root, [line.split()[0] for line in handle if line.strip()]
    if spec.endswith(".txt"):
        raise AnnotationError(f"{spec}: no such VOC split file")
    if split != "train":
        return None
    names = sorted(os.listdir(os.path.join(root, "Annotations")))
    return root, [n[:-4] for n in names if n.endswith(".xml")]


def _text(node: ET.Element, path: str) -> str:
    found = node.findtext(path)
    if found is None or not found.strip():
        raise ValueError(f"no <{path}>")
    return found.strip()


def _read(file: str) -> tuple[str, int, int, list[tuple[str, list[float], bool]]]:
    root = ET.parse(file).getroot()
    filename = root.findtext("filename")
    height, width = int(_text(root, "size/height")), int(_text(root, "size/width"))
    objects = []
    for k, obj in enumerate(root.iter("object")):
        try:
            name = _text(obj, "name")
            box = [float(_text(obj, f"bndbox/{c}")) for c in ("xmin", "ymin", "xmax", "ymax")]
            difficult = (obj.findtext("difficult") or "0").strip() == "1"
        except ValueError as exc:
            raise ValueError(f"object {k}: {exc}") from None
        objects.append((name, box, difficult))
    return (filename or "").strip(), height, width, objects


def parse_voc(
    root: str,
    ids: Sequence[str],
    *,
    classes: Sequence[str] | None = None,
    on_error: str = "raise",
) -> IndexBuilder:
    """Reads the annotations of ``ids`` under a VOC root.

    Args:
        root: The VOC root.
        ids: Image ids (file stems under ``Annotations/``).
        classes: The class names (of another split, or given); None: the names found,
            sorted.
        on_error: ``"raise"`` or ``"skip"`` (bad files and objects left out, counted).

    Returns:
        The builder, filled.
    """
    skipped: list[tuple[str, str]] = []
    problem = Problems(on_error, skipped)
    found = []
    for image_id in ids:
        file = os.path.join(root, "Annotations", f"{image_id}.xml")
        try:
            filename, height, width, objects = _read(file)
        except (OSError, ET.ParseError, ValueError) as exc:
            problem(file, f"cannot read the annotation: {exc}")
            continue
        image = os.path.join(root, "JPEGImages", filename or f"{image_id}.jpg")
        if not os.path.isfile(image):
            problem(file, f"image file {image} is missing")
            continue
        found.append((file, image, height, width, objects))
    if classes is None:
        classes = sorted({name for *_, objects in found for name, _, _ in objects})
    known = {name: label for label, name in enumerate(classes)}
    builder = IndexBuilder(classes, root)
    builder.skipped.extend(skipped)
    problem = Problems(on_error, builder.skipped)
    for number, (file, image, height, width, objects) in enumerate(found):
        position = builder.add_image(image, number, height, width)
        for k, (name, box, difficult) in enumerate(objects):
            if name not in known:
                problem(f"{file}: object {k}", f"class {name!r} is not among {list(classes)}")
                continue
            builder.add_object(position, box, known[name], crowd=difficult, annotation_id=k)
    return builder
