"""The annotation index of a detection dataset as flat arrays: written once, memory-mapped.

An :class:`AnnotationIndex` holds, for ``N`` images and ``M`` objects, a handful of NumPy
arrays and no per-object Python: image paths (one byte buffer and offsets), image ids, sizes,
``offsets`` (``N + 1``: image ``i``'s objects are rows ``offsets[i]:offsets[i + 1]``), boxes
(``M x 4`` XYXY pixels, float32), contiguous labels, crowd flags, annotation ids, and each
object's segmentation (a polygon list or an RLE as JSON bytes, kept for masks; an index
built for boxes only has none, ``meta["segmentations"]`` False). Forked or
spawned DataLoader workers and DDP ranks map the same files, so reading an object never
touches a Python refcount (the copy-on-read growth of lists of dicts).

:class:`IndexBuilder` collects what a format parser (:mod:`~datamodules.detection.coco`,
:mod:`~datamodules.detection.yolo`, :mod:`~datamodules.detection.voc`) finds and writes it
with :meth:`IndexBuilder.write` (or builds the arrays in bulk, :class:`IndexArrays`);
:meth:`AnnotationIndex.open` maps it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["FORMAT_VERSION", "AnnotationIndex", "IndexArrays", "IndexBuilder"]

#: Bumped when the files of an index change, so that an older cache is rebuilt.
FORMAT_VERSION = 2

_ARRAYS = (
    "path_bytes", "path_offsets", "image_ids", "heights", "widths", "offsets", "boxes",
    "labels", "crowd", "annotation_ids", "segm_bytes", "segm_offsets",
)  # fmt: skip


def _packed(items: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in items], out=offsets[1:])
    return np.frombuffer(b"".join(items), dtype=np.uint8), offsets


def _dumps(value: Any) -> bytes:
    """JSON bytes: orjson's encoder when installed (about 10x faster on polygons)."""
    if _orjson is not None:
        return _orjson.dumps(value)
    return json.dumps(value).encode()


try:
    import orjson as _orjson
except ImportError:  # the stdlib's json: slower, the same values
    _orjson = None


