"""write_segmentation_shards: folder pairs and a VOC root into tar and Parquet shards that give
back exactly the source's batches (through the brace pattern, the folder or the dataset
index); a BMP mask becomes a PNG of the same values; bad sources are named."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from datamodules.detection import write_segmentation_shards
from datamodules.detection.problems import AnnotationError
from tests.datamodules.detection.segmentation_data import write_pairs, write_voc
from tests.datamodules.detection.segmentation_shard_data import assert_same_batches, batches_of

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.mark.parametrize("fmt", ["tar", "parquet"])
def test_folder_pairs_round_trip(tmp_path: Path, fmt: str) -> None:
    images, masks = write_pairs(tmp_path / "src", 9, lambda i: (12, 16) if i % 2 else (9, 20))
    nested_image, nested_mask = images / "sub" / "s100.png", masks / "sub" / "s100.png"
    nested_image.parent.mkdir()
    nested_mask.parent.mkdir()
    (images / "s000.png").rename(nested_image)
    (masks / "s000.png").rename(nested_mask)
    mask = np.array(Image.open(masks / "s003.png"))
    Image.fromarray(mask, mode="L").save(masks / "s003.bmp")  # a BMP mask: PNG in the shard
    (masks / "s003.png").unlink()
    paths = write_segmentation_shards((images, masks), tmp_path / "out", fmt=fmt, max_records=4)
    assert [Path(p).name for p in paths] == [f"train-00000{k}.{fmt}" for k in range(3)]
    listed = json.loads((tmp_path / "out" / "train.index.json").read_text())
    assert [entry["nsamples"] for entry in listed["shardlist"]] == [4, 4, 1]
    _, expected = batches_of((images, masks))
    for spec in (f"{tmp_path}/out/train-{{000000..000002}}.{fmt}", str(tmp_path / "out"),
                 str(tmp_path / "out" / "train.index.json")):  # fmt: skip
        dm, got = batches_of(spec)
        assert_same_batches(expected, got)
    names = [dm.indexes["train"].image_name(i) for i in (0, 8)]
    if fmt == "tar":  # keys are the paths below the image folder
        assert names[0].endswith("train-000000.tar: key 's001' (.png)")
        assert names[1].endswith("train-000002.tar: key 'sub/s100' (.png)")


def test_a_voc_root_round_trips_each_split(tmp_path: Path) -> None:
    root = write_voc(tmp_path / "voc")
    for split in ("train", "val"):
        write_segmentation_shards(root, tmp_path / "out", split=split)
    kwargs = {"num_classes": 21}
    source, expected = batches_of(root, **kwargs)
    shards, got = batches_of(str(tmp_path / "out" / "train-000000.tar"),
                             val=str(tmp_path / "out" / "val-000000.tar"), **kwargs)  # fmt: skip
    assert_same_batches(expected, got)
    assert_same_batches(list(source.make_loader("val")), list(shards.make_loader("val")))
    assert shards.indexes["train"].image_name(0).endswith("key '2007_000000' (.jpg)")


def test_bad_sources_are_named(tmp_path: Path) -> None:
    images, masks = write_pairs(tmp_path / "src", 2)
    (masks / "s001.png").unlink()
    with pytest.raises(AnnotationError, match=r"s001.png"):
        write_segmentation_shards((images, masks), tmp_path / "out")
    with pytest.raises(ValueError, match="source"):
        write_segmentation_shards(str(tmp_path / "x-*.tar"), tmp_path / "out")
    with pytest.raises(ValueError, match="split='test'"):
        write_segmentation_shards(write_voc(tmp_path / "voc"), tmp_path / "out", split="test")
    with pytest.raises(ValueError, match="fmt"):
        write_segmentation_shards((images, masks), tmp_path / "out", fmt="jsonl")
