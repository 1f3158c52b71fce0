"""Detection shards, local: write_detection_shards turns COCO, YOLO and VOC into tar and
Parquet shards that read back exactly as the source (images, boxes, labels, masks, crowd),
webdataset reads the tars, and bad records are named with shard and key or counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from datamodules import DetectionDataModule
from datamodules.detection import write_detection_shards
from datamodules.detection.problems import AnnotationError
from tests.datamodules.detection.detection_data import (
    COCO_SIZES,
    write_coco,
    write_voc,
    write_yolo,
)
from tests.datamodules.detection.shard_data import (
    assert_same,
    boxes_json,
    by_image_id,
    png,
    write_tar,
)

pytest.importorskip("pycocotools")  # the roundtrips compare masks


@pytest.mark.parametrize("fmt", ["tar", "parquet"])
def test_coco_shards_read_back_exactly_as_the_coco_file(tmp_path: Path, fmt: str) -> None:
    coco = write_coco(tmp_path / "coco")
    out = tmp_path / "shards"
    paths = write_detection_shards(coco, out, fmt=fmt, max_records=4)
    assert [Path(p).name for p in paths] == [f"train-00000{k}.{fmt}" for k in range(3)]
    assert json.loads((out / "classes.json").read_text()) == ["cat", "dog", "zebra"]
    assert (out / "train.index.json").exists()
    source_dm, source = by_image_id(coco)
    brace = str(out / f"train-{{000000..000002}}.{fmt}")
    for spec in (brace, str(out), paths, out / "train.index.json"):
        dm, got = by_image_id(spec)
        assert dm.classes == source_dm.classes == ["cat", "dog", "zebra"]
        assert_same(source, got)
    assert sorted(got) == sorted(COCO_SIZES)
    assert got[3][1]["crowd_boxes"].tolist() == [[20.0, 10.0, 28.0, 16.0]]  # the RLE's object
    assert int(got[1][1]["masks"][0].sum()) == 10 * 12  # the polygon, as pycocotools fills it


@pytest.mark.parametrize("fmt", ["tar", "parquet"])
def test_yolo_and_voc_shards_read_back_exactly_as_their_source(tmp_path: Path, fmt: str) -> None:
    yolo, voc = write_yolo(tmp_path / "yolo"), write_voc(tmp_path / "voc")
    for source, split in ((yolo, "train"), (yolo, "val"), (voc, "train")):
        out = tmp_path / f"{source.name}-{split}"
        write_detection_shards(source, out, split=split, fmt=fmt)
        expected_dm, expected = by_image_id(source, split=split, val_split=0.0)
        dm, got = by_image_id(out, masks=False)
        assert dm.classes == expected_dm.classes
        assert len(got) == len(expected) > 0
        # YOLO and VOC number images by position in their split; so do the shards.
        for (_, (image, target)), (_, (other_image, other)) in zip(
            sorted(expected.items()), sorted(got.items()), strict=True
        ):
            assert image.equal(other_image)
            assert target["boxes"].tolist() == other["boxes"].tolist()
            assert target["labels"].tolist() == other["labels"].tolist()


def test_webdataset_reads_the_tars_keys_and_members(tmp_path: Path) -> None:
    webdataset = pytest.importorskip("webdataset")
    coco = write_coco(tmp_path / "coco")
    paths = write_detection_shards(coco, tmp_path / "shards", max_records=4)
    records = list(webdataset.WebDataset(paths, shardshuffle=False).decode("rgb8"))
    assert [r["__key__"] for r in records] == [f"img{i}" for i in sorted(COCO_SIZES)]
    first = records[0]
    assert sorted(k for k in first if not k.startswith("__")) == ["json", "png"]
    assert first["png"].shape == (32, 48, 3)  # webdataset decodes rgb8 as HWC
    meta = first["json"]
    assert meta["image_id"] == 1 and (meta["width"], meta["height"]) == (48, 32)
    assert meta["boxes"] == [[2.0, 3.0, 12.0, 15.0], [40.0, 20.0, 48.0, 32.0]]
    assert meta["labels"] == [1, 1] and meta["category_id"] == [3, 3]  # dog, dog
    assert meta["segmentation"] == [[[2, 3, 12, 3, 12, 15, 2, 15]], None]
    assert meta["annotation_id"] == [100, 200] and meta["iscrowd"] == [0, 0]


def test_hand_written_records_names_sizes_and_default_ids(tmp_path: Path) -> None:
    """Labels as class names (classes sorted), no width / height (read from the image), no
    image_id (the record's position), jpg and png members."""
    shard = write_tar(tmp_path / "a.tar", [
        ("x/one.png", png(16, 12)), ("x/one.json", boxes_json(["zebra", "ant"])),
        ("x/two.png", png(20, 10, 30)), ("x/two.json", boxes_json([], image_id=70)),
    ])  # fmt: skip
    dm, got = by_image_id(shard, masks=False)
    assert dm.classes == ["ant", "zebra"]
    assert sorted(got) == [0, 70]
    image, target = got[0]
    assert image.shape == (3, 12, 16)
    assert target["labels"].tolist() == [2, 1]  # 1 + the class position
    assert target["boxes"].tolist() == [[1.0, 2.0, 9.0, 10.0], [2.0, 2.0, 10.0, 10.0]]
    assert got[70][1]["boxes"].shape == (0, 4)


def bad_shard(tmp_path: Path) -> Path:
    (tmp_path / "classes.json").write_text('["cat", "dog"]')
    return write_tar(tmp_path / "bad.tar", [
        ("good.png", png()), ("good.json", boxes_json([1])),
        ("noimage.json", boxes_json([0])),
        ("nojson.png", png()),
        ("broken.png", png()), ("broken.json", b"{not json"),
        ("unknown.png", png()), ("unknown.json", boxes_json([0, 5])),
        ("short.png", png()), ("short.json", boxes_json([0], iscrowd=[0, 1])),
    ])  # fmt: skip


def test_bad_records_are_named_with_shard_and_key(tmp_path: Path) -> None:
    shard = bad_shard(tmp_path)
    with pytest.raises(AnnotationError, match=r"bad\.tar: key 'noimage': no image member"):
        DetectionDataModule(shard, val_split=0).setup("fit")


def test_bad_records_are_counted_under_skip(tmp_path: Path) -> None:
    shard = bad_shard(tmp_path)
    dm, got = by_image_id(shard, masks=False, on_error="skip")
    assert len(got) == 1 and got[0][1]["labels"].tolist() == [2]
    reasons = {where: why for where, why in dm.indexes["train"].meta["skipped"]}
    assert sorted(reasons) == [
        f"{shard}: key '{k}'" for k in ("broken", "noimage", "nojson", "short", "unknown")
    ]
    assert reasons[f"{shard}: key 'nojson'"] == "no json member"
    assert reasons[f"{shard}: key 'broken'"].startswith("malformed JSON")
    assert reasons[f"{shard}: key 'unknown'"] == "unknown category 5 (classes: ['cat', 'dog'])"
    assert "'iscrowd' is not a list of one entry per box (1)" in reasons[f"{shard}: key 'short'"]
    assert len(dm.skipped) == 5


def test_shard_errors_name_the_shard(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no shard matches"):
        DetectionDataModule(str(tmp_path / "none-*.tar"), val_split=0).setup("fit")
    gz = tmp_path / "x.tar.gz"
    gz.write_bytes(b"")
    with pytest.raises(AnnotationError, match=r"x\.tar\.gz: not a detection shard"):
        DetectionDataModule([gz], val_split=0).setup("fit")
    cut = tmp_path / "cut.tar"
    cut.write_bytes(write_tar(tmp_path / "whole.tar", [("a.png", png())]).read_bytes()[:700])
    with pytest.raises(AnnotationError, match=r"cut\.tar: damaged tar archive"):
        DetectionDataModule(cut, val_split=0).setup("fit")
    positions = write_tar(tmp_path / "p" / "p.tar", [("a.png", png()), ("a.json", boxes_json([0]))])
    with pytest.raises(AnnotationError, match="no classes are known"):
        DetectionDataModule(positions, val_split=0).setup("fit")


def test_the_index_is_parsed_once_and_rebuilt_when_a_shard_changes(tmp_path: Path) -> None:
    coco = write_coco(tmp_path / "coco")
    out = tmp_path / "shards"
    write_detection_shards(coco, out, max_records=4)
    first, _ = by_image_id(out, masks=False)
    again, _ = by_image_id(out, masks=False)
    assert again.indexes["train"].path == first.indexes["train"].path
    assert Path(first.indexes["train"].path).parent == out / ".datamodules-detection"
    write_detection_shards(coco, out, max_records=5)  # other shards under the same names
    changed, got = by_image_id(out, masks=False)
    assert changed.indexes["train"].path != first.indexes["train"].path
    assert len(got) == len(COCO_SIZES)


def test_the_writer_refuses_another_datasets_classes_and_unknown_splits(tmp_path: Path) -> None:
    out = tmp_path / "shards"
    write_detection_shards(write_coco(tmp_path / "coco"), out)
    with pytest.raises(AnnotationError, match="classes.json: names the classes"):
        write_detection_shards(write_yolo(tmp_path / "yolo"), out)
    with pytest.raises(ValueError, match="fmt"):
        write_detection_shards(tmp_path / "coco" / "train.json", out, fmt="jsonl")
    with pytest.raises(ValueError, match="split='test'"):
        write_detection_shards(write_yolo(tmp_path / "y2"), tmp_path / "o2", split="test")


def test_parquet_with_a_struct_json_column_and_hf_images(tmp_path: Path) -> None:
    """A table another tool wrote: ``image`` as Hugging Face's ``{"bytes", "path"}``, ``json``
    a struct column (not text), labels as class names with classes.json beside it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "classes.json").write_text('["cat", "dog"]')
    images = [{"bytes": png(16, 12, 10 * i), "path": f"{i}.png"} for i in range(3)]
    meta = [
        {"boxes": [[1.0, 1.0, 5.0, 6.0]], "labels": ["dog"], "image_id": 10 + i, "width": 16,
         "height": 12}
        for i in range(3)
    ]  # fmt: skip
    pq.write_table(pa.table({"image": images, "json": meta}), tmp_path / "t.parquet")
    dm, got = by_image_id(tmp_path / "t.parquet", masks=False)
    assert dm.classes == ["cat", "dog"] and sorted(got) == [10, 11, 12]
    assert got[11][1]["labels"].tolist() == [2] and got[11][1]["boxes"].tolist() == [[1, 1, 5, 6]]
    assert got[12][0][0, 0, 0].item() == 20  # the third image's red


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"image_key": 3}, "image_key"),
        ({"cache_limit": "1GB"}, "cache_limit"),
        ({"retries": -1}, "retries"),
        ({"storage_options": 5}, "storage_options"),
        ({"val": [3]}, r"val\[0\]"),
    ],
)
def test_bad_shard_arguments_are_named(tmp_path: Path, kwargs: dict, match: str) -> None:
    with pytest.raises((TypeError, ValueError), match=match):
        DetectionDataModule(tmp_path / "x.tar", **kwargs)


def test_credentials_are_not_saved_with_the_hyperparameters() -> None:
    options = {"endpoint_url": "http://127.0.0.1:9", "key": "k", "secret": "s"}
    dm = DetectionDataModule("s3://bucket/train-{0..3}.tar", storage_options=options)
    saved = dm.hparams["storage_options"]
    assert saved["endpoint_url"] == options["endpoint_url"]
    assert "s" not in saved.values() and "k" not in saved.values()
