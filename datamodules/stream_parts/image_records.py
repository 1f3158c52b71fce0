"""Image records on the fast image path: what ``StreamingDataModule(image_key=...)`` adds.

:class:`StreamImages` is mixed into :class:`~datamodules.StreamingDataModule`. With
``image_key`` set, each record's encoded image is decoded, transformed and written into a
uint8 batch in the workers (:class:`~datamodules.stream_parts.image_batches.ImageRecordCollate`),
exactly as :class:`~datamodules.ImageFolderDataModule` does with files: the same decoder, the
same default transforms (RandomResizedCrop + flip to train, Resize + CenterCrop to evaluate)
and ``train_transforms`` / ``eval_transforms`` overrides on uint8 ``(3, H, W)`` tensors, the
same reused shared-memory batch slots, and float conversion and normalisation on the device
(:class:`~datamodules.imaging.normalize.NormalizeOnDevice`). ``num_workers="auto"`` counts
this as decode work, local or remote. ``transform=`` still acts on the records, before
decoding.

This module also checks the image arguments (:func:`check_image_records`) and gives
``num_classes`` / ``classes`` and the images' lines of the summary.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from datamodules.core.checks import check_bool, check_string, is_int, rejected
from datamodules.core.skipped import SkipChannel, Skipped
from datamodules.imaging.normalize import NormalizeOnDevice
from datamodules.imaging.scaled import check_decode, decoding_summary
from datamodules.imaging.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    as_height_width,
    check_image_arguments,
    default_eval_transforms,
    default_train_transforms,
)
from datamodules.shards.parquet import read_parquet
from datamodules.shards.tar import read_tar
from datamodules.stream_parts.image_batches import ImageRecordCollate, TaggedReader

__all__ = ["IMAGE_SHUFFLE_BUFFER", "RECORD_SHUFFLE_BUFFER", "StreamImages", "check_image_records"]

#: ``shuffle_buffer=None`` for plain records: they are small.
RECORD_SHUFFLE_BUFFER = 10_000
#: ``shuffle_buffer=None`` for image records, by measurement (``bench_shuffle_buffer.py``,
#: figures in the images-at-scale guide): a batch already mixes 10.8 of 12 shards (11.9 at
#: 5,000 and up), the first batch comes as soon as with no buffer (5,000: 2 s later here), and
#: a worker holds 110 MB of ImageNet-sized JPEGs (10,000: 1.1 GB).
IMAGE_SHUFFLE_BUFFER = 1000

_DEFAULTS = {"label_key": "cls", "classes": None, "image_size": 224, "normalize": True,
             "decode": "scaled"}  # fmt: skip


def _image_keys(image_key: Any) -> tuple[str, ...]:
    accepted = "a field name such as 'jpg', or alternatives tried in order, 'jpg;png;webp'"
    keys = tuple(k.strip() for k in check_string(image_key, "image_key", accepted).split(";"))
    if not all(keys) or len(set(keys)) != len(keys):
        raise rejected("image_key", image_key, accepted)
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
    check_string(label_key, "label_key", "a field name or None", allow_none=True)
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
    check_bool(normalize, "normalize")
    if collate is not None:
        raise ValueError(
            "collate= does not apply with image_key=: image records are batched as "
            "(images, labels), or as a dict with label_key=None; transform= reaches the "
            "records before that."
        )
    return keys, names


class StreamImages(NormalizeOnDevice):
    """The image records of :class:`~datamodules.StreamingDataModule` (a mixin)."""

    image_key: str | None
    on_error: str
    _skips: Skipped

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
        # A list from a config becomes a pair again; mean and std tuples of floats.
        self.image_size, self.mean, self.std = check_image_arguments(image_size, mean, std)
        self.normalize = normalize
        self._image_skips: SkipChannel | None = None
        self._warned_epoch: int | None = None
        if keys:
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
            self._image_skips = SkipChannel()
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

    def _drain_image_skips(self) -> Skipped:
        """``dm.skipped`` with the image records the workers left out so far added to it."""
        channel = getattr(self, "_image_skips", None)
        if channel is not None and channel.has_new():
            channel.receive(self._skips)
        return self._skips

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
                        if is_int(label):
                            top = max(top, int(label))
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
        return super().on_after_batch_transfer(batch, dataloader_idx)

    def _report_image_skips(self) -> None:
        """Warns (once per epoch) when the workers left image records out."""
        channel = self._image_skips
        if channel is None or not channel.has_new():
            return
        before = self._skips.total
        skipped = self._drain_image_skips()
        trainer = self._trainer()
        epoch = None if trainer is None else int(trainer.current_epoch)
        if epoch is not None and epoch == self._warned_epoch:
            return
        self._warned_epoch = epoch
        shown = skipped.messages[-1] if skipped.messages else ""
        warnings.warn(
            f"{type(self).__name__} left out {skipped.total - before} bad image record(s) "
            f"(on_error='skip'), {skipped.total} so far, e.g. {shown}. All of them: dm.skipped.",
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
