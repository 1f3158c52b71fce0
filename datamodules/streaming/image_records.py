"""Image records on the fast image path: what ``StreamingDataModule(image_key=...)`` adds.

:class:`StreamImages` is mixed into :class:`~datamodules.StreamingDataModule`. With
``image_key`` set, each record's encoded image is decoded, transformed and written into a
uint8 batch in the workers (:class:`~datamodules.streaming.image_batches.ImageRecordCollate`),
exactly as :class:`~datamodules.ImageFolderDataModule` does with files: the same decoder, the
same default transforms (RandomResizedCrop + flip to train, Resize + CenterCrop to evaluate)
and ``train_transforms`` / ``eval_transforms`` overrides on uint8 ``(3, H, W)`` tensors, the
same reused shared-memory batch slots, and float conversion and normalisation on the device
in :meth:`StreamImages.on_after_batch_transfer`. ``num_workers="auto"`` counts this as decode
work. ``transform=`` still acts on the records, before decoding.

This module also checks the image arguments (:func:`check_image_records`) and gives
``num_classes`` / ``classes`` and the images' lines of the summary.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from datamodules.imaging.batches import SkipLog
from datamodules.imaging.scaled import check_decode, decoding_summary
from datamodules.imaging.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    as_height_width,
    check_image_arguments,
    default_eval_transforms,
    default_train_transforms,
    to_float,
)
from datamodules.shards.errors import SkipCounter
from datamodules.shards.parquet import read_parquet
from datamodules.shards.tar import read_tar
from datamodules.streaming.image_batches import ImageRecordCollate, TaggedReader

__all__ = ["StreamImages", "check_image_records"]

_DEFAULTS = {"label_key": "cls", "classes": None, "image_size": 224, "normalize": True,
             "decode": "scaled"}  # fmt: skip


def _image_keys(image_key: Any) -> tuple[str, ...]:
    keys = tuple(k.strip() for k in image_key.split(";")) if isinstance(image_key, str) else ()
    if not keys or not all(keys) or len(set(keys)) != len(keys):
        raise ValueError(
            f"image_key={image_key!r} is not accepted: use a field name such as 'jpg', or "
            "alternatives tried in order, 'jpg;png;webp'."
        )
    return keys


def check_image_records(
    image_key: Any,
    label_key: Any,
    classes: Any,
    image_size: Any,
    normalize: Any,
    mean: Any,
    std: Any,
    collate: Any,
    decode: Any = "scaled",
) -> tuple[tuple[str, ...], list[str] | None]:
    """Checks the image arguments; returns the image field's alternatives and the classes.

    Raises:
        ValueError, TypeError: A bad value, naming the argument and what is accepted; an
            image argument given without ``image_key``; ``collate`` with ``image_key``.
    """
    if image_key is None:
        given = {"label_key": label_key, "classes": classes, "image_size": image_size,
                 "normalize": normalize, "decode": decode}  # fmt: skip
        changed = [k for k, v in given.items() if v != _DEFAULTS[k]]
        changed += [k for k, v, d in (("mean", mean, IMAGENET_MEAN), ("std", std, IMAGENET_STD))
                    if not isinstance(v, Sequence) or tuple(v) != d]  # fmt: skip
        if changed:
            raise ValueError(
                f"{', '.join(changed)} apply to image records: give image_key= too (the "
                "field holding each record's encoded image, e.g. 'jpg')."
            )
        return (), None
    keys = _image_keys(image_key)
    if label_key is not None and (not isinstance(label_key, str) or not label_key):
        raise ValueError(f"label_key={label_key!r} is not accepted: use a field name or None.")
    if label_key in keys:
        raise ValueError(f"label_key={label_key!r} is also in image_key={image_key!r}.")
    names = None
    if classes is not None:
        if isinstance(classes, str) or not isinstance(classes, Sequence) or not classes:
            raise TypeError(f"classes={classes!r} is not accepted: use a list of class names.")
        names = list(classes)
        if not all(isinstance(c, str) for c in names) or len(set(names)) != len(names):
            raise ValueError(
                f"classes={classes!r} is not accepted: give each class name once, as a str."
            )
        if label_key is None:
            raise ValueError("classes= maps labels to indices: it needs label_key= too.")
    check_image_arguments(image_size, mean, std)
    check_decode(decode)
    if not isinstance(normalize, bool):
        raise TypeError(f"normalize={normalize!r} is not accepted: use True or False.")
    if collate is not None:
        raise ValueError(
            "collate= does not apply with image_key=: image records are batched as "
            "(images, labels), or as a dict with label_key=None; transform= reaches the "
            "records before that."
        )
    return keys, names


def _is_uint8(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == torch.uint8


class StreamImages:
    """The image records of :class:`~datamodules.StreamingDataModule` (a mixin)."""

    image_key: str | None
    on_error: str
    _skips: SkipCounter

    def _init_images(
        self, image_key: Any, label_key: Any, classes: Any, image_size: Any, normalize: Any,
        mean: Any, std: Any, collate: Any, decode: Any = "scaled",
    ) -> None:  # fmt: skip
        keys, names = check_image_records(
            image_key, label_key, classes, image_size, normalize, mean, std, collate, decode
        )
        self.decode = decode
        self.image_key, self.image_keys = image_key, keys
        self.label_key = label_key if keys else None
        self._class_names = names
        self._num_classes: int | None = None
        height, width = as_height_width(image_size)  # a list from a config: a pair again
        self.image_size = image_size if isinstance(image_size, int) else (height, width)
        self.normalize = normalize
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        self._image_skips: SkipLog | None = None
        self._warned_epoch: int | None = None
        if keys:
            self.work = "decode"  # num_workers="auto": decode work, as image folders
            if self.train_transforms is None:
                self.train_transforms = default_train_transforms(image_size)
            if self.eval_transforms is None:
                self.eval_transforms = default_eval_transforms(image_size)

    # ------------------------------------------------------------------ the stream's parts
    def stream_parts(self, split: str, reader: Any) -> tuple[Any, Any, Callable[[list], Any]]:
        """``(reader, transform, collate)`` of a split's stream: as given for plain records;
        for image records the record ``transform`` alone and the image collate."""
        if not self.image_keys:
            return reader, self.transform_for(split), self._collate_fn()
        if self.on_error == "skip" and self._image_skips is None:
            self._image_skips = SkipLog()
        collate = ImageRecordCollate(
            self.image_keys,
            self.label_key,
            self._class_names,
            self.train_transforms if split == "train" else self.eval_transforms,
            self.on_error,
            self._image_skips,
            self.decode,
        )
        return (None if reader is None else TaggedReader(reader)), self.transform, collate

    def _drain_image_skips(self) -> SkipCounter:
        """``dm.skipped`` with the image records the workers left out so far added to it."""
        counter = self._skips
        log = getattr(self, "_image_skips", None)
        if log is not None and log.has_new():
            for shard, text in log.read_new():
                where, _, reason = text.partition("\t")
                counter.record(shard, where, reason)
        return counter

    # ------------------------------------------------------------------ classes
    @property
    def classes(self) -> list[str]:
        """Class names: ``classes=`` as given, else ``"0"``, ``"1"``, ... for int labels."""
        if self._class_names is not None:
            return list(self._class_names)
        return [str(i) for i in range(self.num_classes)]

    @property
    def num_classes(self) -> int:
        """``len(classes)``, else the largest int label of the splits + 1 (read once: only the
        label field of each shard)."""
        if not self.image_keys or self.label_key is None:
            raise AttributeError(
                f"{type(self).__name__} has classes only with image_key= and label_key=."
            )
        if self._class_names is not None:
            return len(self._class_names)
        if self._num_classes is None:
            self.setup()
            top = -1
            for split in ("train", "val", "test"):
                for shard in self.shards.get(split) or []:
                    for label in self._labels_of(shard):
                        if isinstance(label, str):
                            raise ValueError(
                                f"{shard.path}: label {label!r} is a string: give classes=[...]"
                                " to map names to indices."
                            )
                        if isinstance(label, int) and not isinstance(label, bool):
                            top = max(top, label)
            self._num_classes = top + 1
        return self._num_classes

    def _labels_of(self, shard: Any) -> Any:
        key = self.label_key
        if shard.fmt == "tar":
            records = read_tar(shard.path, shard.compression, self.on_error, index=shard,
                               options=self.remote, fields=lambda ext: ext == key)  # fmt: skip
        elif shard.fmt == "parquet":
            records = read_parquet(shard.path, 0, None, [key], self.remote)
        else:
            records = self.read_shard(shard.path)
        return (r.get(key) for r in records if isinstance(r, dict))

    # ------------------------------------------------------------------ device side
    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Image records: uint8 images to float in [0, 1], normalised, on the device."""
        if not getattr(self, "image_keys", ()):
            return batch
        self._report_image_skips()
        if isinstance(batch, (tuple, list)) and batch and _is_uint8(batch[0]):
            return (self.to_float(batch[0]), *batch[1:])
        if isinstance(batch, dict) and _is_uint8(batch.get("image")):
            return {**batch, "image": self.to_float(batch["image"])}
        return batch

    def to_float(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 images -> float32 in [0, 1], normalised with ``mean``/``std`` if ``normalize``."""
        if not self.normalize:
            return to_float(images, None, None)
        return to_float(images, self.mean, self.std)

    def _report_image_skips(self) -> None:
        """Warns (once per epoch) when the workers left image records out."""
        log = self._image_skips
        if log is None or not log.has_new():
            return
        before = self._skips.total
        counter = self._drain_image_skips()
        trainer = self._trainer()
        epoch = None if trainer is None else int(trainer.current_epoch)
        if epoch is not None and epoch == self._warned_epoch:
            return
        self._warned_epoch = epoch
        shown = counter.messages[-1] if counter.messages else ""
        warnings.warn(
            f"{type(self).__name__} left out {counter.total - before} bad image record(s) "
            f"(on_error='skip'), {counter.total} so far, e.g. {shown}. All of them: dm.skipped.",
            RuntimeWarning,
            stacklevel=2,
        )

    def extra_summary(self) -> list[str]:
        """The summary's lines about image records (none without ``image_key``)."""
        if not self.image_keys:
            return []
        if self.label_key is None:
            labels = "no labels: dict batches of 'image' and the other fields"
        elif self._class_names is not None:
            labels = f"labels {self.label_key!r} through {len(self._class_names)} classes"
        else:
            labels = f"labels {self.label_key!r} (int)"
        scaled = "float, normalised" if self.normalize else "float in [0, 1]"
        return [
            f"  images: {self.image_key!r}, {labels}; uint8 "
            f"{'x'.join(map(str, as_height_width(self.image_size)))} out of the loader, {scaled} "
            "on the device",
            f"  transforms: train {self.train_transforms!r}; eval {self.eval_transforms!r}",
            decoding_summary(self.decode, self.train_transforms, self.eval_transforms),
        ]
