"""The image / mask pairs of a segmentation split, found once at setup from folders or a VOC root.

:func:`load_pairs` turns a split's spec into a :class:`SegmentationIndex` (two NumPy string
arrays, the image and the mask of each sample, so that DataLoader workers share them without
per-sample Python objects):

* a pair ``(image_folder, mask_folder)``: images (any format the image decoder reads) and
  class masks (PNG, or another lossless format) matched by their path below their folder
  without the extension (``a/b.jpg`` pairs with ``a/b.png``); a stem on one side only, two
  files of one stem, or a lossy (JPEG) mask is a problem named with its file;
* a Pascal VOC root (``ImageSets/Segmentation/<split>.txt``, ``JPEGImages/<id>.jpg``,
  ``SegmentationClass/<id>.png``) or one of its split files; a listed id whose image or mask
  is missing is a problem named with the file.

Problems raise :class:`~datamodules.detection.problems.AnnotationError` or, under
``on_error="skip"``, leave the sample out and are listed in the index's ``skipped``. Only
file names are read here: pixels, sizes and mask values are checked when a batch reads them.

Shards (tar / Parquet records holding an image and a mask member) give an index of the same
interface whose paths are member references (:mod:`~datamodules.detection.segmentation_shards`
reads them; :func:`is_shard_split` tells their specs from the others).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from datamodules.core.checks import rejected
from datamodules.detection.problems import AnnotationError, Problems
from datamodules.imaging.decoding import DECODABLE
from datamodules.shards.member_records import MemberRef
from datamodules.shards.member_shards import is_member_spec

__all__ = [
    "MASK_EXTENSIONS",
    "SegmentationIndex",
    "check_split_spec",
    "is_shard_split",
    "is_voc_segmentation",
    "load_pairs",
    "pair_folders",
    "voc_pairs",
]

#: Lossless formats a class mask may be stored in (PNG is what everyone uses).
MASK_EXTENSIONS = (".png", ".bmp", ".tif", ".tiff", ".pgm", ".gif")
#: Lossy formats refused for masks: compression changes class values at edges.
LOSSY = (".jpg", ".jpeg", ".webp")
#: Sub-folders of a VOC root: a folder holding one is not a folder of shards.
LAYOUTS = ("ImageSets", "SegmentationClass", "JPEGImages")

ACCEPTED = (
    "a pair (image_folder, mask_folder), a Pascal VOC root (or its split .txt file), or tar / "
    "Parquet shards (a path, URL, glob or brace pattern, folder, *.index.json or list)"
)

#: A folder pair (a tuple), shards (a list, or a string naming them) or a VOC root / file.
Spec = str | tuple[str, str] | list[str]


class SegmentationIndex:
    """The samples of a split: an image and a mask each, as file paths or (from shards) as
    :meth:`~datamodules.shards.member_records.MemberRef.encode` strings.

    Args:
        images: Image paths (or member references).
        masks: Mask paths (or member references), one per image.
        source: What the pairs were read from (for summaries).
        skipped: ``(where, why)`` of the samples left out under ``on_error="skip"``.
        versions: From shards: ``{shard: (version, size)}`` of the remote ones, as indexed
            (an empty dict for local shards); None: the paths are files.
    """

    def __init__(
        self,
        images: Sequence[str],
        masks: Sequence[str],
        source: str,
        skipped: list[tuple[str, str]] | None = None,
        versions: dict[str, tuple[str | None, int | None]] | None = None,
    ) -> None:
        if len(images) != len(masks):
            raise ValueError(f"{len(images)} images but {len(masks)} masks")
        self.images = np.asarray(list(images), dtype=str)
        self.masks = np.asarray(list(masks), dtype=str)
        self.source = source
        self.skipped = list(skipped or [])
        self.versions = versions

    def __len__(self) -> int:
        return len(self.images)

    @property
    def from_shards(self) -> bool:
        """Whether the paths are member references into shards."""
        return self.versions is not None

    def image_path(self, i: int) -> str:
        """The image file of sample ``i`` (its member reference, from shards)."""
        return str(self.images[i])

    def mask_path(self, i: int) -> str:
        """The mask file of sample ``i`` (its member reference, from shards)."""
        return str(self.masks[i])

    def image_name(self, i: int) -> str:
        """How messages name image ``i``: its file, or ``"shard.tar: key 'k' (.jpg)"``."""
        path = self.image_path(i)
        return MemberRef.decode(path).where if self.from_shards else path

    def __repr__(self) -> str:
        return f"SegmentationIndex({len(self)} pairs from {self.source})"


def is_shard_split(spec: Spec) -> bool:
    """Whether a spec :func:`check_split_spec` gave names shards (a list, or a path, URL or
    pattern of shards; a folder of shards that is no VOC root)."""
    return isinstance(spec, list) or (isinstance(spec, str) and is_member_spec(spec, LAYOUTS))


def is_voc_segmentation(path: str) -> bool:
    """Whether ``path`` is a VOC root with segmentation splits (``ImageSets/Segmentation``)."""
    return os.path.isdir(os.path.join(path, "ImageSets", "Segmentation"))


def check_split_spec(value: Any, name: str) -> Spec | None:
    """``value`` as a split spec, or None: a tuple of two folders, a list of shards (a list or
    tuple of which an entry names shards), or a path string (a VOC root or split file, or
    shards).

    Raises:
        TypeError: Anything else, naming ``name``.
    """
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    if (
        isinstance(value, (tuple, list))
        and value
        and all(isinstance(v, (str, os.PathLike)) for v in value)
    ):
        items = [os.fspath(v) for v in value]
        if any(is_member_spec(v, LAYOUTS) for v in items):
            return items  # shards (an entry that names none is refused when they are listed)
        if len(items) == 2:
            return items[0], items[1]
    raise rejected(name, value, ACCEPTED, TypeError)


def _files(folder: str, extensions: tuple[str, ...]) -> dict[str, list[str]]:
    """``{stem below folder: [files]}`` of the files with one of ``extensions``, sorted."""
    found: dict[str, list[str]] = {}
    for base, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            stem, ext = os.path.splitext(name)
            if ext.lower() in extensions and not name.startswith("."):
                rel = os.path.relpath(os.path.join(base, stem), folder)
                found.setdefault(rel.replace(os.sep, "/"), []).append(os.path.join(base, name))
    return found


def pair_folders(
    image_folder: str, mask_folder: str, on_error: str = "raise", name: str = "train"
) -> SegmentationIndex:
    """The pairs of an image folder and a mask folder, matched by stem (see the module).

    Args:
        image_folder: The images.
        mask_folder: The class masks.
        on_error: ``"raise"`` or ``"skip"`` (counted in ``skipped``).
        name: The argument the folders came from, for messages.
    """
    for folder in (image_folder, mask_folder):
        if not os.path.isdir(folder):
            raise rejected(name, (image_folder, mask_folder), f"{ACCEPTED}: {folder!r} is "
                           "not a folder")  # fmt: skip
    skipped: list[tuple[str, str]] = []
    problems = Problems(on_error, skipped)
    images = _files(image_folder, DECODABLE)
    masks = _files(mask_folder, MASK_EXTENSIONS + LOSSY)
    unmatched = sorted(set(images) ^ set(masks))
    if unmatched and on_error == "raise":
        lonely = [images.get(s, masks.get(s, [s]))[0] for s in unmatched]
        shown = ", ".join(lonely[:5]) + (f" and {len(lonely) - 5} more" if len(lonely) > 5 else "")
        raise AnnotationError(
            f"{len(lonely)} file(s) have no partner of the same stem in {image_folder} / "
            f"{mask_folder}: {shown} (on_error='skip' leaves them out, counted)"
        )
    pairs_i, pairs_m = [], []
    for stem in sorted(set(images) | set(masks)):
        image, mask = images.get(stem, []), masks.get(stem, [])
        if not image or not mask:
            side = "an image without a mask" if image else "a mask without an image"
            problems((image or mask)[0], f"{side} (stem {stem!r})")
        elif len(image) > 1 or len(mask) > 1:
            problems((image + mask)[0], f"stem {stem!r} has several files: {image + mask}")
        elif mask[0].lower().endswith(LOSSY):
            problems(mask[0], "a mask in a lossy format (JPEG/WebP changes class values): use PNG")
        else:
            pairs_i.append(image[0])
            pairs_m.append(mask[0])
    return SegmentationIndex(pairs_i, pairs_m, f"{image_folder} + {mask_folder}", skipped)


def voc_pairs(spec: str, split: str, on_error: str = "raise") -> SegmentationIndex | None:
    """The pairs of a VOC root's ``ImageSets/Segmentation/<split>.txt`` (or of the split file
    ``spec``); None when a root has no file for ``split``."""
    if spec.endswith(".txt"):
        root, listing = os.path.dirname(os.path.dirname(os.path.dirname(spec))), spec
        if not os.path.isfile(listing):
            raise AnnotationError(f"{spec}: no such VOC split file")
    else:
        root, listing = spec, os.path.join(spec, "ImageSets", "Segmentation", f"{split}.txt")
        if not os.path.isfile(listing):
            return None
    with open(listing, encoding="utf-8") as handle:
        ids = [line.split()[0] for line in handle if line.strip()]
    skipped: list[tuple[str, str]] = []
    problems = Problems(on_error, skipped)
    images, masks = [], []
    for line, sample in enumerate(ids, 1):
        image = os.path.join(root, "JPEGImages", f"{sample}.jpg")
        mask = os.path.join(root, "SegmentationClass", f"{sample}.png")
        missing = [p for p in (image, mask) if not os.path.isfile(p)]
        if missing:
            problems(f"{listing}: line {line}", f"id {sample!r}: no such file {missing[0]}")
            continue
        images.append(image)
        masks.append(mask)
    return SegmentationIndex(images, masks, listing, skipped)


def load_pairs(
    spec: Spec, split: str, on_error: str = "raise", *, implicit: bool = False
) -> SegmentationIndex | None:
    """The index of ``split`` from a spec :func:`check_split_spec` accepted, other than
    shards (:func:`~datamodules.detection.segmentation_shards.load_shard_pairs` reads those).

    Args:
        spec: A folder pair, a VOC root or a VOC split file.
        split: ``"train"``, ``"val"`` or ``"test"`` (the file read under a VOC root).
        on_error: ``"raise"`` or ``"skip"``.
        implicit: ``spec`` is the train split's, asked for another split: only a VOC root
            gives one (its ``<split>.txt``); None otherwise.
    """
    if isinstance(spec, tuple):
        return None if implicit else pair_folders(*spec, on_error=on_error, name=split)
    if implicit and (spec.endswith(".txt") or not is_voc_segmentation(spec)):
        return None
    if spec.endswith(".txt") or is_voc_segmentation(spec):
        found = voc_pairs(spec, split, on_error)
        if found is None and split == "train":
            raise AnnotationError(f"{spec}: no ImageSets/Segmentation/train.txt")
        return found
    raise rejected(split, spec, f"{ACCEPTED} (no ImageSets/Segmentation found there)")
