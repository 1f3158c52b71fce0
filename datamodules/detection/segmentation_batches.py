"""Segmentation batches: image and class mask decoded, checked, transformed together, padded.

* :func:`read_mask`: a class mask (a file, or a shard member's bytes) to an ``(H, W)``
  tensor of class indices (a lossy JPEG / WebP mask is refused): palette PNGs
  (PIL mode ``"P"``, as Pascal VOC's) give their palette indices, grayscale ones their values,
  16- and 32-bit ones theirs; colour masks are refused (map colours to classes first).
* :class:`SegmentationBatchView`: a split of a
  :class:`~datamodules.detection.segmentation_index.SegmentationIndex`, a batch a call: each
  image decodes through the image kinds' decoder, its mask through :func:`read_mask` (from an
  index of shards, both from the bytes of their members, read through
  :class:`~datamodules.shards.member_shards.MemberBytes`); sizes
  and (with ``num_classes``) values are checked, then a torchvision.transforms.v2 transform
  gets ``(tv_tensors.Image, tv_tensors.Mask)``, which v2 never interpolates (masks resize
  with nearest neighbours whatever the transform's interpolation).
* :func:`pad_samples`: images padded at the bottom and right to the batch's largest height
  and width with 0, masks with ``ignore_index``; :data:`BATCH_KEYS` names them per format.

A bad sample (an unreadable image or mask, sizes that differ, a class value out of range)
raises naming its file or, under ``on_error="skip"``, is left out of its batch and sent to
``dm.skipped`` (a batch whose samples are all bad holds the split's next good one instead,
reported as repeated).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torchvision import tv_tensors

from datamodules.core.skipped import SkipChannel
from datamodules.core.views import SplitView
from datamodules.detection.problems import AnnotationError
from datamodules.detection.segmentation_index import SegmentationIndex
from datamodules.imaging.decoding import ImageDecodeError, decode_image, decode_image_bytes
from datamodules.imaging.decoding import preload as preload_decoders
from datamodules.remote.random_access import RandomAccessFiles
from datamodules.remote.retrying import RemoteError
from datamodules.shards.member_records import MemberRef
from datamodules.shards.member_shards import MemberBytes

__all__ = ["BATCH_KEYS", "SegmentationBatchView", "pad_samples", "read_mask"]

#: The batch's (image, mask) keys of each ``batch_format``: transformers' segmentation
#: processors (``SegformerImageProcessor`` & co.) name them ``pixel_values`` and ``labels``.
BATCH_KEYS = {"torchvision": ("image", "mask"), "hf": ("pixel_values", "labels")}

#: PIL formats refused for a mask: compression changes class values at edges.
LOSSY_FORMATS = ("JPEG", "WEBP", "MPO")
#: PIL modes of a class mask: one channel of indices or values.
MASK_MODES = ("P", "L", "1", "I;16", "I;16B", "I;16L", "I")


def read_mask(source: str | bytes, wide: bool = False, *, name: str | None = None) -> torch.Tensor:
    """The class indices of a mask, ``(H, W)`` (``uint8``, or ``int32`` for 16- and 32-bit
    masks or with ``wide``, to hold an ``ignore_index`` outside 0..255).

    Args:
        source: The mask's file, or its encoded bytes (a shard's member).
        wide: Give ``int32`` whatever the mask's depth.
        name: What errors call the mask (default: its file; ``"<bytes>"`` for bytes).

    Raises:
        ImageDecodeError: The file or bytes cannot be read or decoded, naming it.
        AnnotationError: It is not a one-channel mask, or is in a lossy format (JPEG,
            WebP), naming it and its mode or format.
    """
    from PIL import Image, UnidentifiedImageError

    if name is None:
        name = source if isinstance(source, str) else "<bytes>"
    try:
        if isinstance(source, (bytes, bytearray, memoryview)):
            if not len(source):
                raise ValueError("empty (0 bytes)")
            opened = Image.open(io.BytesIO(source))
        else:
            opened = Image.open(source)
        with opened as img:
            mode, fmt = img.mode, img.format
            if fmt in LOSSY_FORMATS:
                raise AnnotationError(
                    f"{name}: a mask in a lossy format ({fmt}: JPEG/WebP changes class "
                    "values): use PNG"
                )
            if mode not in MASK_MODES:
                raise AnnotationError(
                    f"{name}: a mask of PIL mode {mode!r}: a class mask has one channel of "
                    f"class indices (modes {', '.join(MASK_MODES)}); map colours to classes first"
                )
            values = np.array(img)
    except AnnotationError:
        raise
    except (OSError, ValueError, SyntaxError) as error:
        reason = str(error)
        if isinstance(error, FileNotFoundError):
            reason = "no such file"
        elif isinstance(error, UnidentifiedImageError):
            reason = "not an image in a format PIL knows (or a damaged one)"
        raise ImageDecodeError.for_file(name, reason) from error
    values = values.astype(np.uint8) if values.dtype == bool else values
    if values.dtype != np.uint8 or wide:
        values = values.astype(np.int32)
    return torch.from_numpy(np.ascontiguousarray(values))


def pad_samples(
    samples: list[tuple[torch.Tensor, torch.Tensor]], ignore_index: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``uint8`` images ``(B, 3, H, W)`` padded with 0 and ``int64`` masks ``(B, H, W)``
    padded with ``ignore_index``, at the bottom and right to the largest height and width."""
    height = max(int(image.shape[-2]) for image, _ in samples)
    width = max(int(image.shape[-1]) for image, _ in samples)
    images = torch.zeros((len(samples), 3, height, width), dtype=torch.uint8)
    masks = torch.full((len(samples), height, width), ignore_index, dtype=torch.int64)
    for row, (image, mask) in enumerate(samples):
        h, w = int(image.shape[-2]), int(image.shape[-1])
        images[row, :, :h, :w] = image
        masks[row, :h, :w] = mask
    return images, masks


