"""Conversations about images whose image does not decode at batch time (a JPEG cut short, or
corrupt bytes behind valid magic bytes, so setup's sniff keeps the record): named under
``on_error="raise"``; under ``"skip"`` the whole record left out, counted in ``dm.skipped``, a
batch of only bad records filled, every good record delivered, resume exact."""

from __future__ import annotations

import io
import json
import tarfile
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from datamodules import ImageTextDataModule
from datamodules.image_text.conversation_pixels import FILLED
from datamodules.imaging.decoding import ImageDecodeError
from tests.datamodules.contract import assert_resume_mid_epoch_is_exact
from tests.datamodules.image_text.vlm_data import (
    png,
    record,
    vlm_tokenizer,
    write_conversation_tars,
)

pytest.importorskip("transformers")

RECORDS = 12
IMAGE_TOKENS = 2
#: Record -> (which of its images is bad, how): a JPEG cut in half, corrupt bytes after its
#: magic bytes. Records 2 and 3 make the second padded batch of 2 all bad (unshuffled).
BAD = {2: (1, "cut"), 3: (0, "corrupt"), 7: (2, "cut"), 10: (0, "corrupt")}


def images_of(i: int) -> int:
    return 1 + i % 3 if i not in BAD else 3


def bad_jpeg(how: str) -> bytes:
    out = io.BytesIO()
    pixels = np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    data = out.getvalue()
    if how == "cut":
        return data[: len(data) // 2]
    return data[:3] + np.random.default_rng(1).bytes(400)  # "\xff\xd8\xff": sniffed a JPEG


@pytest.fixture(scope="module")
def shard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tar shard of RECORDS conversations (record i is the shard's record i + 1)."""
    path = tmp_path_factory.mktemp("bad-images") / "train-000000.tar"
    with tarfile.open(path, "w") as tar:
        for i in range(RECORDS):
            n = images_of(i)
            members = {f"{k}.png": png(i, k) for k in range(n)}
            if i in BAD:
                k, how = BAD[i]
                members[f"{k}.png"] = bad_jpeg(how)  # (the decoder goes by the bytes)
            members["json"] = json.dumps(record(i, n)).encode()
            for ext, data in members.items():
                info = tarfile.TarInfo(f"s{i:03d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture(scope="module")
def tok() -> Any:
    return vlm_tokenizer()


def make(shard: Path, tok: Any, files: Any = None, **kwargs: Any) -> ImageTextDataModule:
    options: dict[str, Any] = {
        "messages_key": "json", "image_key": "0.png;1.png;2.png", "tokenizer": tok,
        "image_tokens": IMAGE_TOKENS, "image_size": 8, "batch_size": 2, "num_workers": 0,
        "normalize": False, "token_cache": shard.parent / "cache", "shuffle": False,
    }  # fmt: skip
    options.update(kwargs)
    return ImageTextDataModule(files or str(shard), **options)


def codes(pixels: torch.Tensor) -> list[tuple[int, int]]:
    values = pixels.float() * (255.0 if pixels.is_floating_point() else 1.0)
    means = values.mean(dim=(2, 3)).round().long().tolist()
    return [(r + 256 * g, b) for r, g, b in means]


def record_ids(batch: dict[str, Any]) -> list[int]:
    """The records of a batch, from their images (each record's image 0)."""
    return [r for r, k in codes(batch["pixel_values"]) if k == 0]


def check_batch(batch: dict[str, Any], image_token_id: int) -> list[int]:
    """A batch's records, after checking that its tokens and images are theirs alone."""
    ids = record_ids(batch)
    expected = [(i, k) for i in ids for k in range(images_of(i))]
    assert codes(batch["pixel_values"]) == expected  # every image of each record, in order
    positions = int((batch["input_ids"] == image_token_id).sum())
    assert positions == IMAGE_TOKENS * len(expected)  # the tokens of those records only
    assert int(batch["input_ids"].shape[0]) >= 1
    return ids


def epoch(dm: ImageTextDataModule) -> list[list[int]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (the count of records left out)
        loader = dm.train_dataloader()
        return [check_batch(b, dm.image_token_id) for b in loader]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("packing", [False, True])
def test_raise_names_the_shard_the_record_its_key_and_the_image(
    shard: Path, tok: Any, workers: int, packing: bool
) -> None:
    extra = {"packing": True, "seq_length": 200, "max_images": 6} if packing else {}
    dm = make(shard, tok, num_workers=workers, **extra)
    dm.setup("fit")  # the sniff at setup keeps every record
    assert len(dm.view("train").docs) == RECORDS
    with pytest.raises(ImageDecodeError) as caught:
        epoch(dm)
    message = str(caught.value)
    named = [i for i in BAD if f"record {i + 1}, key 's{i:03d}'" in message]
    assert len(named) == 1, message
    k, how = BAD[named[0]]
    assert f"{shard}: record {named[0] + 1}, key 's{named[0]:03d}': image {k + 1} of 3" in message
    assert ("truncated" in message) == (how == "cut"), message


def bad_where(shard: Path, i: int) -> str:
    return f"{shard}: record {i + 1}, key 's{i:03d}'"


@pytest.mark.parametrize("workers", [0, 2])
def test_skip_leaves_out_each_bad_record_whole_counts_it_and_fills_an_empty_batch(
    shard: Path, tok: Any, workers: int
) -> None:
    dm = make(shard, tok, num_workers=workers, on_error="skip")
    # Batches of 2 in order: [2, 3] is all bad and holds the next good record, 4, instead.
    assert epoch(dm) == [[0, 1], [4], [4, 5], [6], [8, 9], [11]]
    skipped = dm.skipped
    assert skipped.counts == {str(shard): len(BAD) + 1}  # each bad record once, and the fill
    assert sorted(where for where, _ in skipped) == sorted(
        [bad_where(shard, i) for i in BAD] + [bad_where(shard, 4)]
    )
    whys = dict(skipped)
    assert whys[bad_where(shard, 4)] == FILLED
    for i, (k, how) in BAD.items():
        assert whys[bad_where(shard, i)].startswith(f"image {k + 1} of 3 does not decode: ")
        assert ("truncated" in whys[bad_where(shard, i)]) == (how == "cut")


PACKED = {"packing": True, "seq_length": 80, "max_images": 4, "batch_size": 1, "shuffle": True}


@pytest.mark.parametrize("workers", [0, 2])
def test_skip_in_packed_rows_keeps_the_rest_of_the_row_and_every_good_record(
    shard: Path, tok: Any, workers: int
) -> None:
    dm = make(shard, tok, num_workers=workers, on_error="skip", **PACKED)
    dm.setup("fit")
    plan = dm.view("train").batches
    planned = [plan.records(plan.rows(b)) for b in range(plan.num_batches)]
    assert any(len(r) == 2 and len(set(r) & set(BAD)) == 1 for r in planned)  # a row half bad
    assert any(set(r) <= set(BAD) for r in planned)  # and a batch all bad
    batches = epoch(dm)
    assert len(batches) == plan.num_batches and all(batches)  # none lost, none empty
    good = [i for i in range(RECORDS) if i not in BAD]
    delivered = Counter(i for b in batches for i in b)
    fills = delivered - Counter(good)
    assert sorted(delivered) == good  # every good record, no bad one
    assert sum(fills.values()) == sum(set(r) <= set(BAD) for r in planned)  # one per bad batch
    # Each planned batch without its bad records; one all bad: the plan's next good record.
    expected = []
    for b, wanted in enumerate(planned):
        if set(wanted) <= set(BAD):
            after = plan.after(plan.rows(b))
            expected.append([next(i for i in after if i not in BAD)])
        else:
            expected.append([i for i in wanted if i not in BAD])
    assert sorted(batches) == sorted(expected)
    assert dm.skipped.counts == {str(shard): len(BAD) + sum(fills.values())}
    assert sum(why == FILLED for _, why in dm.skipped) == sum(fills.values())


def test_a_resume_around_records_left_out_is_exact(shard: Path, tok: Any, tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        reference = assert_resume_mid_epoch_is_exact(
            lambda: make(shard, tok, on_error="skip", **PACKED), record_ids, tmp_path
        )
    for batches in reference:  # each epoch left records out and filled a batch
        ids = [i for b in batches for i in b]
        assert not set(ids) & set(BAD) and len(ids) > len(set(ids))


def test_skip_in_a_mix_of_sources_leaves_out_and_fills_within_the_source(
    shard: Path, tok: Any, tmp_path: Path
) -> None:
    from datamodules import Source

    good = write_conversation_tars(tmp_path / "good", range(100, 106), shards=1, prefix="good")
    sources = [Source([str(shard)], name="bad"), Source([str(p) for p in good], name="good")]
    dm = make(shard, tok, files=sources, on_error="skip")
    batches = epoch(dm)
    assert dm.quotas(0) == {"bad": 6, "good": 3}  # one pass of each source's batches
    # The bad source's batches as unmixed (the fill from its own records), the good one's whole.
    mine = sorted(b for b in batches if b[0] < 100)
    assert mine == sorted([[0, 1], [4], [4, 5], [6], [8, 9], [11]])
    assert sorted(b for b in batches if b[0] >= 100) == [[100, 101], [102, 103], [104, 105]]
    assert dm.skipped.counts == {str(shard): len(BAD) + 1}
