"""Bad segmentation shard records: named with shard and key under on_error="raise", left out
and counted in dm.skipped under "skip" (at setup: a record without an image or a mask member,
a lossy tar mask member, a member repeated; in the loaders, also from workers: an undecodable
mask, a JPEG mask in a Parquet column, a null cell, a mask of another size)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from datamodules.detection.problems import AnnotationError
from datamodules.imaging.decoding import ImageDecodeError
from tests.datamodules.detection.segmentation_data import mask_ids, write_pairs
from tests.datamodules.detection.segmentation_shard_data import batches_of, pair_bytes, write_tar

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def ids(batches: list[dict]) -> list[int]:
    return [i for batch in batches for i in mask_ids(batch)]


def jpeg_mask(mask: bytes) -> bytes:
    out = io.BytesIO()
    Image.open(io.BytesIO(mask)).save(out, "JPEG", quality=100)
    return out.getvalue()


@pytest.fixture
def pairs(tmp_path: Path) -> list[tuple[str, bytes, bytes]]:
    return pair_bytes(*write_pairs(tmp_path / "folders", 7))


def test_records_without_an_image_or_a_mask_or_with_a_lossy_mask(
    tmp_path: Path, pairs: list
) -> None:
    (s0, i0, m0), (s1, i1, _), (s2, _, m2), (s3, i3, m3), (s4, i4, _), (s5, i5, m5) = pairs[:6]
    shard = write_tar(tmp_path / "bad.tar", [
        (f"{s0}.png", i0), (f"{s0}.mask.png", m0),
        (f"{s1}.png", i1),  # no mask
        (f"{s2}.mask.png", m2),  # no image
        (f"{s3}.png", i3), (f"{s3}.mask.jpg", jpeg_mask(m3)),  # a lossy mask member
        (f"{s4}.png", i4), (f"{s4}.mask.png", b"not a png"),  # found when read
        (f"{s5}.png", i5), (f"{s5}.mask.png", m5),
    ])  # fmt: skip
    with pytest.raises(AnnotationError, match=r"bad.tar: key 's001': no mask member \(mask.png"):
        batches_of(str(shard))
    dm, batches = batches_of(str(shard), on_error="skip", num_workers=1)
    assert ids(batches) == [0, 5]
    assert dm.skipped.records == 4 and dm.skipped.counts == {str(shard): 4}
    assert dm.skipped.messages == [
        f"{shard}: key 's001': no mask member (mask.png, mask, seg.png)",
        f"{shard}: key 's002': no image member (jpg, jpeg, png, webp, bmp, tif, tiff, image)",
        f"{shard}: key 's003': a mask in a lossy format (.mask.jpg: JPEG/WebP changes class "
        "values): use PNG",
        f"{shard}: key 's004' (.mask.png): not an image in a format PIL knows (or a damaged one)",
    ]
    # Under raise, the undecodable mask is named with shard and key when its batch is read.
    write_tar(tmp_path / "one.tar", [
        (f"{s0}.png", i0), (f"{s0}.mask.png", m0), (f"{s4}.png", i4), (f"{s4}.mask.png", b"x"),
    ])  # fmt: skip
    with pytest.raises(ImageDecodeError, match=r"one.tar: key 's004' \(.mask.png\)"):
        batches_of(str(tmp_path / "one.tar"))


def test_a_repeated_member_names_the_record(tmp_path: Path, pairs: list) -> None:
    (s0, i0, m0), (s1, i1, m1) = pairs[:2]
    shard = write_tar(tmp_path / "twice.tar", [
        (f"{s0}.png", i0), (f"{s0}.mask.png", m0), (f"{s0}.mask.png", m0),
        (f"{s1}.png", i1), (f"{s1}.mask.png", m1),
    ])  # fmt: skip
    with pytest.raises(AnnotationError, match=r"twice.tar: key 's000': member .* repeats"):
        batches_of(str(shard))
    dm, batches = batches_of(str(shard), on_error="skip")
    assert ids(batches) == [1] and dm.skipped.records == 1


def test_parquet_a_jpeg_mask_a_null_cell_and_a_mask_of_another_size(
    tmp_path: Path, pairs: list
) -> None:
    small = io.BytesIO()
    Image.fromarray(np.zeros((4, 4), dtype=np.uint8), mode="L").save(small, "PNG")
    masks = [m for _, _, m in pairs]
    masks[1] = jpeg_mask(masks[1])
    masks[2] = None
    masks[4] = small.getvalue()
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"image": [i for _, i, _ in pairs], "mask": masks}), path)
    with pytest.raises(AnnotationError, match=r"bad.parquet: row 1 \(.mask\): a mask in a lossy"):
        batches_of(str(path))
    dm, batches = batches_of(str(path), on_error="skip", num_workers=1)
    assert ids(batches) == [0, 3, 5, 6]
    assert dm.skipped.counts == {str(path): 3}
    messages = dm.skipped.messages
    assert messages[0] == (
        f"{path}: row 1 (.mask): a mask in a lossy format (JPEG: JPEG/WebP changes class "
        "values): use PNG"
    )
    assert messages[1] == f"{path}: row 2 (.mask): holds NoneType, not encoded bytes"
    assert messages[2].startswith(f"{path}: row 4 (.mask): the mask is 4x4 (HxW) but its image")


def test_a_missing_shard_and_a_file_that_is_no_shard_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nope"):
        batches_of(str(tmp_path / "nope-*.tar"))
    (tmp_path / "x.tar.gz").write_bytes(b"")
    with pytest.raises(AnnotationError, match=r"x\.tar\.gz: not a segmentation shard"):
        batches_of([str(tmp_path / "x.tar.gz"), str(tmp_path / "y.tar")])
