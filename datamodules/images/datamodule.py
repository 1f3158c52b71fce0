"""ImageFolderDataModule: class-folder images, decoded fast, uint8 to the device.

Pipeline per batch: the sampler picks the batch's indices; a worker decodes each file with
:func:`~datamodules.imaging.decoding.decode_image` (TorchCodec for JPEG/PNG/WebP/GIF, Pillow for the
rest) into a uint8 tensor, applies the split's ``torchvision.transforms.v2`` transforms on
that uint8 tensor, and writes each result into the batch, uint8 ``(B, 3, H, W)``
(channels-last in memory, which uint8 resizing and cuDNN both prefer), allocated in a
shared-memory buffer the worker reuses (:mod:`datamodules.core.shared_batches`). Conversion
to float and normalisation happen in ``on_after_batch_transfer``
(:class:`~datamodules.imaging.normalize.NormalizeOnDevice`), on the Trainer's device, where
it is cheapest, and the worker queue, pinned memory and host-to-device copy carry a quarter
of the bytes of float32.

Extension point: override :meth:`ImageFolderDataModule.find_samples` to list samples some
other way (e.g. a CSV of ``path,label``); it returns an
:class:`~datamodules.images.index.ImageFolderIndex`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from datamodules.core.base import BaseDataModule
from datamodules.core.checks import ON_ERROR, check_bool, check_on_error, check_path
from datamodules.core.hardware import AUTO
from datamodules.core.keywords import shared_arguments
from datamodules.core.samplers import IndexBatchSampler
from datamodules.core.skipped import SkipChannel, Skipped
from datamodules.core.views import SplitView
from datamodules.images.batches import ImageBatchView
from datamodules.images.index import ImageFolderIndex, scan_image_folder
from datamodules.imaging.decoding import DECODABLE, IMG_EXTENSIONS
from datamodules.imaging.normalize import NormalizeOnDevice
from datamodules.imaging.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    as_height_width,
    check_image_arguments,
    default_eval_transforms,
    default_train_transforms,
)

__all__ = ["BalancedBatchSampler", "ImageFolderDataModule", "ON_ERROR"]


class BalancedBatchSampler(IndexBatchSampler):
    """Draws each epoch's samples with replacement so that every class is equally likely.

    The draw comes from ``seed + epoch`` and is identical on every rank, which then takes its
    disjoint share of the draw exactly as :class:`IndexBatchSampler` does (same batch count on
    every rank). An epoch has as many draws as the split has samples.

    Args:
        labels: The class of each sample of the split.
        batch_size: Samples per batch on each rank.
        **kwargs: As for :class:`IndexBatchSampler` (``shuffle`` is implied).
    """

    def __init__(self, labels: torch.Tensor, batch_size: int, **kwargs: Any) -> None:
        super().__init__(len(labels), batch_size, **kwargs)
        counts = torch.bincount(labels)
        self.weights = (1.0 / counts.clamp(min=1).double())[labels]

    def permutation(self, epoch: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed + epoch)
        return torch.multinomial(self.weights, self.dataset_size, True, generator=generator)


class ImageFolderDataModule(NormalizeOnDevice, BaseDataModule):
    """Images in class folders (``root/<class>/<image>``), as torchvision's ImageFolder.

    ``dm.classes``, ``dm.class_to_idx`` and ``dm.samples`` equal those of
    ``torchvision.datasets.ImageFolder(root)`` for the same folder. Batches are
    ``(images, targets)``: uint8 ``(B, 3, image_size, image_size)`` out of the loader, float
    (normalised if ``normalize``) after the Trainer moves them to the device.

    Args:
        root: The folder with one sub-folder per class.
        val_root: A folder of the same layout used as the validation split (instead of
            ``val_split``).
        test_root: The same for the test split.
        image_size: What the default transforms produce: the side of square images, or
            ``(height, width)``, as torchvision's transforms take it.
        normalize: Subtract ``mean`` and divide by ``std`` after scaling to [0, 1].
        mean: Per-channel mean (ImageNet's by default).
        std: Per-channel standard deviation (ImageNet's by default).
        on_error: ``"raise"`` (default) or ``"skip"`` unreadable files (skips are counted,
            listed in ``dm.skipped`` and reported in a warning at the end of each epoch).
        balanced: Sample classes equally in training (weighted draws with replacement).
        stratify: Keep class proportions in the random split (default True).
        extensions: Accepted file extensions (default: torchvision's).
        train_transforms: A transform on uint8 ``(3, H, W)`` tensors for training (default
            RandomResizedCrop(image_size) + RandomHorizontalFlip).
        eval_transforms: The same for val/test/predict (default Resize + CenterCrop).
    """

    work = "decode"
    hparams_ignore = (*BaseDataModule.hparams_ignore,)

    def __init__(
        self,
        root: str | os.PathLike,
        *,
        val_root: str | os.PathLike | None = None,
        test_root: str | os.PathLike | None = None,
        image_size: int | tuple[int, int] = 224,
        normalize: bool = True,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        on_error: str = "raise",
        balanced: bool = False,
        extensions: Sequence[str] = IMG_EXTENSIONS,
        batch_size: int = 32,
        val_split: int | float = 0.1,
        test_split: int | float = 0.0,
        split_seed: int = 42,
        splits: Mapping[str, Any] | None = None,
        stratify: bool = True,
        num_workers: int | str = AUTO,
        pin_memory: bool | str = AUTO,
        persistent_workers: bool | str = AUTO,
        prefetch_factor: int | str | None = AUTO,
        shuffle: bool = True,
        drop_last: bool = False,
        shuffle_seed: int | None = None,
        train_transforms: Callable[[Any], Any] | None = None,
        eval_transforms: Callable[[Any], Any] | None = None,
        reuse_batch_memory: bool = True,
    ) -> None:
        if splits is not None and stratify:
            stratify = False  # explicit indices leave nothing to stratify
        super().__init__(**shared_arguments(locals()))
        self.root = check_path(root, "root", "a folder path")
        self.val_root = check_path(val_root, "val_root", "a folder path", allow_none=True)
        self.test_root = check_path(test_root, "test_root", "a folder path", allow_none=True)
        # A list from a config becomes a pair again; mean and std tuples of floats.
        self.image_size, self.mean, self.std = check_image_arguments(image_size, mean, std)
        check_on_error(on_error)
        check_bool(normalize, "normalize")
        check_bool(balanced, "balanced")
        self.normalize = normalize
        self.on_error = on_error
        self.balanced = balanced
        self.extensions = tuple(extensions)
        if self.train_transforms is None:
            self.train_transforms = default_train_transforms(image_size)
        if self.eval_transforms is None:
            self.eval_transforms = default_eval_transforms(image_size)
        self.skip_channel: SkipChannel | None = None  # from the workers, with on_error="skip"
        self._skipped = Skipped()
        self.index: ImageFolderIndex | None = None

    # ------------------------------------------------------------------ data
    def find_samples(self) -> ImageFolderIndex:
        """Lists the samples of ``root``. Override to read them from elsewhere (e.g. a CSV).

        Returns:
            An :class:`~datamodules.images.index.ImageFolderIndex` (paths, class indices, classes).
        """
        return scan_image_folder(self.root, self.extensions)

    def build_dataset(self) -> ImageFolderIndex:
        self.index = self.find_samples()
        if not isinstance(self.index, ImageFolderIndex):
            raise TypeError(
                f"find_samples() returned {type(self.index).__name__}: return an ImageFolderIndex."
            )
        if self.on_error == "skip":
            self.skip_channel, self._skipped = SkipChannel(), Skipped()
        readable = sorted(set(self.index.ignored) & set(DECODABLE))
        if readable:
            counts = ", ".join(f"{ext}: {self.index.ignored[ext]}" for ext in readable)
            warnings.warn(
                f"ImageFolderDataModule: {self.root} holds images that extensions= leaves out "
                f"({counts} file(s)); the decoder reads them: pass extensions=(*IMG_EXTENSIONS, "
                f"{', '.join(map(repr, readable))}) to use them.",
                UserWarning,
                stacklevel=2,
            )
        return self.index

    def split_sources(self) -> dict[str, ImageFolderIndex]:
        sources = {}
        for split, folder in (("val", self.val_root), ("test", self.test_root)):
            if folder is None:
                continue
            index = scan_image_folder(folder, self.extensions, allow_empty=True)
            assert self.index is not None
            unknown = sorted(set(index.classes) - set(self.index.classes))
            if unknown:
                raise ValueError(
                    f"{split}_root={folder!r} has classes {unknown} that root={self.root!r} lacks."
                )
            remap = np.asarray([self.index.class_to_idx[c] for c in index.classes], np.int64)
            sources[split] = ImageFolderIndex(
                index.paths,
                remap[index.targets],
                self.index.classes,
                root=folder,
            )
        return sources

    def labels(self) -> torch.Tensor:
        assert self.index is not None
        return torch.from_numpy(self.index.targets)

    def make_view(self, split: str, dataset: ImageFolderIndex, indices: torch.Tensor) -> SplitView:
        return ImageBatchView(
            dataset, indices, self.transform_for(split), self.on_error, self.skip_channel
        )

    def make_sampler(self, split: str, view: SplitView, rank: int, world: int) -> IndexBatchSampler:
        if split == "train" and self.balanced:
            assert isinstance(view, ImageBatchView)
            labels = torch.from_numpy(view.index.targets)[view.indices]
            return BalancedBatchSampler(
                labels,
                self.batch_size,
                drop_last=self.drop_last,
                seed=self.shuffle_seed,
                num_replicas=world,
                rank=rank,
            )
        return super().make_sampler(split, view, rank, world)

    def make_loader(self, split: str) -> Any:
        loader = super().make_loader(split)
        if self.skip_channel is not None:
            loader.on_epoch_end = self.report_skipped
        return loader

    # ------------------------------------------------------------------ public views
    @property
    def classes(self) -> list[str]:
        """Class names, sorted (the sub-folder names of ``root``)."""
        self._require_setup()
        assert self.index is not None
        return self.index.classes

    @property
    def num_classes(self) -> int:
        """Number of classes (``len(classes)``), for the model's output layer."""
        return len(self.classes)

    @property
    def class_to_idx(self) -> dict[str, int]:
        """Class name -> class index."""
        self._require_setup()
        assert self.index is not None
        return self.index.class_to_idx

    @property
    def samples(self) -> list[tuple[str, int]]:
        """Every ``(path, class index)`` of ``root``, in torchvision's order."""
        self._require_setup()
        assert self.index is not None
        return self.index.samples

    @property
    def skipped(self) -> Skipped:
        """``(path, reason)`` of every file skipped so far with ``on_error="skip"``: a
        :class:`~datamodules.core.skipped.Skipped` list."""
        if self.skip_channel is not None:
            self.skip_channel.receive(self._skipped)
        return self._skipped

    def report_skipped(self) -> None:
        """Warns about the files skipped since the last report (called at each epoch's end)."""
        if self.skip_channel is None:
            return
        new = self.skip_channel.receive(self._skipped)
        if new:
            shown = "; ".join(f"{path} ({reason})" for path, reason in new[:5])
            more = f" and {len(new) - 5} more" if len(new) > 5 else ""
            warnings.warn(
                f"ImageFolderDataModule skipped {len(new)} unreadable file(s) this epoch "
                f"(on_error='skip'): {shown}{more}. All of them: dm.skipped.",
                RuntimeWarning,
                stacklevel=2,
            )

    # ------------------------------------------------------------------ look at the data
    def show_batch(self, path: str | os.PathLike[str], max_images: int = 32) -> Path:
        """Writes a PNG grid of one train batch, after augmentation, with class names.

        The first batch of epoch 0 (only its first ``max_images`` images are decoded), drawn
        by :meth:`plot_batch`.

        Args:
            path: The PNG file to write.
            max_images: At most this many images of the batch.

        Returns:
            The path written.
        """
        self.setup("fit")
        view = self.view("train")
        first_batch = self.make_sampler("train", view, 0, 1).batches(0)[0][:max_images]
        return self.plot_batch(view[first_batch], path, split="train", max_images=max_images)

    def describe_data(self) -> list[str]:
        """Per split (``val_root``/``test_root`` ones too): the sample count and each class's
        count, by class name."""
        from datamodules.tools.descriptions import describe_datamodule

        indices = self._require_setup()
        labels = {
            split: torch.from_numpy(self.split_datasets[split].targets)[idx]
            for split, idx in indices.items()
        }
        return describe_datamodule(self, names=self.classes, split_labels=labels)

    def plot_batch(
        self,
        batch: Any,
        path: str | os.PathLike[str],
        *,
        split: str = "train",
        max_images: int = 64,
    ) -> Path:
        """Writes a PNG grid of a batch's images with their class names.

        Args:
            batch: ``(images, targets)``: uint8 from the loader (as transformed for the split)
                or float from the device.
            path: The PNG file to write.
            split: The split the batch came from (named in the title).
            max_images: At most this many images of the batch.

        Returns:
            The path written.
        """
        from datamodules.tools.pictures import plot_image_grid

        images, targets = batch[0], batch[1]
        shown = min(len(images), max_images)
        height, width = images.shape[-2:]
        augmented = " (augmented)" if split == "train" else ""
        title = (
            f"{type(self).__name__}: {shown} {split} images of one batch, "
            f"{str(images.dtype).replace('torch.', '')} {height}x{width}, "
            f"after the {split} transforms{augmented}"
        )
        return plot_image_grid(
            images, path, targets, names=self.classes, title=title, max_images=max_images
        )

    def extra_summary(self) -> list[str]:
        if self.index is None:
            return []
        counts = np.bincount(self.index.targets, minlength=len(self.index.classes))
        per_class = ", ".join(f"{c}={n}" for c, n in zip(self.index.classes, counts, strict=True))
        lines = [f"  classes: {len(self.index.classes)} ({per_class[:300]})"]
        if self.index.ignored:
            total = sum(self.index.ignored.values())
            kinds = ", ".join(f"{ext}: {n}" for ext, n in self.index.ignored.items())
            lines.append(
                f"  ignored: {total} file(s) whose extension is not in extensions= ({kinds})"
            )
        scaled = "float, normalised" if self.normalize else "float in [0, 1]"
        lines.append(
            f"  images: uint8 {'x'.join(map(str, as_height_width(self.image_size)))} out of the "
            f"loader, {scaled} "
            f"on the device; on_error={self.on_error!r}"
        )
        if self.skip_channel is not None:
            lines.append(f"  skipped so far: {self.skipped.total} file(s)")
        return lines
