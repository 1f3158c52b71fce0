"""The COCO parser's bulk path: the same index as the object-by-object parser, the checking
parser for a file with problems, and an index without segmentations for masks=False."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from datamodules.detection.arrays import IndexArrays, IndexBuilder
from datamodules.detection.coco import parse_coco
from datamodules.detection.index import load_index
from datamodules.detection.problems import AnnotationError
from tests.datamodules.detection.detection_data import coco_annotations, write_coco, write_image


def _segmentations(arrays: dict[str, np.ndarray]) -> list:
    data, offsets = arrays["segm_bytes"].tobytes(), arrays["segm_offsets"]
    return [
        json.loads(data[offsets[i] : offsets[i + 1]]) if offsets[i + 1] > offsets[i] else None
        for i in range(len(offsets) - 1)
    ]


def _same(bulk: IndexArrays, objects: IndexBuilder, segmentations: bool = True) -> None:
    expected = objects.arrays()
    assert bulk.classes == expected.classes and bulk.info == expected.info
    for name, array in expected.arrays.items():
        if name.startswith("segm"):
            continue
        assert bulk.arrays[name].dtype == array.dtype, name
        assert bulk.arrays[name].tolist() == array.tolist(), name
    if segmentations:
        assert _segmentations(bulk.arrays) == _segmentations(expected.arrays)


def test_the_bulk_path_gives_the_object_by_object_index(tmp_path: Path) -> None:
    anns = coco_annotations()
    # Out of image order, a polygon of two parts, integer and float coordinates.
    anns[3]["segmentation"] = [[1, 2, 9, 2, 9, 8], [10.5, 1, 14, 1, 14, 6.25]]
    anns.reverse()
    path = write_coco(tmp_path, anns=anns)
    bulk = parse_coco(str(path))
    assert isinstance(bulk, IndexArrays)
    objects = parse_coco(str(path), bulk=False)
    assert isinstance(objects, IndexBuilder)
    _same(bulk, objects)
    segmentations = _segmentations(bulk.arrays)
    assert [[1, 2, 9, 2, 9, 8], [10.5, 1, 14, 1, 14, 6.25]] in segmentations
    assert bulk.info["degenerate"] == 1 and len(bulk.arrays["labels"]) == 11


def test_without_segmentations_none_are_read_or_kept(tmp_path: Path) -> None:
    anns = coco_annotations()
    anns[0]["segmentation"] = [[1, 2, 3, 4, 5]]  # malformed: unread for boxes only
    path = write_coco(tmp_path, anns=anns)
    bulk = parse_coco(str(path), segmentations=False)
    assert isinstance(bulk, IndexArrays)
    _same(bulk, parse_coco(str(path), bulk=False, segmentations=False), segmentations=False)
    assert len(bulk.arrays["segm_bytes"]) == 0
    assert bulk.arrays["segm_offsets"].tolist() == [0] * 12
    index = load_index(path, "train", segmentations=False)
    assert index.num_objects == 11 and index.meta["segmentations"] is False
    with pytest.raises(ValueError, match="built without segmentations"):
        index.segmentation(0)
    # The index with segmentations (masks=True) is another, and names the polygon.
    with pytest.raises(AnnotationError, match=f"{path}: annotation id 100: polygon 0 has 5"):
        load_index(path, "train")


def test_brackets_in_a_file_name_send_the_file_to_the_checking_parser(tmp_path: Path) -> None:
    path = write_coco(tmp_path)
    data = json.loads(path.read_text())
    data["images"][0]["file_name"] = "images/a[[1]].png"
    write_image(tmp_path / "images" / "a[[1]].png", 48, 32)
    path.write_text(json.dumps(data))
    assert isinstance(parse_coco(str(path)), IndexBuilder)  # "[[" marks no polygon here
    index = load_index(path, "train")
    assert index.image_path(0) == str(tmp_path / "images" / "a[[1]].png")
    assert index.segmentation(0) == [[2, 3, 12, 3, 12, 15, 2, 15]]


@pytest.mark.parametrize(
    "change",
    [
        {"image_id": 1.0},  # a float id: the checking parser decides
        {"bbox": [2, 3, True, 12]},
        {"segmentation": [[1, 2, 3, 4, 5, 6, 7]]},
        {"segmentation": {"size": [32], "counts": "ab"}},
    ],
)
def test_values_of_another_kind_leave_the_bulk_path(tmp_path: Path, change: dict) -> None:
    anns = coco_annotations()
    anns[0].update(change)
    path = write_coco(tmp_path, anns=anns)
    assert parse_coco(str(path), on_error="skip").__class__ is IndexBuilder


def test_annotations_without_images_are_named(tmp_path: Path) -> None:
    path = write_coco(tmp_path)
    data = json.loads(path.read_text())
    data["images"] = []
    path.write_text(json.dumps(data))
    with pytest.raises(AnnotationError, match="annotation id 100: image_id 1 is not among"):
        load_index(path, "train", segmentations=False)
