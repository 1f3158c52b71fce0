"""SegmentationDataModule: semantic segmentation from image / mask folders, a Pascal VOC root,
or tar / Parquet shards of an image and a mask per record.

The parts: the pairs of each split are found once at setup
(:mod:`~datamodules.detection.segmentation_index`, file names only;
:mod:`~datamodules.detection.segmentation_shards`, member references into shards); the batch
view
(:mod:`~datamodules.detection.segmentation_batches`) decodes images with the image kinds'
decoder and masks as class indices, checks them, applies a joint transforms.v2 pipeline and
pads; the train sampler, splits, DDP shares and resume are core's, evaluation gives every image
once across ranks (detection's :class:`~datamodules.detection.grouping.ExactEvalSampler`);
images become float and normalised on the device (:mod:`datamodules.imaging.normalize`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

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
from datamodules.core.skipped import SkipChannel, Skipped
from datamodules.core.summary import counted
from datamodules.core.views import SplitView
from datamodules.detection.grouping import ExactEvalSampler
from datamodules.detection.segmentation_batches import BATCH_KEYS, SegmentationBatchView
from datamodules.detection.segmentation_index import (
    SegmentationIndex,
    check_split_spec,
    is_shard_split,
    load_pairs,
)
from datamodules.detection.segmentation_shards import IMAGE_KEY, MASK_KEY, load_shard_pairs
from datamodules.imaging.normalize import to_float
from datamodules.imaging.transforms import IMAGENET_MEAN, IMAGENET_STD
from datamodules.remote.random_access import RandomAccessFiles
from datamodules.stream_parts.arguments import module_remote_options

__all__ = ["SegmentationDataModule", "default_segmentation_transforms"]

#: The random rescaling of the default train transform: the short side becomes a random
#: length in [0.5 S, 2 S], S the crop's longer side (torchvision's segmentation reference).
SCALE_RANGE = (0.5, 2.0)


def default_segmentation_transforms(
    train: bool, crop_size: tuple[int, int] | None, ignore_index: int = 255
) -> Callable[..., Any] | None:
    """The default joint transform of image and mask.

    Training with ``crop_size`` ``(h, w)``: torchvision's segmentation reference recipe, the
    short side resized to a random length in ``[0.5 S, 2 S]`` (``S = max(h, w)``;
    ``v2.RandomResize``), a random ``crop_size`` crop (an image smaller than the crop is padded,
    with 0 and the mask with ``ignore_index``), then a horizontal flip with probability 0.5.
    Training without ``crop_size``: the flip only (images keep their size). Evaluation: None
    (images at their own size, padded in the batch).
    """
    if not train:
        return None
    if crop_size is None:
        return v2.RandomHorizontalFlip(0.5)
    side = max(crop_size)
    low, high = max(1, int(SCALE_RANGE[0] * side)), int(SCALE_RANGE[1] * side)
    fill = {tv_tensors.Image: 0, tv_tensors.Mask: ignore_index}
    return v2.Compose([
        v2.RandomResize(low, high),
        v2.RandomCrop(crop_size, pad_if_needed=True, fill=fill),  # type: ignore[arg-type]
        v2.RandomHorizontalFlip(0.5),
    ])  # fmt: skip


def _crop_size(value: Any) -> tuple[int, int] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return check_int(value[0], "crop_size", 1), check_int(value[1], "crop_size", 1)
    size = check_int(value, "crop_size", 1)
    return size, size


class SegmentationDataModule(BaseDataModule):
    """Semantic segmentation batches: ``SegmentationDataModule(("images/", "masks/"))``,
    ``SegmentationDataModule("VOCdevkit/VOC2012", crop_size=480, num_classes=21)`` or
    ``SegmentationDataModule("s3://bucket/seg/train-{000000..000099}.tar")``.

    Subclass for a dataset of your own by overriding :meth:`load_pairs` (return a
    :class:`~datamodules.detection.segmentation_index.SegmentationIndex` per split).

    Args:
        train: The train split: a pair ``(image_folder, mask_folder)`` matched by file stem
            (``a/b.jpg`` with ``a/b.png``), a Pascal VOC root
            (``ImageSets/Segmentation/train.txt``, ``JPEGImages/``, ``SegmentationClass/``;
            its ``val.txt`` and ``test.txt`` are the other splits unless given) or split file,
            or tar / Parquet shards whose records hold an image and a mask member (tar:
            ``KEY.jpg`` + ``KEY.mask.png``; Parquet: ``image`` and ``mask`` columns of bytes or
            ``{"bytes", "path"}``): a path or ``http(s)://`` / ``s3://`` URL, a glob or brace
            pattern ``train-{000000..000003}.tar``, a folder, a ``*.index.json`` or a list
            (the schema: :mod:`~datamodules.detection.segmentation_shards`).
        val: The validation split in any of those forms; None: the VOC root's ``val.txt``,
            else ``val_split`` of train.
        test: The test split, likewise (``test_split`` of train when none is found).
        num_classes: The classes a mask may hold, ``0 .. num_classes - 1``; a value at or
            above it (other than ``ignore_index``) is a bad sample, named with its mask file.
            None: values are not checked (nothing is read to infer it; give it to your model).
        ignore_index: The mask value of pixels without a class: padding and crop borders get
            it (Pascal VOC marks its object borders with 255). Give the same to your loss.
        crop_size: The default train transform's crop, an int or ``(h, w)``: random rescale,
            crop (padded where the image is smaller) and flip. None: a flip only. Train
            batches then hold images of one size; evaluation images keep theirs.
        batch_format: ``"torchvision"``: ``{"image": (B, 3, H, W), "mask": int64 (B, H, W)}``;
            ``"hf"``: ``{"pixel_values", "labels"}``, as transformers' segmentation image
            processors name them. Images are ``uint8`` out of the loader, float on the device;
            images of different sizes are padded at the bottom and right (with 0; masks with
            ``ignore_index``).
        transforms: A torchvision.transforms.v2 transform of ``(image, mask)`` for training
            (default: :func:`default_segmentation_transforms`); masks arrive as
            ``tv_tensors.Mask``, which v2 resizes with nearest neighbours only.
        eval_transforms: The same for evaluation (default: none).
        normalize: On the device, after scaling to [0, 1], also normalise with ImageNet's mean
            and std (what torchvision's segmentation models and transformers' processors expect).
        on_error: ``"raise"`` or ``"skip"`` bad samples (counted in :attr:`skipped`): a stem
            on one side only, a missing or undecodable file, an image and mask of different
            sizes, a class value out of range; of shards, a record without an image or mask
            member, or with a lossy mask (named with shard and key).
        image_key: Shards: the image member (tar extension, Parquet column), or alternatives
            tried in order, ``"jpg;png"``.
        mask_key: Shards: the mask member, or alternatives tried in order (default
            ``"mask.png;mask;seg.png"``: ``KEY.mask.png`` in a tar, a ``mask`` column).
        storage_options: Passed to fsspec for remote shards (``http(s)://``, ``s3://``...;
            credentials are not saved in checkpoints).
        retries: Retries of a transient remote failure, with exponential backoff.
        timeout: Seconds a remote request may go without producing a byte.
        cache_dir: Keep remote shards in this directory (downloaded once, shared by processes
            of the machine); None: each member is read by a range request.
        cache_limit: Bytes (or a string such as ``"50GB"``) the cache may hold (LRU).
    """

    work = "decode"
    hparams_ignore = (*BaseDataModule.hparams_ignore, "transforms")

    def __init__(
        self,
        train: Any = None,
        val: Any = None,
        test: Any = None,
        *,
        num_classes: int | None = None,
        ignore_index: int = 255,
        crop_size: int | tuple[int, int] | None = None,
        batch_format: str = "torchvision",
        transforms: Callable[..., Any] | None = None,
        eval_transforms: Callable[..., Any] | None = None,
        normalize: bool = True,
        on_error: str = "raise",
        image_key: str = IMAGE_KEY,
        mask_key: str = MASK_KEY,
        storage_options: dict[str, Any] | None = None,
        retries: int = 5,
        timeout: float = 60.0,
        cache_dir: str | None = None,
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
        self.train = check_split_spec(train, "train")
        self.val = check_split_spec(val, "val")
        self.test = check_split_spec(test, "test")
        overridden = type(self).load_pairs is not SegmentationDataModule.load_pairs
        if self.train is None and not overridden:
            raise ValueError(
                "SegmentationDataModule needs train= (a pair (image_folder, mask_folder), a "
                "Pascal VOC root or shards), or a subclass overriding load_pairs()."
            )
        check_int(num_classes, "num_classes", 1, allow_none=True)
        check_int(ignore_index, "ignore_index")
        self.crop_size = _crop_size(crop_size)
        check_choice(batch_format, "batch_format", tuple(BATCH_KEYS))
        for name, value in (("transforms", transforms), ("eval_transforms", eval_transforms)):
            if value is not None and not callable(value):
                raise rejected(name, value, "a transforms.v2 transform or None", TypeError)
        check_bool(normalize, "normalize")
        check_on_error(on_error)
        self.num_classes = None if num_classes is None else int(num_classes)
        self.ignore_index = int(ignore_index)
        self.batch_format = batch_format
        self.transforms, self.eval_transforms = transforms, eval_transforms
        self.normalize, self.on_error = normalize, on_error
        self.indexes: dict[str, SegmentationIndex] = {}
        self.skip_channel: SkipChannel | None = None  # from the workers, with on_error="skip"
        self._skipped = Skipped()
        for name, value in (("image_key", image_key), ("mask_key", mask_key)):
            check_string(value, name, "member names such as 'jpg' or 'mask.png;mask'")
        self.image_key = tuple(k for k in image_key.split(";") if k)
        self.mask_key = tuple(k for k in mask_key.split(";") if k)
        remote, limit = module_remote_options(
            self, storage_options, retries, timeout, cache_dir, cache_limit
        )
        #: Reads shards, local or remote (the remote options of streams).
        self.files = RandomAccessFiles(remote, cache_dir, limit)

    # ------------------------------------------------------------------ extension point
    def load_pairs(self, split: str) -> SegmentationIndex | None:
        """Returns the pairs of ``split`` (``"train"``, ``"val"``, ``"test"``), or None when
        the split has no source of its own (it is then cut from train by ``val_split`` /
        ``test_split``). Override it for a dataset of your own.

        Args:
            split: The split.
        """
        given = {"train": self.train, "val": self.val, "test": self.test}[split]
        spec = given if given is not None else self.train
        if spec is None:
            return None
        if is_shard_split(spec):
            return None if given is None else load_shard_pairs(
                spec, split, image_key=self.image_key, mask_key=self.mask_key,
                on_error=self.on_error, files=self.files,
            )  # fmt: skip
        return load_pairs(spec, split, self.on_error, implicit=given is None)

    # ------------------------------------------------------------------ setup
    def build_dataset(self) -> SegmentationIndex:
        """Finds the train split's pairs, then the others'."""
        train = self.load_pairs("train")
        if train is None:
            raise ValueError("load_pairs('train') returned None: no train split.")
        self.indexes = {"train": train}
        for split in ("val", "test"):
            found = self.load_pairs(split)
            if found is not None:
                self.indexes[split] = found
        self._skipped = Skipped()
        for index in self.indexes.values():
            for where, why in index.skipped:
                file, _, place = where.partition(": ")
                self._skipped.record(file, place or None, why)
        if self.on_error == "skip":
            self.skip_channel = SkipChannel()
        return train

    def split_sources(self) -> dict[str, SegmentationIndex]:
        return {k: v for k, v in self.indexes.items() if k != "train"}

    # ------------------------------------------------------------------ views and samplers
    def transform_for(self, split: str) -> Callable[..., Any] | None:
        given = self.transforms if split == "train" else self.eval_transforms
        if given is not None:
            return given
        return default_segmentation_transforms(split == "train", self.crop_size, self.ignore_index)

    def make_view(self, split: str, dataset: Any, indices: torch.Tensor) -> SplitView:
        return SegmentationBatchView(
            dataset, indices, self.transform_for(split), ignore_index=self.ignore_index,
            num_classes=self.num_classes, keys=BATCH_KEYS[self.batch_format],
            on_error=self.on_error, skips=self.skip_channel, files=self.files,
        )  # fmt: skip

    def make_sampler(self, split: str, view: SplitView, rank: int, world: int) -> IndexBatchSampler:
        if split == "train":
            return super().make_sampler(split, view, rank, world)
        return ExactEvalSampler(
            len(view), self.batch_size, shuffle=False, seed=self.shuffle_seed,
            num_replicas=world, rank=rank,
        )  # fmt: skip

    # ------------------------------------------------------------------ on the device
    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """``uint8`` images to float in [0, 1] (normalised with ``normalize``), on the device."""
        mean, std = (IMAGENET_MEAN, IMAGENET_STD) if self.normalize else (None, None)
        key = BATCH_KEYS[self.batch_format][0]
        if isinstance(batch, dict) and key in batch and batch[key].dtype == torch.uint8:
            return {**batch, key: to_float(batch[key], mean, std)}
        return batch

    # ------------------------------------------------------------------ reports
    @property
    def skipped(self) -> Skipped:
        """Samples left out under ``on_error="skip"``: at setup (a stem on one side only, a
        listed VOC id without its files, a shard record without its image or mask member),
        and those the loaders met so far (unreadable files or members, sizes that differ,
        class values out of range)."""
        if self.skip_channel is not None:
            self.skip_channel.receive(self._skipped)
        return self._skipped

    def describe_data(self) -> list[str]:
        """Per split, its images (for ``python -m datamodules inspect``)."""
        indices = self._require_setup()
        return [f"  {s}: {counted(len(indices[s]), 'image')}" for s in ("train", "val", "test")]

    def extra_summary(self) -> list[str]:
        """The pairs of each split and the rules."""
        lines = [
            f"  batches: {self.batch_format!r}; num_classes {self.num_classes}, ignore_index "
            f"{self.ignore_index}, crop_size {self.crop_size}; on_error={self.on_error!r}"
        ]
        for split, index in self.indexes.items():
            lines.append(f"  {split}: {counted(len(index), 'image')} ({index.source})")
        return lines
