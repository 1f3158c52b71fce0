"""SegmentationDataModule over tar and Parquet shards written with tarfile and pyarrow from the
folder fixtures' pairs: exactly the folders' batches (images and masks equal) from every form
of a shard spec, with workers, in both splits; a Trainer's fit; the index holds strings only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
from torchvision.transforms import v2

from datamodules import SegmentationDataModule
from tests.datamodules.detection.segmentation_data import mask_ids, write_pairs
from tests.datamodules.detection.segmentation_shard_data import (
    assert_same_batches,
    batches_of,
    pair_bytes,
    write_parquet_shards,
    write_tar,
    write_tar_shards,
)
from tests.datamodules.detection.test_segmentation import TinySegmenter

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
COUNT = 10


def sizes(i: int) -> tuple[int, int]:
    return (12, 16) if i % 3 else (10, 20)  # batches mix sizes: padded


@pytest.fixture
def data(tmp_path: Path) -> tuple[tuple[Path, Path], Path]:
    """The folder pairs, and ``tar/`` and ``parquet/`` shards of them (4, 4 and 2 records)."""
    folders = write_pairs(tmp_path / "folders", COUNT, sizes)
    pairs = pair_bytes(*folders)
    write_tar_shards(tmp_path / "tar", pairs, 4)
    write_parquet_shards(tmp_path / "parquet", pairs, 4)
    return folders, tmp_path


def spec_of(out: Path, fmt: str, form: str) -> Any:
    return {
        "brace": str(out / f"train-{{000000..000002}}.{fmt}"),
        "glob": str(out / f"*.{fmt}"),
        "folder": str(out),
        "list": [str(path) for path in sorted(out.glob(f"*.{fmt}"))],
        "tuple": tuple(str(path) for path in sorted(out.glob(f"*.{fmt}"))[:2]),
    }[form]


@pytest.mark.parametrize("form", ["brace", "glob", "folder", "list"])
@pytest.mark.parametrize("fmt", ["tar", "parquet"])
def test_shards_give_exactly_the_folders_batches(data: Any, fmt: str, form: str) -> None:
    folders, root = data
    _, expected = batches_of(folders)
    dm, got = batches_of(spec_of(root / fmt, fmt, form))
    assert_same_batches(expected, got)
    assert [i for batch in got for i in mask_ids(batch)] == list(range(COUNT))
    index = dm.indexes["train"]
    assert index.from_shards and len(index) == COUNT and index.versions == {}  # local shards
    # Flat string arrays only: workers share them without per-sample Python objects.
    assert index.images.dtype.kind == "U" and index.masks.dtype.kind == "U"
    first = "train-000000." + fmt
    assert index.image_name(0) == (
        f"{root / fmt / first}: key 's000' (.png)" if fmt == "tar"
        else f"{root / fmt / first}: row 0 (.image)"
    )  # fmt: skip


def test_a_tuple_of_two_shards_is_shards_not_a_folder_pair(data: Any) -> None:
    folders, root = data
    _, expected = batches_of(folders, splits={"train": list(range(8)), "val": [8, 9]})
    _, got = batches_of(spec_of(root / "tar", "tar", "tuple"))
    assert_same_batches(expected, got)


def test_workers_hf_format_and_shards_for_each_split(data: Any) -> None:
    folders, root = data
    kwargs: dict[str, Any] = {"batch_format": "hf", "num_workers": 2}
    _, expected = batches_of(folders, **kwargs)
    parquet = spec_of(root / "parquet", "parquet", "glob")
    dm, got = batches_of(spec_of(root / "tar", "tar", "glob"), val=parquet, **kwargs)
    assert sorted(got[0]) == ["labels", "pixel_values"]
    assert_same_batches(expected, got)
    assert dm.split_size("val") == COUNT
    assert_same_batches(expected, list(dm.make_loader("val")))  # eval: no transform, in order


def test_parquet_columns_of_other_names_and_plain_bytes(data: Any) -> None:
    folders, root = data
    write_parquet_shards(root / "named", pair_bytes(*folders), 3, ("img", "label"), hf=False)
    _, expected = batches_of(folders)
    _, got = batches_of(str(root / "named"), image_key="img", mask_key="label")
    assert_same_batches(expected, got)


def test_a_jpeg_image_member_and_a_seg_png_mask_member(tmp_path: Path) -> None:
    folders = write_pairs(tmp_path / "folders", 5, image_ext=".jpg")
    pairs = pair_bytes(*folders)
    write_tar_shards(tmp_path / "tar", pairs, 5, ext="jpg")
    shard = tmp_path / "tar" / "train-000000.tar"
    renamed = tmp_path / "seg" / "train-000000.tar"
    members = []
    for stem, image, mask in pairs:
        members += [(f"{stem}.jpg", image), (f"{stem}.seg.png", mask)]
    write_tar(renamed, members)
    _, expected = batches_of(folders)
    assert_same_batches(expected, batches_of(str(shard))[1])
    assert_same_batches(expected, batches_of(str(renamed))[1])  # mask_key's third default


def test_a_trainer_fits_on_shards(data: Any) -> None:
    _, root = data
    dm = SegmentationDataModule(
        str(root / "tar"), val=str(root / "parquet" / "train-000001.parquet"), batch_size=3,
        num_workers=0, transforms=v2.Identity(),
    )  # fmt: skip
    model = TinySegmenter(COUNT)
    trainer = pl.Trainer(
        max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(model, datamodule=dm)
    assert sorted(model.seen["train"]) == list(range(COUNT))
    assert model.seen["val"] == [4, 5, 6, 7]  # the second Parquet shard's records, in order
