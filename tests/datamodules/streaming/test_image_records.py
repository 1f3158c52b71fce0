"""Image records of StreamingDataModule: batches as ImageFolderDataModule's (pixel for pixel on
the eval path), from tar and Parquet (bytes and Hugging Face's struct), exactly once over ranks
x workers, every bad record raised naming shard and key or skipped and counted."""

from __future__ import annotations

import http.server
import inspect
import io
import re
import tarfile
import threading
import warnings
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

from datamodules import ImageFolderDataModule, Source, StreamingDataModule
from datamodules.shards.errors import RecordError
from datamodules.streaming import write_shards

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
CLASSES = ["ant", "bee", "cat"]


def encode(array: np.ndarray, fmt: str = "JPEG") -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buffer.getvalue()


def noise(i: int) -> np.ndarray:
    """Image ``i``: random pixels, of one of three sizes (so resizing differs)."""
    h, w = [(24, 32), (40, 30), (21, 21)][i % 3]
    return np.random.default_rng(i).integers(0, 256, (h, w, 3), dtype=np.uint8)


def write_folder_and_records(root: Path, n: int = 30) -> list[dict[str, Any]]:
    """Class folders of JPEGs, and the same bytes as records in the folder's scan order."""
    records = []
    for i in range(n):
        label = CLASSES[i % 3]
        data = encode(noise(i))
        (root / "folder" / label).mkdir(parents=True, exist_ok=True)
        (root / "folder" / label / f"{i:03d}.jpg").write_bytes(data)
        records.append({"__key__": f"{label}/{i:03d}", "jpg": data, "cls": i % 3, "txt": label})
    records.sort(key=lambda r: r["__key__"])  # torchvision's order: class, then file name
    return records


def stream(files: Any, **kwargs: Any) -> StreamingDataModule:
    kwargs = {"batch_size": 8, "num_workers": 0, "index_cache": False, **kwargs}
    return StreamingDataModule(files, files, image_key="jpg", **kwargs)


def pairs(loader: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(images.clone(), labels.clone()) for images, labels in loader]


@pytest.fixture
def shards(tmp_path: Path) -> dict[str, Any]:
    records = write_folder_and_records(tmp_path)
    tar = write_shards(records, tmp_path / "tar", max_records=7)
    parquet = write_shards(records, tmp_path / "pq", fmt="parquet", max_records=11)
    return {"root": tmp_path / "folder", "records": records, "tar": tar, "parquet": parquet}


@pytest.mark.parametrize("source", ["tar", "parquet", "parquet-plain-bytes"])
def test_eval_batches_are_pixel_identical_to_image_folders(
    shards: dict[str, Any], source: str, tmp_path: Path
) -> None:
    files = shards["tar" if source == "tar" else "parquet"]
    if source == "parquet-plain-bytes":  # a binary column, not Hugging Face's struct
        table = pa.table(
            {
                "jpg": [r["jpg"] for r in shards["records"]],
                "cls": [r["cls"] for r in shards["records"]],
            }
        )
        pq.write_table(table, tmp_path / "plain.parquet", row_group_size=9)
        files = [str(tmp_path / "plain.parquet")]
    for eval_transforms in (None, v2.Resize((10, 14))):
        folder = ImageFolderDataModule(
            shards["root"],
            val_root=shards["root"],
            image_size=16,
            batch_size=8,
            num_workers=0,
            eval_transforms=eval_transforms,
        )
        ours = stream(files, image_size=16, eval_transforms=eval_transforms)
        expected, got = pairs(folder.val_dataloader()), pairs(ours.val_dataloader())
        assert len(got) == len(expected) == 4
        for (a, la), (b, lb) in zip(got, expected, strict=True):
            assert a.dtype == torch.uint8 and a.is_contiguous(memory_format=torch.channels_last)
            assert torch.equal(a, b) and torch.equal(la, lb)
        batch = ours.on_after_batch_transfer(got[0], 0)
        assert torch.equal(batch[0], folder.on_after_batch_transfer(expected[0], 0)[0])


def test_train_batches_take_the_image_folder_defaults(shards: dict[str, Any]) -> None:
    dm = stream(shards["tar"], image_size=12, num_workers=2, mean=(0.5,) * 3, std=(0.25,) * 3)
    assert repr(dm.train_transforms).startswith("RandomResizedCropFlip(size=12")
    assert repr(dm.eval_transforms) == "ResizeCenterCrop(size=12, resize=14)"
    batches = pairs(dm.train_dataloader())
    assert {tuple(images.shape[1:]) for images, _ in batches} == {(3, 12, 12)}
    assert sorted(int(x) for _, labels in batches for x in labels) == sorted([0, 1, 2] * 10)
    assert dm.train_dataloader().batch_pool is not None  # the reused shared-memory slots
    as_float = dm.on_after_batch_transfer(batches[0], 0)[0]
    assert torch.allclose(as_float, (batches[0][0].float() / 255 - 0.5) / 0.25)
    assert dm.loader_settings("train").reasons["prefetch_factor"].endswith("decode work")