class SegmentationBatchView(SplitView):
    """A split of a :class:`SegmentationIndex`, decoded, checked and transformed a batch at a
    time into ``{image_key: uint8 (B, 3, H, W), mask_key: int64 (B, H, W)}``.

    Args:
        index: The split's pairs.
        indices: The split's positions in ``index``.
        transform: A joint v2 transform called as ``transform(image, mask)`` with a
            ``tv_tensors.Image`` and a ``tv_tensors.Mask``, returning both; or None.
        ignore_index: The mask value of padding (and of VOC's borders).
        num_classes: Mask values at or above it (other than ``ignore_index``) are bad; None:
            values are not checked.
        keys: The batch's image and mask keys (:data:`BATCH_KEYS`).
        on_error: ``"raise"`` or ``"skip"`` bad samples (sent through ``skips``).
        skips: Where skipped samples go, for the main process's ``dm.skipped``.
        files: How the members of an index built from shards are read (None: defaults).
    """

    def __init__(
        self,
        index: SegmentationIndex,
        indices: torch.Tensor,
        transform: Callable[..., Any] | None,
        *,
        ignore_index: int = 255,
        num_classes: int | None = None,
        keys: tuple[str, str] = BATCH_KEYS["torchvision"],
        on_error: str = "raise",
        skips: SkipChannel | None = None,
        files: RandomAccessFiles | None = None,
    ) -> None:
        super().__init__(indices, transform)
        self.index = index
        self.ignore_index = ignore_index
        self.num_classes = num_classes
        self.keys = keys
        self.on_error = on_error
        self.skips = skips
        self.wide = not 0 <= ignore_index <= 255
        #: Reads image and mask members (an index from shards), else None (files).
        self.members = MemberBytes(files) if index.from_shards else None

    def preload(self) -> None:
        """Imports the image decoders (before the loader forks its workers)."""
        preload_decoders()

    def _check_values(self, mask: torch.Tensor, path: str) -> None:
        limit = self.num_classes
        if limit is None or int(mask.max()) < limit:
            return
        values = torch.unique(mask)
        bad = values[(values >= limit) & (values != self.ignore_index)].tolist()
        if bad:
            raise AnnotationError(
                f"{path}: class value {bad[0]} is not below num_classes={limit}"
                + (f" (nor ignore_index={self.ignore_index})" if self.ignore_index >= limit else "")
                + (f"; all such values: {bad}" if len(bad) > 1 else "")
            )

    def _read(self, i: int) -> tuple[torch.Tensor, torch.Tensor, str, str]:
        """Sample ``i``'s image and mask decoded, and how messages name each."""
        if self.members is None:
            image_path, mask_path = self.index.image_path(i), self.index.mask_path(i)
            return decode_image(image_path), read_mask(mask_path, self.wide), image_path, mask_path
        image_data, image_name = self._member(self.index.image_path(i))
        mask_data, mask_name = self._member(self.index.mask_path(i))
        image = decode_image_bytes(image_data, name=image_name)
        return image, read_mask(mask_data, self.wide, name=mask_name), image_name, mask_name

    def _member(self, ref: str) -> tuple[bytes, str]:
        """A member's bytes from its shard; a member that cannot be read (a null Parquet
        cell, a local shard gone) is a bad sample, a remote failure is not."""
        assert self.members is not None
        try:
            return self.members(ref, self.index.versions)
        except RemoteError:
            raise
        except OSError as error:
            where = MemberRef.decode(ref).where
            reason = str(error).removeprefix(f"{where}: ")
            raise ImageDecodeError(str(error), path=where, reason=reason) from error

    def sample(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample ``i`` of the index: its ``uint8`` image ``(3, H, W)`` and its mask
        ``(H, W)``, checked and transformed."""
        image, mask, image_path, mask_path = self._read(i)
        if tuple(image.shape[-2:]) != tuple(mask.shape):
            raise AnnotationError(
                f"{mask_path}: the mask is {mask.shape[0]}x{mask.shape[1]} (HxW) but its image "
                f"{image_path} is {image.shape[-2]}x{image.shape[-1]}"
            )
        self._check_values(mask, mask_path)
        if self.transform is not None:
            image, mask = self.transform(tv_tensors.Image(image), tv_tensors.Mask(mask))
            if image.ndim != 3 or tuple(image.shape[-2:]) != tuple(mask.shape[-2:]):
                raise ValueError(
                    f"transforms gave an image {tuple(image.shape)} and a mask "
                    f"{tuple(mask.shape)} for {image_path}: give both one size (a v2 transform "
                    "called as transform(image, mask) does)"
                )
        return image.as_subclass(torch.Tensor), mask.as_subclass(torch.Tensor).reshape(
            image.shape[-2:]
        )

    def _try(self, i: int, quiet: bool = False) -> tuple[torch.Tensor, torch.Tensor] | None:
        try:
            return self.sample(i)
        except (ImageDecodeError, AnnotationError) as error:
            if self.on_error == "raise":
                raise
            if self.skips is not None and not quiet:
                where = getattr(error, "path", None) or str(error).split(": ")[0]
                why = getattr(error, "reason", None) or str(error).partition(": ")[2]
                place = None
                if self.members is not None:  # "shard: key 'k' (.png)": counted by shard
                    where, _, place = where.partition(": ")
                self.skips.send(where, place or None, why)
            return None

    def __getitem__(self, batch: torch.Tensor) -> dict[str, torch.Tensor]:
        rows = self.rows(batch).tolist()
        samples = [s for s in (self._try(row) for row in rows) if s is not None]
        if not samples:
            # Every sample of the batch was bad: an empty batch would break the step and a
            # missing one would desynchronise DDP ranks, so the split's next good one stands in.
            samples = [self._substitute(rows[-1])]
        images, masks = pad_samples(samples, self.ignore_index)
        return {self.keys[0]: images, self.keys[1]: masks}

    def _substitute(self, after: int) -> tuple[torch.Tensor, torch.Tensor]:
        split_rows = self.indices.tolist()
        start = split_rows.index(after) if after in split_rows else 0
        for offset in range(1, len(split_rows) + 1):
            row = split_rows[(start + offset) % len(split_rows)]
            found = self._try(row, quiet=True)
            if found is not None:
                if self.skips is not None:
                    file, place = self.index.image_path(row), None
                    if self.members is not None:
                        file, _, place = self.index.image_name(row).partition(": ")
                    self.skips.send(file, place, "repeated to fill an all-bad batch")
                return found
        raise AnnotationError("on_error='skip' found no good sample in this split at all")