class IndexBuilder:
    """Collects images and objects while a parser reads annotations; writes the index.

    Boxes are clipped to their image, and a box with no area after clipping is left out and
    counted (``degenerate``). Each problem a parser tolerates (``on_error="skip"``) is kept
    in ``skipped`` as ``(where, why)``.

    Args:
        classes: The class names, by contiguous label.
        source: What the index was read from (said in the summary).
    """

    def __init__(self, classes: Sequence[str], source: str) -> None:
        self.classes = [str(c) for c in classes]
        self.source = source
        self.paths: list[bytes] = []
        self.image_ids: list[int] = []
        self.sizes: list[tuple[int, int]] = []
        self.counts: list[int] = []
        self.boxes: list[tuple[float, float, float, float]] = []
        self.labels: list[int] = []
        self.crowd: list[bool] = []
        self.annotation_ids: list[int] = []
        self.segmentations: list[bytes] = []
        self.skipped: list[tuple[str, str]] = []
        self.degenerate = 0

    def add_image(self, path: str, image_id: int, height: int, width: int) -> int:
        """Adds an image without objects; returns its position."""
        self.paths.append(os.fsencode(path))
        self.image_ids.append(int(image_id))
        self.sizes.append((int(height), int(width)))
        self.counts.append(0)
        return len(self.paths) - 1

    def add_object(
        self,
        image: int,
        box: Sequence[float],
        label: int,
        *,
        crowd: bool = False,
        annotation_id: int = -1,
        segmentation: Any = None,
    ) -> bool:
        """Adds an object (XYXY pixels) to the image last added, ``image``; returns False when
        its box, clipped to the image, has no area (counted in ``degenerate``)."""
        if image != len(self.paths) - 1:
            raise ValueError("objects are added to the image added last")
        height, width = self.sizes[image]
        x1, y1, x2, y2 = (float(v) for v in box)
        x1, x2 = min(max(x1, 0.0), width), min(max(x2, 0.0), width)
        y1, y2 = min(max(y1, 0.0), height), min(max(y2, 0.0), height)
        if x2 <= x1 or y2 <= y1:
            self.degenerate += 1
            return False
        self.boxes.append((x1, y1, x2, y2))
        self.labels.append(int(label))
        self.crowd.append(bool(crowd))
        self.annotation_ids.append(int(annotation_id))
        text = b"" if segmentation is None else _dumps(segmentation)
        self.segmentations.append(text)
        self.counts[image] += 1
        return True

    def arrays(self) -> IndexArrays:
        """What was collected, as the index's arrays (:meth:`IndexArrays.write` writes them)."""
        path_bytes, path_offsets = _packed(self.paths)
        segm_bytes, segm_offsets = _packed(self.segmentations)
        offsets = np.zeros(len(self.counts) + 1, dtype=np.int64)
        np.cumsum(self.counts, out=offsets[1:])
        sizes = np.asarray(self.sizes, dtype=np.int32).reshape(-1, 2)
        arrays = {
            "path_bytes": path_bytes,
            "path_offsets": path_offsets,
            "image_ids": np.asarray(self.image_ids, dtype=np.int64),
            "heights": sizes[:, 0],
            "widths": sizes[:, 1],
            "offsets": offsets,
            "boxes": np.asarray(self.boxes, dtype=np.float32).reshape(-1, 4),
            "labels": np.asarray(self.labels, dtype=np.int64),
            "crowd": np.asarray(self.crowd, dtype=np.bool_),
            "annotation_ids": np.asarray(self.annotation_ids, dtype=np.int64),
            "segm_bytes": segm_bytes,
            "segm_offsets": segm_offsets,
        }
        info = {"source": self.source, "skipped": [list(p) for p in self.skipped],
                "degenerate": self.degenerate}  # fmt: skip
        return IndexArrays(self.classes, arrays, info)

    def write(self, directory: str, meta: dict[str, Any] | None = None) -> AnnotationIndex:
        """Writes the index into ``directory`` (:meth:`IndexArrays.write`)."""
        return self.arrays().write(directory, meta)


class IndexArrays:
    """An index's arrays before they are written: what :meth:`IndexBuilder.arrays` gives, or
    what a parser builds in bulk (the COCO parser's vectorised path).

    Args:
        classes: The class names, by contiguous label.
        arrays: One array per name of the index (``path_bytes`` ... ``segm_offsets``).
        info: What ``meta.json`` records besides the classes (``source``, ``skipped``,
            ``degenerate``, ...).
    """

    def __init__(
        self, classes: Sequence[str], arrays: dict[str, np.ndarray], info: dict[str, Any]
    ) -> None:
        missing = sorted(set(_ARRAYS) - set(arrays))
        if missing:
            raise ValueError(f"an index needs the arrays {missing}")
        self.classes = [str(c) for c in classes]
        self.arrays = arrays
        self.info = info

    def write(self, directory: str, meta: dict[str, Any] | None = None) -> AnnotationIndex:
        """Writes the arrays and ``meta.json`` into ``directory`` (created, or replaced; its
        parent must exist), renamed into place when complete; returns the index, mapped."""
        partial = f"{directory}.partial-{os.getpid()}"
        os.makedirs(partial, exist_ok=True)
        for name in _ARRAYS:
            array = np.ascontiguousarray(self.arrays[name])
            np.save(os.path.join(partial, f"{name}.npy"), array)
        info = {"version": FORMAT_VERSION, "classes": self.classes, **self.info, **(meta or {})}
        with open(os.path.join(partial, "meta.json"), "w", encoding="utf-8") as handle:
            json.dump(info, handle)
        if os.path.isdir(directory):  # an older index of the same name: replaced
            shutil.rmtree(directory)
        os.replace(partial, directory)
        return AnnotationIndex.open(directory)


