"""Segmentation shards into a :class:`~datamodules.detection.segmentation_index.SegmentationIndex`:
tar and Parquet shards whose records hold an image and a class mask, local or remote.

A record:

* tar (webdataset's layout): ``KEY.jpg`` (or ``png``, ``webp``, ...: the first of
  ``image_key``'s alternatives) and ``KEY.mask.png`` (the first of ``mask_key``'s:
  ``mask.png``, ``mask``, ``seg.png`` by default);
* Parquet: an image column and a mask column (``image`` and ``mask`` by default), each the
  encoded bytes or Hugging Face's ``{"bytes", "path"}``; a record is ``row N`` (from 0).

The shards are read once at setup through
:func:`~datamodules.shards.member_records.scan_members`, locating both members without
reading them (a tar's headers; a Parquet file's footer); the index keeps each member's
:class:`~datamodules.shards.member_records.MemberRef` as a string, and each remote shard's
version, which :class:`~datamodules.shards.member_shards.MemberBytes` checks once per process
before a batch reads the member's bytes. Pixels and mask values are checked then, as for
files (a mask in a lossy format is refused there too, by its decoded format).

A record without an image or a mask member, a member repeated, or a tar mask member in a
lossy format (``KEY.mask.jpg``) is a problem named with shard and key: raised as an
:class:`~datamodules.detection.problems.AnnotationError`, or left out and listed in the
index's ``skipped`` under ``on_error="skip"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from datamodules.detection.problems import AnnotationError, Problems
from datamodules.detection.segmentation_index import SegmentationIndex
from datamodules.detection.shard_index import IMAGE_KEY
from datamodules.remote.random_access import RandomAccessFiles
from datamodules.shards.errors import ShardError
from datamodules.shards.member_records import MemberRecord, MemberRef, scan_members
from datamodules.shards.member_shards import member_shard_files, shard_versions

__all__ = ["IMAGE_KEY", "MASK_KEY", "load_shard_pairs", "lossy_names"]

#: The mask members tried in order, by default (``KEY.mask.png``; a Parquet ``mask`` column).
MASK_KEY = "mask.png;mask;seg.png"
#: Lossy extensions a tar mask member is refused in.
LOSSY = ("jpg", "jpeg", "webp")


def lossy_names(mask_key: Sequence[str]) -> list[str]:
    """The lossy members that stand for ``mask_key``'s (``mask.png`` -> ``mask.jpg`` ...)."""
    names = []
    for key in mask_key:
        stem = key.rsplit(".", 1)[0] if "." in key else key
        names += [f"{stem}.{ext}" for ext in LOSSY if f"{stem}.{ext}" not in names]
    return [name for name in names if name not in mask_key]


def _pair(
    record: MemberRecord, image_key: Sequence[str], mask_key: Sequence[str], lossy: list[str]
) -> tuple[MemberRef, MemberRef] | str:
    """``(image, mask)`` references of a record, or what is wrong with it."""
    if record.problem:
        return record.problem
    mask = next((k for k in mask_key if k in record.located), None)
    image = next((k for k in image_key if k in record.located and k != mask), None)
    if image is None:
        return f"no image member ({', '.join(image_key)})"
    if mask is None:
        bad = next((k for k in lossy if k in record.located), None)
        if bad is not None:
            return f"a mask in a lossy format (.{bad}: JPEG/WebP changes class values): use PNG"
        return f"no mask member ({', '.join(mask_key)})"
    return record.located[image], record.located[mask]


def load_shard_pairs(
    spec: Any,
    split: str = "train",
    *,
    image_key: Sequence[str] = tuple(IMAGE_KEY.split(";")),
    mask_key: Sequence[str] = tuple(MASK_KEY.split(";")),
    on_error: str = "raise",
    files: RandomAccessFiles | None = None,
) -> SegmentationIndex:
    """The image / mask pairs of segmentation shards (see the module's docstring).

    Args:
        spec: Shards: a path or URL, a glob or brace pattern, a folder, a dataset index
            (``*.index.json``), or a list of them.
        split: The split's name (for messages).
        image_key: The image members (tar extensions, Parquet columns) tried in order.
        mask_key: The mask members tried in order.
        on_error: ``"raise"`` or ``"skip"`` bad records (named with shard and key, counted).
        files: How remote shards are read (the remote options of streams).

    Raises:
        AnnotationError: A file that is not a shard, a shard that does not exist or cannot
            be read, or (under ``"raise"``) a bad record, naming it.
    """
    files = files or RandomAccessFiles()
    shards = member_shard_files(spec, files, f"segmentation shard ({split})", AnnotationError)
    versions = shard_versions(shards, files, AnnotationError)
    lossy = lossy_names(mask_key)
    located = list(dict.fromkeys([*image_key, *mask_key, *lossy]))
    skipped: list[tuple[str, str]] = []
    problem = Problems(on_error, skipped)
    images: list[str] = []
    masks: list[str] = []
    for shard in shards:
        try:
            for record in scan_members(shard, read=[], located=located, files=files):
                found = _pair(record, image_key, mask_key, lossy)
                if isinstance(found, str):
                    problem(record.where, found)
                else:
                    images.append(found[0].encode())
                    masks.append(found[1].encode())
        except ShardError as err:
            problem(shard, str(err).removeprefix(f"{shard}: "))
    source = shards[0] if len(shards) == 1 else f"{shards[0]} and {len(shards) - 1} more shards"
    return SegmentationIndex(images, masks, source, skipped, versions=versions)