def write_id_shards(root: Path, sizes: list[int]) -> list[str]:
    """Tar shards of 8x8 PNGs whose class is the record's id: ``sizes`` records each."""
    paths, start = [], 0
    for k, size in enumerate(sizes):
        records = [
            {
                "__key__": f"r{i:04d}",
                "png": encode(np.full((8, 8, 3), i % 256, np.uint8), "PNG"),
                "cls": i,
            }
            for i in range(start, start + size)
        ]
        paths += write_shards(records, root, prefix=f"part{k}")
        start += size
    return paths


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("workers", [0, 1, 2, 3])
def test_exactly_once_over_ranks_and_workers(tmp_path: Path, world: int, workers: int) -> None:
    paths = write_id_shards(tmp_path, [9, 1, 13, 2, 5])  # 30 records; shards with 1 and 2
    per_rank = []
    for rank in range(world):
        dm = StreamingDataModule(
            paths,
            image_key="png",
            image_size=8,
            batch_size=4,
            num_workers=workers,
            shuffle_buffer=6,
            index_cache=False,
            persistent_workers=False,
        )
        dm._rank_world = lambda rank=rank: (rank, world)  # type: ignore[method-assign]
        per_rank.append([labels.tolist() for images, labels in dm.train_dataloader()])
    assert len({len(batches) for batches in per_rank}) == 1  # the same count on every rank
    seen = Counter(i for batches in per_rank for batch in batches for i in batch)
    assert sorted(seen) == list(range(30)) and set(seen.values()) == {1}


def test_alternatives_labels_by_name_and_dict_batches(tmp_path: Path) -> None:
    records = [
        {
            "__key__": f"k{i}",
            ("png" if i % 2 else "webp"): encode(noise(i), "PNG" if i % 2 else "WEBP"),
            "txt": CLASSES[i % 3],
            "json": {"i": i},
        }
        for i in range(12)
    ]
    paths = write_shards(records, tmp_path)

    def unshuffled(**kwargs: Any) -> StreamingDataModule:
        return StreamingDataModule(
            paths,
            image_key="png;webp",
            image_size=8,
            num_workers=0,
            shuffle=False,
            index_cache=False,
            **kwargs,
        )

    named = unshuffled(label_key="txt", classes=CLASSES, batch_size=12)
    images, labels = next(iter(named.train_dataloader()))
    assert images.shape == (12, 3, 8, 8) and labels.tolist() == [i % 3 for i in range(12)]
    assert named.classes == CLASSES and named.num_classes == 3
    as_dicts = unshuffled(label_key=None, batch_size=6)
    batch = next(iter(as_dicts.train_dataloader()))
    assert set(batch) == {"image", "__key__", "__url__", "txt", "json"}
    assert batch["image"].shape == (6, 3, 8, 8) and batch["__key__"] == [f"k{i}" for i in range(6)]
    assert as_dicts.on_after_batch_transfer(batch, 0)["image"].dtype == torch.float32


def test_num_classes_from_int_labels_and_hf_parquet(tmp_path: Path) -> None:
    import datasets

    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    rows = {
        "image": [{"bytes": encode(noise(i)), "path": None} for i in range(10)],
        "label": [i % 4 * 2 for i in range(10)],
    }
    datasets.Dataset.from_dict(rows, features=features).to_parquet(str(tmp_path / "hf.parquet"))
    dm = StreamingDataModule(
        tmp_path / "hf.parquet",
        image_key="image",
        label_key="label",
        image_size=8,
        batch_size=5,
        num_workers=0,
        index_cache=False,
    )
    assert dm.num_classes == 7 and dm.classes == [str(i) for i in range(7)]
    got = sorted(int(x) for _, labels in dm.train_dataloader() for x in labels)
    assert got == sorted(i % 4 * 2 for i in range(10))


# ---------------------------------------------------------------------- bad records