class AnnotationIndex:
    """A detection dataset's annotations, memory-mapped from the files an
    :class:`IndexBuilder` wrote (:meth:`open`).

    ``len(index)`` is the number of images; :meth:`objects` gives one image's rows.

    Attributes:
        classes: Class names by label.
        meta: What ``meta.json`` holds (source, skipped problems, degenerate boxes dropped).
        path: The index's directory.
    """

    def __init__(self, path: str, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        self.path = path
        self.meta = meta
        self.classes: list[str] = list(meta["classes"])
        for name in _ARRAYS:
            setattr(self, name, arrays[name])

    @classmethod
    def open(cls, path: str) -> AnnotationIndex:
        """Maps the index at ``path`` (read-only, shared by every process that maps it)."""
        with open(os.path.join(path, "meta.json"), encoding="utf-8") as handle:
            meta = json.load(handle)
        arrays = {}
        for name in _ARRAYS:
            file = os.path.join(path, f"{name}.npy")
            # np.load refuses to map an empty array: those are read (they are empty).
            array = np.load(file, mmap_mode="r") if os.path.getsize(file) > 128 else np.load(file)
            # A plain view of the mapping (which it keeps alive): slicing a np.memmap makes
            # memmap objects, about 6 us each, a dozen times an image.
            arrays[name] = array.view(np.ndarray)
        return cls(path, arrays, meta)

    def __len__(self) -> int:
        return len(self.image_ids)

    def __getstate__(self) -> dict[str, Any]:  # spawned workers map the files again
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        other = AnnotationIndex.open(state["path"])
        self.__dict__.update(other.__dict__)

    @property
    def num_objects(self) -> int:
        """Objects over all images."""
        return len(self.labels)

    def image_path(self, i: int) -> str:
        """The file of image ``i``."""
        start, end = int(self.path_offsets[i]), int(self.path_offsets[i + 1])
        return os.fsdecode(self.path_bytes[start:end].tobytes())

    def rows(self, i: int) -> slice:
        """The object rows of image ``i``."""
        return slice(int(self.offsets[i]), int(self.offsets[i + 1]))

    def objects(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Image ``i``'s boxes (K x 4 XYXY pixels), labels and crowd flags (copies)."""
        rows = self.rows(i)
        return (
            np.array(self.boxes[rows], dtype=np.float32),
            np.array(self.labels[rows], dtype=np.int64),
            np.array(self.crowd[rows], dtype=np.bool_),
        )

    def segmentation(self, row: int) -> Any:
        """Object ``row``'s segmentation as its annotation gave it (polygons or an RLE), or
        None."""
        if self.meta.get("segmentations") is False:
            raise ValueError(
                f"{self.path}: this index was built without segmentations (masks=False); "
                "DetectionDataModule(masks=True) builds one with them"
            )
        start, end = int(self.segm_offsets[row]), int(self.segm_offsets[row + 1])
        return json.loads(self.segm_bytes[start:end].tobytes()) if end > start else None

    def counts(self, *, crowd: bool = True) -> np.ndarray:
        """Objects per image (without crowd objects when ``crowd`` is False)."""
        per_image = np.diff(self.offsets)
        if crowd or not len(self.crowd):
            return per_image
        image_of = np.repeat(np.arange(len(self)), per_image)
        crowded = np.bincount(image_of[np.asarray(self.crowd)], minlength=len(self))
        return per_image - crowded

    def aspect_ratios(self) -> np.ndarray:
        """Width over height of every image."""
        return np.asarray(self.widths, dtype=np.float64) / np.maximum(self.heights, 1)

    def nbytes(self) -> int:
        """The bytes of all the arrays."""
        return sum(getattr(self, name).nbytes for name in _ARRAYS)

    def __repr__(self) -> str:
        return (
            f"AnnotationIndex({len(self)} images, {self.num_objects} objects, "
            f"{len(self.classes)} classes, from {self.meta.get('source')!r})"
        )
