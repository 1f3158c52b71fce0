"""``python -m datamodules shards``: an image folder to shards with ImageFolderDataModule's split,
the original bytes (or smaller re-encodes), Parquet that Hugging Face datasets reads, parallel
writing with the same bytes, and reruns that keep what is complete."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from datamodules import ImageFolderDataModule, StreamingDataModule
from datamodules.__main__ import main
from datamodules.imaging.decoding import decode_image_bytes
from datamodules.shards import folder_shards
from datamodules.shards.records import read_records
from tests import subprocesses

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
ROOT = Path(__file__).resolve().parents[3]
CLASSES = ["bee", "cat", "dog"]
COUNTS = [14, 9, 7]


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 JPEGs of three sizes in three class folders (uneven classes), one of them a .jpeg."""
    root = tmp_path_factory.mktemp("src")
    n = 0
    for name, count in zip(CLASSES, COUNTS, strict=True):
        (root / name).mkdir()
        for j in range(count):
            h, w = [(30, 40), (50, 36), (20, 20)][n % 3]
            pixels = np.random.default_rng(n).integers(0, 256, (h, w, 3), dtype=np.uint8)
            suffix = ".jpeg" if n == 4 else ".jpg"
            Image.fromarray(pixels).save(root / name / f"img.{j:02d}{suffix}", quality=90)
            n += 1
    return root


def run(*args: str) -> int:
    return main(["shards", *map(str, args)])


def members(paths: list[Path]) -> list[dict]:
    return [r for p in paths for r in read_records(str(p))]


def key_of(path: str | Path, src: Path) -> str:
    """A file's record key: its path under SRC without the extension, dots made ``_``."""
    rel = Path(os.path.relpath(path, src))
    return (rel.parent / rel.stem.replace(".", "_")).as_posix()


