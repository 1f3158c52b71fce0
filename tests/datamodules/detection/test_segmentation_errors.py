"""SegmentationDataModule's bad samples: each named with its file under on_error="raise", left
out and counted in dm.skipped under "skip" (at setup: unpaired stems, lossy masks, VOC ids
without files; in the loaders, also from workers: undecodable files, sizes that differ,
class values out of range, colour masks)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from torchvision.transforms import v2

from datamodules import SegmentationDataModule
from datamodules.detection.problems import AnnotationError
from datamodules.imaging.decoding import ImageDecodeError
from tests.datamodules.detection.segmentation_data import mask_ids, write_pairs, write_voc


def pairs(tmp_path: Path, count: int = 6) -> tuple[Path, Path]:
    return write_pairs(tmp_path, count)


def dm_of(folders: tuple[Path, Path], **kwargs: object) -> SegmentationDataModule:
    kwargs = {
        "batch_size": 3, "num_workers": 0, "val_split": 0, "shuffle": False,
        "transforms": v2.Identity(), **kwargs,
    }  # fmt: skip
    return SegmentationDataModule(folders, **kwargs)  # type: ignore[arg-type]


def ids_of(dm: SegmentationDataModule) -> list[int]:
    return [i for batch in dm.train_dataloader() for i in mask_ids(batch)]


def test_a_stem_on_one_side_only_is_named_or_skipped(tmp_path: Path) -> None:
    images, masks = pairs(tmp_path)
    (masks / "s001.png").unlink()
    extra = masks / "orphan.png"
    Image.new("L", (4, 4)).save(extra)
    with pytest.raises(AnnotationError, match=r"2 file\(s\) have no partner .*orphan.png"):
        dm_of((images, masks)).setup()
    dm = dm_of((images, masks), on_error="skip")
    dm.setup()
    assert dm.split_size("train") == 5
    assert dm.skipped.records == 2
    assert sorted(dm.skipped.messages) == [
        f"{images / 's001.png'}: an image without a mask (stem 's001')",
        f"{extra}: a mask without an image (stem 'orphan')",
    ]
    assert ids_of(dm) == [0, 2, 3, 4, 5]


def test_a_jpeg_mask_is_refused_naming_it(tmp_path: Path) -> None:
    images, masks = pairs(tmp_path)
    (masks / "s002.png").rename(masks / "s002.jpg")
    with pytest.raises(AnnotationError, match=r"s002.jpg: a mask in a lossy format"):
        dm_of((images, masks)).setup()


def test_undecodable_image_is_named_or_left_out_of_its_batch(tmp_path: Path) -> None:
    images, masks = pairs(tmp_path)
    (images / "s004.png").write_bytes(b"not a png at all")
    with pytest.raises(ImageDecodeError, match="s004.png"):
        ids_of(dm_of((images, masks)))
    dm = dm_of((images, masks), on_error="skip")
    assert ids_of(dm) == [0, 1, 2, 3, 5]
    assert dm.skipped.records == 1 and dm.skipped[0][0] == str(images / "s004.png")


def test_a_missing_mask_file_after_setup_is_named(tmp_path: Path) -> None:
    images, masks = pairs(tmp_path)
    dm = dm_of((images, masks))
    dm.setup()
    (masks / "s003.png").unlink()
    with pytest.raises(ImageDecodeError, match=r"s003.png.*no such file"):
        ids_of(dm)


def test_sizes_that_differ_are_named_with_both_files(tmp_path: Path) -> None:
    images, masks = pairs(tmp_path)
    Image.new("L", (10, 10)).save(masks / "s002.png")
    named = r"s002.png: the mask is 10x10 .*images/s002.png is 12x16"
    with pytest.raises(AnnotationError, match=named):
        ids_of(dm_of((images, masks)))
    dm = dm_of((images, masks), on_error="skip", num_workers=1)
    assert ids_of(dm) == [0, 1, 3, 4, 5]  # the skip comes back from the worker
    assert dm.skipped.records == 1
    assert dm.skipped.messages[0].startswith(f"{masks / 's002.png'}: the mask is 10x10")


def test_class_values_at_or_above_num_classes_are_named_with_the_value(tmp_path: Path) -> None:
    images, masks = pairs(tmp_path)  # masks hold i % 3 and i: sample 5 holds 5
    named = r"s005.png: class value 5 is not below num_classes=5"
    with pytest.raises(AnnotationError, match=named):
        ids_of(dm_of((images, masks), num_classes=5))
    dm = dm_of((images, masks), num_classes=4, on_error="skip")
    assert ids_of(dm) == [0, 1, 2, 3]
    assert [where for where, _ in dm.skipped] == [str(masks / "s004.png"), str(masks / "s005.png")]
    assert ids_of(dm_of((images, masks), num_classes=6)) == list(range(6))


def test_ignore_index_is_not_a_bad_value_and_may_be_negative(tmp_path: Path) -> None:
    images, masks = pairs(tmp_path, 2)
    mask = np.zeros((12, 16), dtype=np.uint8)
    mask[0, 0] = 255
    Image.fromarray(mask, mode="L").save(masks / "s000.png")
    batch = next(iter(dm_of((images, masks), num_classes=2).train_dataloader()))
    assert int(batch["mask"][0, 0, 0]) == 255
    dm = dm_of((images, masks), ignore_index=-100, num_classes=2, on_error="skip")
    assert ids_of(dm) == [1] and "class value 255" in dm.skipped.messages[0]


def test_a_colour_mask_is_refused_naming_its_mode(tmp_path: Path) -> None:
    images, masks = pairs(tmp_path, 2)
    Image.new("RGB", (16, 12)).save(masks / "s001.png")
    with pytest.raises(AnnotationError, match=r"s001.png: a mask of PIL mode 'RGB'"):
        ids_of(dm_of((images, masks)))


def test_a_batch_of_only_bad_samples_holds_the_next_good_one(tmp_path: Path) -> None:
    images, masks = pairs(tmp_path)
    for i in (0, 1, 2):
        (images / f"s00{i}.png").write_bytes(b"broken")
    dm = dm_of((images, masks), on_error="skip")
    batches = [mask_ids(b) for b in dm.train_dataloader()]
    assert batches == [[3], [3, 4, 5]]
    assert dm.skipped.records == 4  # three unreadable, one repeated
    assert dm.skipped.messages[-1] == f"{images / 's003.png'}: repeated to fill an all-bad batch"


def test_voc_ids_without_their_files_are_named_with_the_line(tmp_path: Path) -> None:
    root = write_voc(tmp_path / "voc")
    (root / "JPEGImages" / "2007_000002.jpg").unlink()
    listing = root / "ImageSets" / "Segmentation" / "train.txt"
    with pytest.raises(AnnotationError, match=r"train.txt: line 3: id '2007_000002': no such"):
        SegmentationDataModule(root, num_workers=0).setup()
    dm = SegmentationDataModule(root, num_workers=0, on_error="skip")
    dm.setup()
    assert dm.split_size("train") == 3 and dm.skipped.records == 1
    assert dm.skipped.messages[0].startswith(f"{listing}: line 3: id '2007_000002'")
