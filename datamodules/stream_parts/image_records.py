"""Image records on the fast image path: what ``StreamingDataModule(image_key=...)`` adds, and
the images of :class:`~datamodules.ImageTextDataModule`.

:class:`ImageRecords` is a part both DataModules hold, with its own state. With
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
``num_classes`` and the images' lines of the summary.
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

__all__ = [
    "IMAGE_SHUFFLE_BUFFER",
    "RECORD_SHUFFLE_BUFFER",
    "ImageRecords",
    "check_image_arguments",
    "check_image_records",
]

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


class ImageRecords(NormalizeOnDevice):
    """The image path of a stream's records (a part the stream DataModules hold).

    Args:
        image_keys: The image field's names, tried in order.
        label_key: The label field (None: dict batches of ``"image"`` and other fields).
        class_names: Class names for string labels (None: int labels).
        image_size: What the default transforms produce.
        mean: Per-channel mean for the device normalisation.
        std: Per-channel standard deviation.
        normalize: Subtract ``mean`` and divide by ``std`` after scaling to [0, 1].
        decode: ``"scaled"`` or ``"full"`` (:mod:`datamodules.imaging.scaled`).
        on_error: ``"raise"`` or ``"skip"`` bad records.
    """

    def __init__(
        self, image_keys: tuple[str, ...], label_key: str | None, class_names: list[str] | None,
        image_size: Any, mean: Any, std: Any, normalize: bool, decode: str, on_error: str,
    ) -> None:  # fmt: skip
        self.image_keys, self.label_key, self.class_names = image_keys, label_key, class_names
        # A list from a config becomes a pair again; mean and std tuples of floats.
        self.image_size, self.mean, self.std = check_image_arguments(image_size, mean, std)
        self.normalize, self.decode, self.on_error = normalize, decode, on_error
        self.skips: SkipChannel | None = None
        self._warned_epoch: int | None = None
        self._num_classes: int | None = None

    def default_transforms(self, train: Any, eval: Any) -> tuple[Any, Any]:
        """``(train, eval)`` transforms: those given, else the image kinds' defaults
        (RandomResizedCrop + flip to train, Resize + CenterCrop to evaluate)."""
        if train is None:
            train = default_train_transforms(self.image_size)
        if eval is None:
            eval = default_eval_transforms(self.image_size)
        return train, eval

    # ------------------------------------------------------------------ the stream's parts
    def collate(self, transform: Any, fields: Any = None) -> ImageRecordCollate:
        """The collate of a split's image records (``transform``: the split's, on uint8
        ``(3, H, W)``; ``fields``: what else a batch holds, see
        :class:`~datamodules.stream_parts.image_batches.ImageRecordCollate`)."""
        self.channel()
        return ImageRecordCollate(
            self.image_keys, self.label_key, self.class_names, transform, self.on_error,
            self.skips, self.decode, fields,
        )  # fmt: skip

    def channel(self) -> SkipChannel | None:
        """Where workers send the records they leave out (``on_error="skip"``; made once,
        before the workers start), drained into ``dm.skipped``; None under ``"raise"``."""
        if self.on_error == "skip" and self.skips is None:
            self.skips = SkipChannel()
        return self.skips

    @staticmethod
    def reader(reader: Any) -> Any:
        """The split's reader, tagging each record with its shard (for messages)."""
        return None if reader is None else TaggedReader(reader)

    def drain(self, skipped: Skipped) -> Skipped:
        """``skipped`` with the image records the workers left out so far added to it."""
        if self.skips is not None and self.skips.has_new():
            self.skips.receive(skipped)
        return skipped

    # ------------------------------------------------------------------ classes
    def num_classes(self, shards: dict[str, Any], labels_of: Callable[[Any], Any]) -> int:
        """``len(class_names)``, else the largest int label of the ``shards`` (per split) + 1,
        read once (``labels_of(shard)``: the labels of one shard)."""
        if self.class_names is not None:
            return len(self.class_names)
        if self._num_classes is None:
            top = -1
            for split in ("train", "val", "test"):
                for shard in shards.get(split) or []:
                    for label in labels_of(shard):
                        if isinstance(label, str):
                            raise ValueError(
                                f"{shard.path}: label {label!r} is a string: give classes=[...]"
                                " to map names to indices."
                            )
                        if is_int(label):
                            top = max(top, int(label))
            self._num_classes = top + 1
        return self._num_classes

    def labels_of(self, shard: Any, remote: Any, read_shard: Callable[[str], Any]) -> Any:
        """The label field of one shard's records (tar and Parquet: that field alone)."""
        key = self.label_key
        if shard.fmt == "tar":
            records = read_tar(shard.path, shard.compression, self.on_error, index=shard,
                               options=remote, fields=lambda ext: ext == key)  # fmt: skip
        elif shard.fmt == "parquet":
            records = read_parquet(shard.path, 0, None, [key], remote)
        else:
            records = read_shard(shard.path)
        return (r.get(key) for r in records if isinstance(r, dict))

    # ------------------------------------------------------------------ device side
    def on_device(self, dm: Any, batch: Any, dataloader_idx: int) -> Any:
        """A batch on the device: what the workers left out reported to ``dm.skipped``, the
        images to float in [0, 1], normalised (:class:`NormalizeOnDevice`)."""
        trainer = dm._trainer()
        epoch = None if trainer is None else int(trainer.current_epoch)
        self.report(dm._skips, type(dm).__name__, epoch)
        return self.on_after_batch_transfer(batch, dataloader_idx)

    def report(self, skipped: Skipped, owner: str, epoch: int | None) -> None:
        """Warns (once per epoch) when the workers left image records out."""
        channel = self.skips
        if channel is None or not channel.has_new():
            return
        before = skipped.total
        self.drain(skipped)
        if epoch is not None and epoch == self._warned_epoch:
            return
        self._warned_epoch = epoch
        shown = skipped.messages[-1] if skipped.messages else ""
        warnings.warn(
            f"{owner} left out {skipped.total - before} bad image record(s) "
            f"(on_error='skip'), {skipped.total} so far, e.g. {shown}. All of them: dm.skipped.",
            RuntimeWarning,
            stacklevel=3,
        )

    def lines(self, image_key: str, train: Any, eval: Any, labels: str | None = None) -> list[str]:
        """The summary's lines about image records (``train`` / ``eval``: the transforms;
        ``labels``: what the batches hold beside the images, None: from ``label_key``)."""
        if labels is not None:
            pass
        elif self.label_key is None:
            labels = "no labels: dict batches of 'image' and the other fields"
        elif self.class_names is not None:
            labels = f"labels {self.label_key!r} through {len(self.class_names)} classes"
        else:
            labels = f"labels {self.label_key!r} (int)"
        scaled = "float, normalised" if self.normalize else "float in [0, 1]"
        return [
            f"  images: {image_key!r}, {labels}; uint8 "
            f"{'x'.join(map(str, as_height_width(self.image_size)))} out of the loader, {scaled} "
            "on the device",
            f"  transforms: train {train!r}; eval {eval!r}",
            decoding_summary(self.decode, train, eval),
        ]
