"""Segmentation shards written in fixtures with tarfile and pyarrow from the folder fixtures'
pairs (the same images and masks, byte for byte), and the batches of a DataModule."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torchvision.transforms import v2

from datamodules import SegmentationDataModule


def pair_bytes(images: Path, masks: Path) -> list[tuple[str, bytes, bytes]]:
    """``(stem, image bytes, mask bytes)`` of the folder pairs, sorted by stem."""
    return [
        (image.stem, image.read_bytes(), (masks / f"{image.stem}.png").read_bytes())
        for image in sorted(images.iterdir())
    ]


def write_tar(path: Path, members: list[tuple[str, bytes]]) -> Path:
    """A tar of ``(name, bytes)`` members, in order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for name, body in members:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return path


def write_tar_shards(
    out: Path, pairs: list[tuple[str, bytes, bytes]], per_shard: int, ext: str = "png"
) -> list[Path]:
    """``out/train-{k:06d}.tar`` of ``per_shard`` records each: ``KEY.<ext>`` and
    ``KEY.mask.png``."""
    paths = []
    for k, first in enumerate(range(0, len(pairs), per_shard)):
        members = []
        for stem, image, mask in pairs[first : first + per_shard]:
            members += [(f"{stem}.{ext}", image), (f"{stem}.mask.png", mask)]
        paths.append(write_tar(out / f"train-{k:06d}.tar", members))
    return paths


def write_parquet_shards(
    out: Path,
    pairs: list[tuple[str, bytes, bytes]],
    per_shard: int,
    columns: tuple[str, str] = ("image", "mask"),
    hf: bool = True,
) -> list[Path]:
    """``out/train-{k:06d}.parquet``: a ``__key__`` column, the image column as Hugging
    Face's ``{"bytes", "path"}`` (``hf``) or plain bytes, the mask column as plain bytes."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, first in enumerate(range(0, len(pairs), per_shard)):
        part = pairs[first : first + per_shard]
        images: list[Any] = [image for _, image, _ in part]
        if hf:
            images = [{"bytes": data, "path": f"{stem}.png"} for (stem, _, _), data in
                      zip(part, images, strict=True)]  # fmt: skip
        table = pa.table({
            "__key__": [stem for stem, _, _ in part],
            columns[0]: images,
            columns[1]: [mask for _, _, mask in part],
        })  # fmt: skip
        path = out / f"train-{k:06d}.parquet"
        pq.write_table(table, path, row_group_size=2)
        paths.append(path)
    return paths


def batches_of(spec: Any, split: str = "train", **kwargs: Any) -> tuple[Any, list[dict]]:
    """A DataModule of ``spec`` (no transforms, no shuffling, all in train) and the batches of
    ``split``."""
    kwargs = {
        "batch_size": 4, "num_workers": 0, "val_split": 0, "shuffle": False,
        "transforms": v2.Identity(), **kwargs,
    }  # fmt: skip
    dm = SegmentationDataModule(spec, **kwargs)
    dm.setup("fit")
    return dm, list(dm.make_loader(split))


def assert_same_batches(expected: list[dict], got: list[dict]) -> None:
    """Equal batches: the same keys, images and masks equal, in order."""
    assert len(got) == len(expected)
    for one, other in zip(expected, got, strict=True):
        assert sorted(one) == sorted(other)
        for key, value in one.items():
            assert value.dtype == other[key].dtype, key
            assert torch.equal(value, other[key]), key


def ddp_datamodule(spec: str) -> tuple[Any, Any]:
    """The DataModule each DDP process builds over the contract's shards, and its batch ids
    (as the folders' contract builds its own)."""
    from tests.datamodules.detection.segmentation_data import mask_ids

    dm = SegmentationDataModule(
        spec, transforms=v2.Identity(), batch_size=3, val_split=5, num_workers=0
    )  # fmt: skip
    return dm, mask_ids
