"""DetectionDataModule: object detection from COCO JSON, YOLO or Pascal VOC annotations.

The parts: the annotation index (:mod:`~datamodules.detection.index`, over the format
parsers) is parsed once into flat arrays and memory-mapped by every later setup, rank and
worker; the batch view (:mod:`~datamodules.detection.batches`) decodes images with the image
kinds' decoder and applies the rules and a joint transforms.v2 pipeline; the samplers
(:mod:`~datamodules.detection.grouping`) group training images by aspect ratio and give every
evaluation image once across ranks; splits, DDP shares, resume and the loaders are core's.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from datamodules.core.base import BaseDataModule
from datamodules.core.checks import (
    check_bool,
    check_choice,
    check_int,
    check_on_error,
    check_string,
    rejected,
)
from datamodules.core.hardware import AUTO
from datamodules.core.keywords import shared_arguments
from datamodules.core.samplers import IndexBatchSampler
from datamodules.core.skipped import Skipped
from datamodules.core.summary import counted
from datamodules.core.views import SplitView
from datamodules.detection.arrays import AnnotationIndex
from datamodules.detection.batches import CROWD, DetectionBatchView, default_transforms
from datamodules.detection.collate import (
    BATCH_FORMATS,
    collate_hf,
    collate_torchvision,
    collate_yolo,
)
from datamodules.detection.grouping import (
    ExactEvalSampler,
    GroupedBatchSampler,
    aspect_ratio_groups,
)
from datamodules.detection.index import load_index
from datamodules.detection.masks import require_pycocotools
from datamodules.detection.shard_index import (
    IMAGE_KEY,
    ShardImages,
    is_shard_spec,
    load_shard_index,
)
from datamodules.imaging.normalize import to_float
from datamodules.imaging.scaled import check_decode
from datamodules.imaging.transforms import IMAGENET_MEAN, IMAGENET_STD
from datamodules.remote.random_access import RandomAccessFiles
from datamodules.stream_parts.arguments import module_remote_options

__all__ = ["DetectionDataModule"]

Spec = str | os.PathLike


def _spec(value: Any, name: str) -> Any:
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and value:  # shards
        return [_spec(v, f"{name}[{k}]") for k, v in enumerate(value)]
    if not isinstance(value, (str, os.PathLike)):
        raise rejected(
            name, value, "a COCO JSON file, a YOLO data.yaml or folder, a VOC root, or tar / "
            "Parquet shards (a path, URL, pattern, folder or list)", TypeError,
        )  # fmt: skip
    return os.fspath(value)


class DetectionDataModule(BaseDataModule):
    """Object detection batches for torchvision's detection models:
    ``DetectionDataModule("annotations/train.json", "annotations/val.json")``.

    Subclass for a dataset of your own by overriding :meth:`load_annotations` (return an
    :class:`~datamodules.detection.arrays.AnnotationIndex` per split).

    Args:
        train: The train split: a COCO JSON file, a YOLO ``data.yaml`` (its ``val`` and
            ``test`` are the other splits unless given) or folder (``images/`` +
            ``labels/``), or a Pascal VOC root (``ImageSets/Main/train.txt``; ``val.txt``
            and ``test.txt`` the other splits unless given) or split file, or tar / Parquet
            shards of an image and a ``json`` of boxes per record (a path or ``http(s)://`` /
            ``s3://`` URL, a glob or brace pattern ``train-{000000..000003}.tar``, a folder or
            a list; the schema: :mod:`~datamodules.detection.shard_index`).
        val: The validation split, in any of those forms; None: the ``data.yaml``'s or VOC
            root's, else ``val_split`` of train.
        test: The test split, likewise (``test_split`` of train when none is found).
        images: The image folder of COCO files (default: each JSON file's folder), or one
            per split, ``{"train": "coco/train2017", "val": "coco/val2017"}``.
        classes: Class names in label order (default: the train split's categories by id,
            YOLO's ``names``, VOC's names sorted); other splits are mapped to them.
        batch_format: ``"torchvision"``: ``(images, targets)``, a list of ``(3, H, W)``
            images (``uint8`` from the loader, float in [0, 1] on the device) and a list of
            dicts (``boxes`` XYXY ``tv_tensors.BoundingBoxes``, ``labels`` int64 from 1,
            ``image_id``, ``iscrowd``, ``area``; ``crowd_boxes`` with ``crowd="ignore"``).
            ``"hf"``: ``pixel_values`` (padded), ``pixel_mask`` and ``labels`` as
            transformers' DETR-family processors give them. ``"yolo"``: letterboxed
            ``images`` (B, 3, S, S) and ``targets`` (M, 6) ``[batch_index, class, cx, cy, w,
            h]`` normalised, as Ultralytics' loaders give (see
            :mod:`~datamodules.detection.collate`).
        masks: Add each object's mask to the ``"torchvision"`` targets (``masks``, a
            ``tv_tensors.Mask`` (K, H, W), transformed with the image), decoded as
            pycocotools' ``annToMask`` decodes polygons and RLE (the ``detection`` extra).
            Without masks, COCO polygons are neither parsed, checked nor kept (the index of
            boxes is cached apart from the one with segmentations).
        image_size: ``"yolo"``'s letterbox side S (default 640; only for ``"yolo"``).
        min_size: The default transform's short side (None: images keep their size).
        max_size: The default transform's bound on the long side.
        group_by_aspect_ratio: Train batches hold images of one aspect-ratio group: True (two
            groups), an int ``k`` (``2k + 2`` groups, as torchvision's
            ``--aspect-ratio-group-factor``) or False.
        empty: ``"keep"`` or ``"drop"`` train images without objects (eval keeps all).
        crowd: ``"ignore"`` (crowd objects, and VOC's ``difficult``, in ``crowd_boxes``
            only), ``"drop"`` or ``"keep"`` (in ``boxes`` with ``iscrowd`` 1).
        transforms: A torchvision.transforms.v2 transform of ``(image, target)`` for
            training (default: resize by ``min_size`` / ``max_size``, then a horizontal flip).
        eval_transforms: The same for evaluation (default: the resize only).
        decode: ``"scaled"`` (default): a JPEG that the resize (``min_size`` / ``max_size``,
            or ``"yolo"``'s letterbox) shrinks 2x or more decodes at 1/2, 1/4 or 1/8 scale,
            its boxes and masks scaled by the factors applied; a custom transform gets full
            images unless it declares a ``decode_size``
            (:mod:`~datamodules.detection.scaling`). ``"full"``: every image in full.
        normalize: On the device, after scaling to [0, 1], also normalise with ImageNet's mean
            and std; None: only for ``"hf"`` (as its processors do; torchvision's models
            normalise inside, Ultralytics' take [0, 1]).
        on_error: ``"raise"`` or ``"skip"`` bad annotations (counted in :attr:`skipped`).
        cache: The folder of annotation indexes (default: ``.datamodules-detection/`` beside
            the annotations when writable, else ``$DATAMODULES_CACHE/detection``).
        image_key: Shards: the image member (tar extension, Parquet column), or alternatives
            tried in order, ``"jpg;png"``.
        storage_options: Passed to fsspec for remote shards (``http(s)://``, ``s3://``...;
            e.g. an S3 ``endpoint_url``); credentials are never saved.
        retries: Retries of a transient remote failure, with exponential backoff.
        timeout: Seconds a remote request may go without producing a byte.
        cache_dir: Keep remote shards in this directory (downloaded once, shared by processes
            and runs); None reads each image by a range request.
        cache_limit: Bytes (or a string such as ``"50GB"``) the cache may hold (LRU).
    """

    work = "decode"
    hparams_ignore = (*BaseDataModule.hparams_ignore, "transforms")

    def __init__(
        self,
        train: Spec | None = None,
        val: Spec | None = None,
        test: Spec | None = None,
        *,
        images: Spec | Mapping[str, Spec] | None = None,
        classes: list[str] | None = None,
        masks: bool = False,
        batch_format: str = "torchvision",
        image_size: int | None = None,
        min_size: int | None = None,
        max_size: int | None = None,
        group_by_aspect_ratio: bool | int = True,
        empty: str = "keep",
        crowd: str = "ignore",
        transforms: Callable[..., Any] | None = None,
        eval_transforms: Callable[..., Any] | None = None,
        decode: str = "scaled",
        normalize: bool | None = None,
        on_error: str = "raise",
        cache: Spec | None = None,
        image_key: str = IMAGE_KEY,
        storage_options: dict[str, Any] | None = None,
        retries: int = 5,
        timeout: float = 60.0,
        cache_dir: Spec | None = None,
        cache_limit: int | str | None = None,
        batch_size: int = 32,
        val_split: int | float = 0.1,
        test_split: int | float = 0.0,
        split_seed: int = 42,
        splits: Mapping[str, Any] | None = None,
        num_workers: int | str = AUTO,
        pin_memory: bool | str = AUTO,
        persistent_workers: bool | str = AUTO,
        prefetch_factor: int | str | None = AUTO,
        shuffle: bool = True,
        drop_last: bool = False,
        shuffle_seed: int | None = None,
        reuse_batch_memory: bool = True,
    ) -> None:
        super().__init__(**shared_arguments(locals()))
        self.train, self.val, self.test = (
            _spec(train, "train"),
            _spec(val, "val"),
            _spec(test, "test"),
        )
        if isinstance(images, Mapping):
            unknown = sorted(set(images) - {"train", "val", "test"})
            if unknown:
                raise rejected("images", dict(images), "a folder, or one per split (keys "
                               "'train', 'val', 'test')")  # fmt: skip
            self.images: Any = {k: _spec(v, f"images[{k!r}]") for k, v in images.items()}
        else:
            self.images = _spec(images, "images")
        self.cache = _spec(cache, "cache")
        overridden = type(self).load_annotations is not DetectionDataModule.load_annotations
        if self.train is None and not overridden:
            raise ValueError(
                "DetectionDataModule needs train= (a COCO JSON file, a YOLO data.yaml or "
                "folder, a VOC root), or a subclass overriding load_annotations()."
            )
        if classes is not None and not (
            isinstance(classes, (list, tuple)) and all(isinstance(c, str) for c in classes)
        ):
            raise rejected("classes", classes, "a list of class names or None", TypeError)
        check_choice(batch_format, "batch_format", BATCH_FORMATS)
        check_int(image_size, "image_size", 32, allow_none=True)
        check_bool(masks, "masks")
        if masks and batch_format != "torchvision":
            raise rejected(
                "masks", masks, f"False with batch_format={batch_format!r}: masks come in the "
                "'torchvision' format only so far",
            )  # fmt: skip
        if masks:
            require_pycocotools()
        if image_size is not None and batch_format != "yolo":
            raise rejected(
                "image_size", image_size, "None unless batch_format='yolo' (its letterbox "
                "side); resize other formats with min_size / max_size or transforms",
            )  # fmt: skip
        check_int(min_size, "min_size", 1, allow_none=True)
        check_int(max_size, "max_size", 1, allow_none=True)
        if not isinstance(group_by_aspect_ratio, bool):
            check_int(group_by_aspect_ratio, "group_by_aspect_ratio", 1)
        check_choice(empty, "empty", ("keep", "drop"))
        check_choice(crowd, "crowd", CROWD)
        for name, value in (("transforms", transforms), ("eval_transforms", eval_transforms)):
            if value is not None and not callable(value):
                raise rejected(name, value, "a transforms.v2 transform or None", TypeError)
        check_decode(decode)
        if normalize is not None:
            check_bool(normalize, "normalize")
        check_on_error(on_error)
        self.classes_given = None if classes is None else list(classes)
        self.batch_format, self.min_size, self.max_size = batch_format, min_size, max_size
        self.group_by_aspect_ratio, self.empty, self.crowd = group_by_aspect_ratio, empty, crowd
        self.transforms, self.eval_transforms = transforms, eval_transforms
        self.masks, self.decode = masks, decode
        self.image_size = 640 if image_size is None and batch_format == "yolo" else image_size
        self.normalize = batch_format == "hf" if normalize is None else normalize
        self.on_error = on_error
        self.indexes: dict[str, AnnotationIndex] = {}
        check_string(image_key, "image_key", "member names such as 'jpg' or 'jpg;png'")
        self.image_key = tuple(k for k in image_key.split(";") if k)
        remote, limit = module_remote_options(
            self, storage_options, retries, timeout, cache_dir, cache_limit
        )
        #: Reads shards, local or remote (the remote options of streams).
        self.files = RandomAccessFiles(remote, cache_dir, limit)
        #: Train images left out by ``empty="drop"``.
        self.empty_dropped = 0

    # ------------------------------------------------------------------ extension point
    def load_annotations(self, split: str, classes: list[str] | None) -> AnnotationIndex | None:
        """Returns the annotation index of ``split`` (``"train"``, ``"val"``, ``"test"``), or
        None when the split has no source of its own. Override it for a dataset of your own
        (build one with :class:`~datamodules.detection.arrays.IndexBuilder`).

        Args:
            split: The split.
            classes: The class names the labels must follow (the train split's, for the
                others; the ``classes`` argument's, or None, for train).
        """
        given = {"train": self.train, "val": self.val, "test": self.test}[split]
        spec = given if given is not None else self.train
        if spec is None:
            return None
        implicit = given is None
        if is_shard_spec(spec):
            return None if implicit else load_shard_index(
                spec, split, image_key=self.image_key, classes=classes, on_error=self.on_error,
                cache=self.cache, files=self.files,
            )  # fmt: skip
        if implicit and not spec.endswith((".yaml", ".yml")) and not _is_voc(spec):
            return None
        return load_index(
            spec, split, images=self.images.get(split) if isinstance(self.images, dict) else
            self.images, classes=classes, on_error=self.on_error,
            cache=self.cache, segmentations=self.masks,
        )  # fmt: skip

    # ------------------------------------------------------------------ setup
    def build_dataset(self) -> AnnotationIndex:
        """Maps (or parses, once) the train split's index, then the others'."""
        train = self.load_annotations("train", self.classes_given)
        if train is None:
            raise ValueError("load_annotations('train', ...) returned None: no train split.")
        self.indexes = {"train": train}
        for split in ("val", "test"):
            found = self.load_annotations(split, train.classes)
            if found is not None:
                self.indexes[split] = found
        return train

    def split_sources(self) -> dict[str, AnnotationIndex]:
        return {k: v for k, v in self.indexes.items() if k != "train"}

    @property
    def classes(self) -> list[str]:
        """Class names; a ``"torchvision"`` label ``l`` names ``classes[l - 1]``."""
        self._require_setup()
        return list(self.indexes["train"].classes)

    @property
    def num_classes(self) -> int:
        """A model's ``num_classes``: with ``"torchvision"`` the classes plus the background
        (label 0), else the classes."""
        return len(self.classes) + (self.batch_format == "torchvision")

    # ------------------------------------------------------------------ views and samplers
    def transform_for(self, split: str) -> Callable[..., Any] | None:
        given = self.transforms if split == "train" else self.eval_transforms
        if given is not None:
            return given
        return default_transforms(split == "train", self.min_size, self.max_size)

    def make_view(self, split: str, dataset: Any, indices: torch.Tensor) -> SplitView:
        if split == "train" and self.empty == "drop":
            counts = torch.from_numpy(np.asarray(dataset.counts(crowd=self.crowd == "keep")))
            keep = counts[indices] > 0
            self.empty_dropped = int((~keep).sum())
            indices = indices[keep]
        collate: Any = collate_torchvision
        if self.batch_format == "hf":
            collate = collate_hf
        elif self.batch_format == "yolo":
            collate = functools.partial(collate_yolo, size=self.image_size)
        return DetectionBatchView(
            dataset, indices, self.transform_for(split), crowd=self.crowd, collate=collate,
            masks=self.masks, read_image=self.shard_images(dataset), decode=self.decode,
            letterbox=self.image_size if self.batch_format == "yolo" else None,
        )  # fmt: skip

    def shard_images(self, index: AnnotationIndex) -> ShardImages | None:
        """What reads the images of an index built from shards (None: image files)."""
        return ShardImages(self.files) if index.meta.get("images") == "shards" else None

    def make_sampler(self, split: str, view: SplitView, rank: int, world: int) -> IndexBatchSampler:
        common = {"seed": self.shuffle_seed, "num_replicas": world, "rank": rank}
        if split != "train":
            return ExactEvalSampler(len(view), self.batch_size, shuffle=False, **common)
        if self.group_by_aspect_ratio is False:
            return super().make_sampler(split, view, rank, world)
        assert isinstance(view, DetectionBatchView)
        factor = 0 if self.group_by_aspect_ratio is True else int(self.group_by_aspect_ratio)
        ratios = view.index.aspect_ratios()[view.indices.numpy()]
        groups = torch.from_numpy(aspect_ratio_groups(ratios, factor))
        return GroupedBatchSampler(
            groups, self.batch_size, shuffle=self.shuffle, drop_last=self.drop_last, **common
        )

    # ------------------------------------------------------------------ on the device
    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """``uint8`` images to float in [0, 1] (normalised with ``normalize``), on the device."""
        mean, std = (IMAGENET_MEAN, IMAGENET_STD) if self.normalize else (None, None)
        if self.batch_format == "hf":
            return {**batch, "pixel_values": to_float(batch["pixel_values"], mean, std)}
        if self.batch_format == "yolo":
            return {**batch, "images": to_float(batch["images"], mean, std)}
        images, targets = batch
        return [to_float(image.unsqueeze(0), mean, std)[0] for image in images], targets

    # ------------------------------------------------------------------ reports
    @property
    def skipped(self) -> Skipped:
        """Bad annotations and images left out under ``on_error="skip"``."""
        skipped = Skipped()
        for index in self.indexes.values():
            for where, why in index.meta.get("skipped", []):
                skipped.record(where.split(": ")[0], where.partition(": ")[2] or None, why)
        return skipped

    def degenerate_boxes(self) -> dict[str, int]:
        """Per split, boxes left out while indexing because they had no area in their image."""
        self._require_setup()
        return {
            split: int(index.meta.get("degenerate", 0)) for split, index in self.indexes.items()
        }

    def describe_data(self) -> list[str]:
        """Per split, its images and objects, and the objects of each class (for
        ``python -m datamodules inspect``)."""
        indices = self._require_setup()
        lines = []
        for split in ("train", "val", "test"):
            index = self.split_datasets[split]
            chosen = indices[split].numpy()
            objects = int(np.asarray(index.counts())[chosen].sum())
            images = counted(len(chosen), "image")
            lines.append(f"  {split}: {images}, {counted(objects, 'object')}")
        train = self.split_datasets["train"]
        rows = np.concatenate(
            [np.arange(train.offsets[i], train.offsets[i + 1]) for i in indices["train"].numpy()]
            or [np.zeros(0, dtype=np.int64)]
        )
        per_class = np.bincount(np.asarray(train.labels)[rows], minlength=len(self.classes))
        lines.append(
            "  train objects per class: "
            + ", ".join(f"{name} {int(n)}" for name, n in zip(self.classes, per_class, strict=True))
        )
        return lines

    def extra_summary(self) -> list[str]:
        """The annotations of each split and the rules."""
        lines = [
            f"  batches: {self.batch_format!r}; crowd {self.crowd!r}, empty {self.empty!r}, "
            f"aspect-ratio groups {self.group_by_aspect_ratio!r}; decode {self.decode!r}"
        ]
        for split, index in self.indexes.items():
            lines.append(
                f"  {split}: {counted(len(index), 'image')}, "
                f"{counted(index.num_objects, 'object')} ({index.meta.get('source')})"
            )
        if self.indexes:
            lines.append(f"  classes: {len(self.classes)}")
            dropped = sum(self.degenerate_boxes().values())
            if dropped:
                lines.append(f"  boxes without area left out: {dropped}")
        if self.empty_dropped:
            lines.append(f"  train images without objects left out: {self.empty_dropped}")
        return lines


def _is_voc(spec: str) -> bool:
    return os.path.isdir(os.path.join(spec, "Annotations")) or spec.endswith(".txt")