def bad_shards(tmp_path: Path, case: str) -> tuple[list[str], int, str]:
    """12 good records (ids 0..11) and one bad: the shards, the bad count and the message."""
    good = [
        {"__key__": f"g{i:02d}", "jpg": encode(noise(i)), "txt": CLASSES[i % 3], "cls": i}
        for i in range(12)
    ]
    bad = {"__key__": "bad", "jpg": encode(noise(99)), "txt": "ant", "cls": 99}
    message = {
        # Decoded in full by TorchCodec, or at a reduced scale by Pillow (decode="scaled").
        "corrupt jpeg": r"key 'bad': field 'jpg': (TorchCodec|Pillow) JPEG decoder",
        "missing image": r"key 'bad': has no image field 'jpg' \(image_key\)",
        "unknown class": r"key 'bad': label 'wasp' is not one of classes \('ant', 'bee', 'cat'\)",
        "truncated tar": r"key 'g11': the archive ends inside member 'g11.jpg' \(in its data",
        # once read as a record without its label: the file is damaged, label_key is not wrong
        "tar cut in padding": r"key 'g11': the archive ends inside member 'g11.jpg' \(in its pad",
        "repeated key": r"key 'g03': key 'g03' repeats an earlier record's",
    }[case]
    if case == "corrupt jpeg":
        bad["jpg"] = bad["jpg"][: len(bad["jpg"]) // 2]  # cut: it does not decode
    elif case == "missing image":
        bad["png"] = bad.pop("jpg")
    elif case == "unknown class":
        bad["txt"] = "wasp"
    inserted = case in ("corrupt jpeg", "missing image", "unknown class")
    records = good[:5] + [bad] + good[5:] if inserted else good
    paths = write_shards(records[:6], tmp_path, prefix="a") + write_shards(
        records[6:], tmp_path, prefix="b"
    )
    if case == "repeated key":  # g03 again after g05, in the same shard (write_shards refuses)
        with tarfile.open(paths[0], "a") as tar:
            for ext in ("jpg", "txt", "cls"):
                data = str(good[3][ext]).encode() if ext != "jpg" else good[3]["jpg"]
                info = tarfile.TarInfo(f"g03.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    if case in ("truncated tar", "tar cut in padding"):
        data = Path(paths[1]).read_bytes()
        with tarfile.open(paths[1]) as tar:
            member = tar.getmember("g11.jpg")
        assert member.size % 512  # a JPEG with padding after it
        cut = 50 if case == "truncated tar" else member.size + (-member.size % 512) // 2
        Path(paths[1]).write_bytes(data[: member.offset_data + cut])
    return paths, 1, message


CASES = ["corrupt jpeg", "missing image", "unknown class", "truncated tar", "tar cut in padding"]
CASES += ["repeated key"]


def class_stream(paths: list[str], **kwargs: Any) -> StreamingDataModule:
    return StreamingDataModule(
        paths,
        image_key="jpg",
        label_key="txt",
        classes=CLASSES,
        image_size=8,
        batch_size=4,
        index_cache=False,
        **kwargs,
    )


@pytest.mark.parametrize("case", CASES)
def test_a_bad_record_raises_naming_shard_and_key(tmp_path: Path, case: str) -> None:
    paths, _, message = bad_shards(tmp_path, case)
    dm = class_stream(paths, num_workers=0)
    with pytest.raises(RecordError, match=message) as info:
        dm.setup("fit")
        for _ in dm.train_dataloader():
            pass
    assert any(str(info.value).startswith(p) for p in paths)


@pytest.mark.parametrize("case", CASES)
def test_a_bad_record_is_skipped_and_counted(tmp_path: Path, case: str) -> None:
    paths, bad, message = bad_shards(tmp_path, case)
    dm = class_stream(paths, num_workers=2, on_error="skip", persistent_workers=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the index's report at setup
        labels = [i for _, batch in dm.train_dataloader() for i in batch.tolist()]
    expected = sorted(i % 3 for i in range(11 if case.startswith("t") else 12))
    assert sorted(labels) == expected  # every good record once, the bad one left out
    assert dm.skipped.total == bad
    assert any(re.search(message, m) for m in dm.skipped.messages)
    assert "skipped 1 bad record(s)" in dm.summary()


def test_image_records_have_their_own_shuffle_buffer_default(tmp_path: Path) -> None:
    paths = write_id_shards(tmp_path, [3])
    assert inspect.signature(StreamingDataModule).parameters["shuffle_buffer"].default is None
    images = StreamingDataModule(paths, image_key="png", num_workers=0, index_cache=False)
    assert images.shuffle_buffer == 1000  # chosen by measurement (images-at-scale.md)
    assert images.hparams.shuffle_buffer is None  # rebuilt from a checkpoint: chosen again
    assert StreamingDataModule(paths).shuffle_buffer == 10_000  # plain records
    assert StreamingDataModule(paths, image_key="png", shuffle_buffer=64).shuffle_buffer == 64
    images.setup("fit")
    assert "a buffer of 1000 records per worker" in images.summary()


def test_image_arguments_are_checked(tmp_path: Path) -> None:
    paths = write_id_shards(tmp_path, [3])
    for kwargs, match in [
        ({"image_size": 64}, r"image_size apply to image records: give image_key="),
        ({"image_key": ";"}, r"image_key=';' is not accepted"),
        ({"image_key": "png", "label_key": "png"}, r"label_key='png' is also in image_key"),
        ({"image_key": "png", "classes": ["a", "a"]}, r"give each class name once"),
        ({"image_key": "png", "label_key": None, "classes": ["a"]}, r"needs label_key"),
        ({"image_key": "png", "std": (1, 0, 1)}, r"std=\(1, 0, 1\) is not accepted"),
        ({"image_key": "png", "collate": list}, r"collate= does not apply with image_key"),
    ]:
        with pytest.raises(ValueError, match=match):
            StreamingDataModule(paths, **kwargs)
    with pytest.raises(TypeError, match="classes='abc' is not accepted"):
        StreamingDataModule(paths, image_key="png", classes="abc")


def test_image_sources_mix_by_weight_with_exact_quotas(tmp_path: Path) -> None:
    # A tar source (png) and a Parquet source (Hugging Face struct "image"), 3 : 1.
    tar = write_id_shards(tmp_path / "tar", [10, 10])
    rows = [
        {"__key__": f"p{i}", "image": encode(noise(i), "PNG"), "cls": 100 + i} for i in range(8)
    ]
    parquet = write_shards(rows, tmp_path / "pq", fmt="parquet")
    dm = StreamingDataModule(
        [Source(tar, weight=3, name="tar"), Source(parquet, weight=1, name="pq")],
        image_key="png;image",
        image_size=8,
        epoch_size=16,
        source_key="source",
        label_key=None,
        batch_size=4,
        num_workers=2,
        index_cache=False,
        persistent_workers=False,
    )
    assert dm.loader_settings("train").reasons["num_workers"].startswith("set by the user")
    for epoch in range(2):  # two epochs: each holds every source's quota
        batches = list(dm.train_dataloader())
        assert all(b["image"].shape[1:] == (3, 8, 8) for b in batches)
        sources = Counter(s for b in batches for s in b["source"])
        assert sources == {"tar": 12, "pq": 4}
        ids = [int(i) for b in batches for i in b["cls"]]
        if epoch == 0:  # within each source's first pass: no record twice
            assert len(set(ids)) == 16
    auto = StreamingDataModule(tar, image_key="png", index_cache=False)
    assert "decoding" in auto.loader_settings("train").reasons["num_workers"]


def test_image_size_may_be_height_and_width(shards: dict[str, Any]) -> None:
    dm = stream(shards["tar"], image_size=(8, 12))
    assert repr(dm.eval_transforms).startswith("ResizeCenterCrop(size=(8, 12)")
    images, _ = next(iter(dm.val_dataloader()))
    assert images.shape == (8, 3, 8, 12)
    assert "uint8 8x12 out of the loader" in dm.summary()
    assert dm.hparams["image_size"] == [8, 12]  # plain data in checkpoints
    assert stream(shards["tar"], image_size=[8, 12]).image_size == (8, 12)  # a config's list


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A folder served over HTTP on 127.0.0.1: ``(base URL, folder)``."""
    root = tmp_path / "served"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=root))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root
    server.shutdown()
    server.server_close()


def test_auto_workers_count_remote_image_records_as_decode_work(
    served: tuple[str, Path],
) -> None:
    base, root = served
    paths = write_id_shards(root, [6, 6])
    urls = [f"{base}/{Path(p).name}" for p in paths]
    local = StreamingDataModule(paths, image_key="png", image_size=8, index_cache=False)
    remote = StreamingDataModule(urls, image_key="png", image_size=8, index_cache=False)
    remote.setup("fit")  # the shards are really there, read over HTTP
    assert [s.count for s in remote.shards["train"]] == [6, 6]
    here, there = local.loader_settings("train"), remote.loader_settings("train")
    assert remote.work == local.work == "decode"
    assert there.num_workers == here.num_workers
    assert there.reasons["num_workers"] == here.reasons["num_workers"]
    assert "I/O" not in there.reasons["num_workers"]
    records = StreamingDataModule(urls, index_cache=False)  # the same shards as plain records
    assert "I/O-bound" in records.loader_settings("train").reasons["num_workers"]


def test_a_wrong_image_key_under_skip_says_the_last_records_reason(tmp_path: Path) -> None:
    paths = write_id_shards(tmp_path, [6])
    raised = {}
    for on_error in ("raise", "skip"):
        dm = StreamingDataModule(
            paths, image_key="jpg", image_size=8, batch_size=4, num_workers=0,
            on_error=on_error, index_cache=False,
        )  # fmt: skip
        with pytest.raises(RecordError) as info:
            next(iter(dm.train_dataloader()))
        raised[on_error] = str(info.value)
    reason = "has no image field 'jpg' (image_key); its fields: ['cls', 'png']"
    assert reason in raised["raise"]  # as "raise" says it, so does "skip":
    assert re.fullmatch(rf".*part0-000000\.tar: key 'r\d+': {re.escape(reason)}; every record "
                        r"of this batch is bad .*\(on_error='skip'\)", raised["skip"])  # fmt: skip
