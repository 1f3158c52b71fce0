"""The annotation index: COCO, YOLO and VOC parsed into exact flat arrays, cached and mapped,
and bad annotations named with their file and place."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from datamodules.detection.index import BESIDE, detect_format, load_index
from datamodules.detection.problems import AnnotationError
from tests.datamodules.detection.detection_data import (
    COCO_SIZES,
    coco_annotations,
    write_coco,
    write_voc,
    write_yolo,
)


def test_coco_boxes_labels_crowd_and_segmentations(tmp_path: Path) -> None:
    path = write_coco(tmp_path)
    index = load_index(path, "train")
    assert index.image_path(0) == str(tmp_path / "images" / "img1.png")
    assert index.classes == ["cat", "dog", "zebra"]  # categories by id 1, 3, 7
    assert index.image_ids.tolist() == sorted(COCO_SIZES)
    assert index.heights.tolist() == [COCO_SIZES[i][1] for i in sorted(COCO_SIZES)]
    # Mapped from the index's files (plain views of the mappings), not read into memory.
    assert isinstance(index.boxes.base, np.memmap) and isinstance(index.labels.base, np.memmap)
    assert not index.boxes.flags.owndata and not index.boxes.flags.writeable
    # Image 1: its box, and one reaching past the image clipped to it (48 x 32).
    assert index.boxes[index.rows(0)].tolist() == [[2, 3, 12, 15], [40, 20, 48, 32]]
    assert index.labels[index.rows(0)].tolist() == [1, 1]  # category 3 (1 % 3 -> 3), 3
    # Image 2's zero-width box is left out and counted; image 6 has no objects.
    assert index.counts().tolist() == [2, 1, 2, 1, 0, 1, 1, 1, 1, 1]
    assert index.meta["degenerate"] == 1
    crowd_row = index.rows(2).start + 1
    assert index.crowd.sum() == 1 and bool(index.crowd[crowd_row])
    assert index.boxes[crowd_row].tolist() == [20, 10, 28, 16]
    assert index.annotation_ids[crowd_row] == 202
    assert index.segmentation(crowd_row)["counts"] == [320, 6, 26, 6, 1178]
    assert index.segmentation(0) == [[2, 3, 12, 3, 12, 15, 2, 15]]
    assert index.counts(crowd=False).tolist() == [2, 1, 1, 1, 0, 1, 1, 1, 1, 1]


def test_the_index_is_parsed_once_and_rebuilt_when_the_annotations_change(tmp_path: Path) -> None:
    path = write_coco(tmp_path)
    first = load_index(path, "train")
    assert os.path.dirname(first.path) == str(tmp_path / BESIDE)
    assert load_index(path, "train").path == first.path
    data = json.loads(path.read_text())
    data["annotations"] = data["annotations"][:1]
    path.write_text(json.dumps(data))
    changed = load_index(path, "train")
    assert changed.path != first.path and changed.num_objects == 1
    elsewhere = load_index(path, "train", cache=tmp_path / "cache")
    assert os.path.dirname(elsewhere.path) == str(tmp_path / "cache")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"image_id": 99}, "annotation id 100: image_id 99 is not among the file's images"),
        (
            {"category_id": 5},
            "annotation id 100: category_id 5 is not among the categories [1, 3, 7]",
        ),
        ({"segmentation": [[1, 2, 3, 4, 5]]}, "annotation id 100: polygon 0 has 5 numbers"),
        ({"bbox": [1, 2, 3]}, "annotation id 100: bbox [1, 2, 3] is not four numbers"),
    ],
)
def test_bad_coco_annotations_are_named_or_skipped(
    tmp_path: Path, change: dict, message: str
) -> None:
    anns = coco_annotations()
    anns[0].update(change)
    path = write_coco(tmp_path, anns=anns)
    with pytest.raises(AnnotationError, match=f"{path}: {message}".replace("[", r"\[")):
        load_index(path, "train")
    skipped = load_index(path, "train", on_error="skip")
    assert skipped.num_objects == 10 and len(skipped.meta["skipped"]) == 1
    assert skipped.meta["skipped"][0][0] == f"{path}: annotation id 100"


def test_a_missing_coco_image_is_named(tmp_path: Path) -> None:
    path = write_coco(tmp_path)
    (tmp_path / "images" / "img5.png").unlink()
    with pytest.raises(AnnotationError, match=r"image id 5: image file .*img5.png is missing"):
        load_index(path, "train")
    assert len(load_index(path, "train", on_error="skip")) == len(COCO_SIZES) - 1


def test_yolo_data_yaml_boxes_polygons_and_splits(tmp_path: Path) -> None:
    spec = write_yolo(tmp_path)
    assert detect_format(str(spec)) == "yolo"
    train = load_index(spec, "train")
    assert train.classes == ["cat", "dog"]
    assert [os.path.basename(train.image_path(i)) for i in range(len(train))] == [
        "a.png", "b.png", "c.png", "d.png"
    ]  # fmt: skip
    # a (40 x 20): centre boxes in pixels; b (20 x 40): the polygon's bounds.
    assert train.boxes.tolist() == [[10, 5, 30, 15], [8, 3, 12, 7], [2, 4, 6, 16]]
    assert train.labels.tolist() == [0, 1, 1]
    assert train.counts().tolist() == [2, 1, 0, 0]
    assert train.segmentation(2) == [[2.0, 4.0, 6.0, 4.0, 6.0, 16.0]]
    val = load_index(spec, "val", classes=train.classes)
    assert val.boxes.tolist() == [[0, 0, 40, 20]] and load_index(spec, "test") is None


def test_yolo_folder_without_yaml(tmp_path: Path) -> None:
    write_yolo(tmp_path, yaml=False)
    index = load_index(tmp_path, "train")
    assert len(index) == 5 and index.classes == ["0", "1"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("0 0.5 0.5 0.5", "4 fields"),
        ("0 0.5 0.5 1.5 0.5", r"value 1.5 is outside \[0, 1\]"),
        ("2 0.5 0.5 0.5 0.5", r"class 2 is outside 0..1"),
    ],
)
def test_bad_yolo_lines_are_named_with_file_and_line(
    tmp_path: Path, line: str, message: str
) -> None:
    spec = write_yolo(tmp_path)
    label = tmp_path / "labels" / "train" / "a.txt"
    label.write_text(f"0 0.5 0.5 0.5 0.5\n{line}\n")
    with pytest.raises(AnnotationError, match=f"{label}: line 2: {message}"):
        load_index(spec, "train")
    index = load_index(spec, "train", on_error="skip")
    assert index.counts().tolist() == [1, 1, 0, 0]
    assert index.meta["skipped"][0][0] == f"{label}: line 2"


def test_voc_difficult_is_crowd_and_split_files_choose_images(tmp_path: Path) -> None:
    root = write_voc(tmp_path / "voc")
    train = load_index(root, "train")
    assert train.classes == ["cat", "dog", "person"]
    assert train.boxes.tolist() == [[1, 2, 20, 25], [25, 5, 45, 28], [3, 4, 13, 14]]
    assert train.labels.tolist() == [1, 2, 0] and train.crowd.tolist() == [False, True, False]
    assert (train.heights.tolist(), train.widths.tolist()) == ([30, 50], [50, 30])
    val = load_index(root, "val", classes=train.classes)
    assert val.boxes.tolist() == [[10, 10, 30, 20]]
    listed = load_index(root / "ImageSets" / "Main" / "val.txt", "train", classes=train.classes)
    assert listed.boxes.tolist() == [[10, 10, 30, 20]]


def test_voc_unknown_class_is_named(tmp_path: Path) -> None:
    root = write_voc(tmp_path / "voc")
    with pytest.raises(AnnotationError, match=r"000001.xml: object 1: class 'person' is not"):
        load_index(root, "train", classes=["cat", "dog"])


def test_not_a_dataset_is_refused_naming_the_formats(tmp_path: Path) -> None:
    with pytest.raises(AnnotationError, match="give a COCO JSON file, a YOLO data.yaml"):
        load_index(tmp_path / "nothing.json", "train")