def test_shards_hold_the_folders_split_and_bytes(src: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert run(src, out, "--val-split", "0.2", "--max-bytes", "16kB", "--workers", "1") == 0
    printed = capsys.readouterr().out
    assert "24 train and 6 val images of 3 classes" in printed and "images/s" in printed
    train, val = sorted(out.glob("train-*.tar")), sorted(out.glob("val-*.tar"))
    assert len(train) > 2 and len(val) >= 1
    assert all(os.path.getsize(p) <= 16_000 + 4096 for p in train)  # about --max-bytes
    assert json.loads((out / "classes.json").read_text()) == CLASSES
    folder = ImageFolderDataModule(src, val_split=0.2)
    folder.setup("fit")
    val_files = [folder.samples[i] for i in folder.split_indices["val"].tolist()]
    records = members(val)
    assert [r["__key__"] for r in records] == [key_of(p, src) for p, _ in val_files]
    assert [r["cls"] for r in records] == [label for _, label in val_files]
    for record, (path, _) in zip(records, val_files, strict=True):
        assert record["jpg"] == Path(path).read_bytes()  # the original bytes
    train_keys = [r["__key__"] for r in members(train)]
    assert sorted(train_keys + [r["__key__"] for r in records]) == sorted(
        key_of(p, src) for p, _ in folder.samples
    )
    assert train_keys != sorted(train_keys)  # a seeded random order: every shard mixes classes
    manifest = json.loads((out / "shards.json").read_text())
    assert manifest["image_keys"] == ["jpg"] and sum(manifest["shards"].values()) == 30
    # The stream reads the val shards as the folder module reads its val split, pixel for pixel.
    stream = StreamingDataModule(
        sorted(map(str, train)),
        sorted(map(str, val)),
        image_key="jpg",
        classes=CLASSES,
        image_size=16,
        batch_size=4,
        num_workers=0,
        index_cache=False,
    )
    folder = ImageFolderDataModule(src, val_split=0.2, image_size=16, batch_size=4, num_workers=0)
    for (a, la), (b, lb) in zip(stream.val_dataloader(), folder.val_dataloader(), strict=True):
        assert torch.equal(a, b) and torch.equal(la, lb)


def test_parallel_writing_gives_the_same_shards(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(folder_shards, "BYTES_PER_PROCESS", 1)  # processes even for 30 images
    assert run(src, tmp_path / "one", "--max-bytes", "20kB", "--workers", "1") == 0
    assert run(src, tmp_path / "two", "--max-bytes", "20kB", "--workers", "2") == 0
    names = sorted(p.name for p in (tmp_path / "one").glob("*.tar"))
    assert names == sorted(p.name for p in (tmp_path / "two").glob("*.tar")) and len(names) > 3
    for name in names:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


def test_a_rerun_keeps_complete_shards_and_refuses_other_arguments(
    src: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "out"
    assert run(src, out, "--max-bytes", "20kB", "--workers", "1") == 0
    shards = sorted(out.glob("*.tar"))
    stamps = {p.name: p.stat().st_mtime_ns for p in shards}
    shards[1].unlink()
    (out / f".{shards[2].name}.123.tmp").write_bytes(b"half a shard")  # a crashed run's
    capsys.readouterr()
    assert run(src, out, "--max-bytes", "20kB", "--workers", "1") == 0
    rewritten = len(list(read_records(str(shards[1]))))
    assert f"{rewritten} written" in capsys.readouterr().out
    for p in shards:
        if p != shards[1]:
            assert p.stat().st_mtime_ns == stamps[p.name]  # kept, not rewritten
    assert run(src, out, "--max-bytes", "30kB") == 2
    assert "holds shards of another run" in capsys.readouterr().err


def test_resize_re_encodes_only_images_larger_than_asked(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run(src, out, "--resize", "24", "--quality", "95", "--val-split", "0") == 0
    records = members(sorted(out.glob("train-*.tar")))
    assert len(records) == 30 and not list(out.glob("val-*"))
    originals = {key_of(p, src): p for p in src.rglob("*.jp*g")}
    resized = 0
    for record in records:
        original = originals[record["__key__"]]
        width, height = Image.open(original).size
        image = decode_image_bytes(record["jpg"])
        if min(width, height) <= 24:
            assert record["jpg"] == original.read_bytes()  # small enough: kept as it was
        else:
            resized += 1
            assert min(image.shape[1:]) == 24 and image.shape[1] / image.shape[2] == pytest.approx(
                height / width, rel=0.05
            )
    assert resized == 20


def test_parquet_shards_read_by_hf_datasets_and_the_stream(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    out = tmp_path / "pq"
    assert run(src, out, "--fmt", "parquet", "--val-split", "0.2") == 0
    import datasets

    val = sorted(str(p) for p in out.glob("val-*.parquet"))
    loaded = datasets.load_dataset(
        "parquet", data_files=val, split="train", cache_dir=str(tmp_path / "hf")
    )
    assert isinstance(loaded.features["image"], datasets.Image) and loaded.num_rows == 6
    stream = StreamingDataModule(
        sorted(str(p) for p in out.glob("train-*.parquet")),
        val,
        image_key="image",
        label_key="label",
        image_size=8,
        batch_size=6,
        num_workers=0,
        index_cache=False,
    )
    _, labels = next(iter(stream.val_dataloader()))
    assert labels.tolist() == loaded["label"]
    first = np.asarray(loaded[0]["image"])
    assert first.shape[2] == 3 and stream.num_classes == 3


def test_a_png_folder_gives_png_records(tmp_path: Path, capsys) -> None:
    src = tmp_path / "src"
    for i in range(6):
        (src / CLASSES[i % 3]).mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (12, 9), (i * 40, 0, 0)).save(src / CLASSES[i % 3] / f"{i}.png")
    assert run(src, tmp_path / "out", "--val-split", "0") == 0
    assert "image_key='png'" in capsys.readouterr().out
    records = members(sorted((tmp_path / "out").glob("train-*.tar")))
    assert len(records) == 6 and all("png" in r and "jpg" not in r for r in records)


def test_the_command_line_names_bad_arguments(src: Path, tmp_path: Path, capsys) -> None:
    assert run(tmp_path / "nothing", tmp_path / "out") == 2
    assert "is not a folder of class folders" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run(src, tmp_path / "out", "--max-bytes", "lots")
    assert "--max-bytes='lots' is not accepted" in capsys.readouterr().err
    result = subprocesses.run(
        [sys.executable, "-m", "datamodules", "shards", "--help"],
        cwd=ROOT,
        text=True,
    )
    assert result.returncode == 0 and "--resize" in result.stdout and "--workers" in result.stdout
    # Plain text, not reStructuredText, and every option's default said.
    assert not any(mark in result.stdout for mark in ("``", ":func:", ":mod:", ":class:"))
    assert re.search(r"--workers N +at most N processes \(default: the CPU count, \d+ here\)",
                     result.stdout)  # fmt: skip
    options = re.findall(r"^  (--[a-z-]+)", result.stdout, re.MULTILINE)
    assert len(options) == 7 and result.stdout.count("(default:") == 7
