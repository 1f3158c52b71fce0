"""``python -m datamodules shards SRC OUT``: an image folder to train and val shards.

Usage::

    python -m datamodules shards data/images shards/ [--fmt tar|parquet] [--max-bytes 256MB]
        [--workers N] [--val-split 0.1] [--seed 42] [--resize N] [--quality 90]

``SRC`` is a folder of class sub-folders, listed as ``torchvision.datasets.ImageFolder`` (and
:class:`~datamodules.ImageFolderDataModule`) list it: the same classes, class indices and
files. Its images are split as ImageFolderDataModule splits them (``val_split`` of each class,
stratified, from ``split_seed`` = ``--seed``), so ``ImageFolderDataModule(SRC,
val_split=F)`` validates on exactly the images of ``OUT/val-*``. Written:

* ``OUT/train-000000.tar``, ... (records in a seeded random order, so that every shard mixes
  the classes) and ``OUT/val-000000.tar``, ... (in folder order); each record is
  ``{"__key__": class/file, <ext>: the image's bytes, "cls": class index}`` (``.jpeg`` files
  as ``jpg``). With ``--fmt parquet``, ``OUT/train-000000.parquet``, ... with the columns
  ``__key__``, ``image`` (Hugging Face's ``Image``) and ``label``;
* ``OUT/classes.json``: the class names, index by index;
* ``OUT/shards.json``: what was asked and what each shard holds (a rerun checks it);
* ``OUT/train.index.json`` and ``OUT/val.index.json``: the dataset indexes of the splits
  (webdataset's wids format, :mod:`~datamodules.shards.dataset_index`), which a
  StreamingDataModule (and ``wids.ShardListDataset``) reads instead of the shards.

Without ``--resize`` the original bytes are copied. ``--resize N`` re-encodes (JPEG,
``--quality``) each image whose short side exceeds N, down to N (FFCV's
``max_resolution``): less to read and much less to decode, for a crop to 224 that never
needed the full size.

Shards are cut by the images' sizes before anything is written (about ``--max-bytes`` each;
with ``--resize`` they come out smaller), then written in parallel by up to ``--workers``
processes (one per 64 MB of images to copy, or per 16 images to re-encode: below that a
process costs more to start than it saves), each renamed into place when complete, with a
progress bar (images/s) on a terminal. A rerun with the same arguments keeps the shards
already complete and writes the rest; other arguments over the same ``OUT`` are refused.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np
import torch

from datamodules.core.splits import compute_split_indices
from datamodules.imaging.decoding import IMG_EXTENSIONS, decode_image
from datamodules.shards.dataset_index import write_dataset_index
from datamodules.shards.folder_args import PROG, parse_args
from datamodules.shards.index import index_shards
from datamodules.shards.writer import write_shard

__all__ = ["main", "plan_shards", "run"]

#: Bytes a tar record takes beyond its image's: three headers (one pax), the class, padding.
TAR_RECORD_OVERHEAD = 2048
_EXTENSION = {".jpeg": "jpg", ".tif": "tiff"}


def list_folder(src: Path) -> tuple[list[str], list[tuple[str, int]]]:
    """Classes and ``(path, class index)`` samples, exactly as torchvision's ImageFolder."""
    from torchvision.datasets.folder import find_classes, make_dataset

    classes, class_to_idx = find_classes(str(src))
    return classes, make_dataset(str(src), class_to_idx, extensions=IMG_EXTENSIONS)


def record_key(src: str, path: str, taken: set[str]) -> str:
    """The record's key: its path under ``src`` without the extension, dots made ``_``."""
    rel = path[len(src) + 1 :] if path.startswith(src + os.sep) else os.path.relpath(path, src)
    head, base = os.path.split(rel)
    stem = os.path.splitext(base)[0].replace(".", "_")
    key = f"{head}/{stem}".replace(os.sep, "/") if head else stem
    unique, n = key, 1
    while unique in taken:
        unique, n = f"{key}_{n}", n + 1
    taken.add(unique)
    return unique


def plan_shards(args: argparse.Namespace) -> dict[str, Any]:
    """Which image goes into which shard: decided from the folder alone, the same every run."""
    classes, samples = list_folder(args.src)
    targets = torch.tensor([t for _, t in samples], dtype=torch.int64)
    val_split = int(args.val_split) if args.val_split >= 1 else args.val_split
    split = compute_split_indices(
        len(samples),
        explicit=None,
        val_split=val_split,
        test_split=0,
        seed=args.seed,
        labels=lambda: targets,
    )
    order = {
        "train": split["train"][torch.randperm(len(split["train"]),
                                               generator=torch.Generator().manual_seed(args.seed))],
        "val": split["val"],
    }  # fmt: skip
    taken: set[str] = set()
    keys = [record_key(str(args.src), path, taken) for path, _ in samples]
    shards: list[dict[str, Any]] = []
    for name, indices in order.items():
        current: list[list[Any]] = []
        size = 0
        for i in indices.tolist():
            path, label = samples[i]
            cost = os.path.getsize(path) + TAR_RECORD_OVERHEAD
            if current and size + cost > args.max_bytes:
                shards.append({"split": name, "images": current})
                current, size = [], 0
            current.append([path, label, keys[i]])
            size += cost
        if current:
            shards.append({"split": name, "images": current})
    numbers = {"train": 0, "val": 0}
    for shard in shards:
        shard["name"] = f"{shard['split']}-{numbers[shard['split']]:06d}.{args.fmt}"
        numbers[shard["split"]] += 1
    return {"classes": classes, "shards": shards}


def encode_image(path: str, resize: int | None, quality: int) -> tuple[str, bytes]:
    """``(extension, bytes)`` of one image: the file's own, or re-encoded smaller."""
    ext = os.path.splitext(path)[1].lower()
    with open(path, "rb", buffering=0) as file:
        data = file.readall()
    if resize is not None:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            transposed = image.getexif().get(0x0112, 1) in (5, 6, 7, 8)
        if transposed:
            width, height = height, width
        if min(width, height) > resize:
            pixels = decode_image(path).permute(1, 2, 0).numpy()  # as the reader decodes it
            scale = resize / min(width, height)
            size = (max(1, round(width * scale)), max(1, round(height * scale)))
            smaller = Image.fromarray(np.ascontiguousarray(pixels)).resize(size, Image.BICUBIC)
            buffer = io.BytesIO()
            smaller.save(buffer, "JPEG", quality=quality)
            return "jpg", buffer.getvalue()
    return _EXTENSION.get(ext, ext[1:]), data


def write_planned(job: tuple[dict[str, Any], str, str, int | None, int]) -> int:
    """Writes one planned shard (in a worker process); returns its image count."""
    shard, out, fmt, resize, quality = job
    progress = _progress

    def records():
        for i, (path, label, key) in enumerate(shard["images"]):
            ext, data = encode_image(path, resize, quality)
            if progress is not None and i % 16 == 15:
                progress.put(16)
            if fmt == "tar":
                yield {"__key__": key, ext: data, "cls": label}
            else:
                yield {"__key__": key, "image": {"bytes": data, "path": f"{key}.{ext}"},
                       "label": label}  # fmt: skip
        if progress is not None:
            progress.put(len(shard["images"]) % 16)

    write_shard(records(), Path(out) / shard["name"], fmt)
    return len(shard["images"])


def _manifest(args: argparse.Namespace, plan: dict[str, Any]) -> dict[str, Any]:
    asked = {"fmt": args.fmt, "max_bytes": args.max_bytes, "val_split": args.val_split,
             "seed": args.seed, "resize": args.resize, "quality": args.quality}  # fmt: skip
    listing = json.dumps([[s["name"], s["images"]] for s in plan["shards"]]).encode()
    extensions = {
        _EXTENSION.get(e, e[1:])
        for e in (os.path.splitext(p)[1].lower() for s in plan["shards"] for p, _, _ in s["images"])
    }
    if args.resize is not None:
        extensions.add("jpg")
    return {
        "arguments": asked,
        "image_keys": sorted(extensions, key=lambda e: (e != "jpg", e)),
        "plan": hashlib.sha1(listing).hexdigest(),
        "classes": plan["classes"],
        "shards": {s["name"]: len(s["images"]) for s in plan["shards"]},
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit status."""
    return run(parse_args(sys.argv[1:] if argv is None else argv))


def run(args: argparse.Namespace) -> int:
    """Writes the shards that parsed arguments ask for; returns the exit status."""
    if not args.src.is_dir():
        print(f"{PROG}: SRC {str(args.src)!r} is not a folder of class folders.", file=sys.stderr)
        return 2
    began = time.perf_counter()
    plan = plan_shards(args)
    manifest = _manifest(args, plan)
    args.out.mkdir(parents=True, exist_ok=True)
    existing = args.out / "shards.json"
    if existing.exists():
        before = json.loads(existing.read_text())
        if (
            before.get("plan") != manifest["plan"]
            or before.get("arguments") != manifest["arguments"]
        ):
            other = before.get("arguments")
            print(
                f"{PROG}: {str(args.out)!r} holds shards of another run ({other}); remove them "
                "or choose another OUT.",
                file=sys.stderr,
            )
            return 2
    for name, value in (("shards.json", manifest), ("classes.json", plan["classes"])):
        tmp = args.out / f".{name}.tmp"
        tmp.write_text(json.dumps(value, indent=1) + "\n")
        os.replace(tmp, args.out / name)
    todo = [s for s in plan["shards"] if not (args.out / s["name"]).exists()]
    total = sum(len(s["images"]) for s in plan["shards"])
    kept = total - sum(len(s["images"]) for s in todo)
    _write(todo, args, total, kept)
    for split in ("train", "val"):
        names = [s["name"] for s in plan["shards"] if s["split"] == split]
        if names:  # the shards' headers (or footers), scanned on this disk
            indexes = index_shards([str(args.out / n) for n in names], args.fmt, "skip", False)
            write_dataset_index(args.out / f"{split}.index.json", indexes, split)
    elapsed = time.perf_counter() - began
    written = total - kept
    counts = {split: sum(len(s["images"]) for s in plan["shards"] if s["split"] == split)
              for split in ("train", "val")}  # fmt: skip
    size = sum((args.out / s["name"]).stat().st_size for s in plan["shards"])
    print(
        f"{counts['train']} train and {counts['val']} val images of {len(plan['classes'])} "
        f"classes in {len(plan['shards'])} shards ({size / 1e6:.1f} MB) in {args.out}: "
        f"{written} written in {elapsed:.1f} s ({written / max(elapsed, 1e-9):.0f} images/s), "
        f"{kept} kept from an earlier run."
    )
    image_key = "image" if args.fmt == "parquet" else ";".join(manifest["image_keys"])
    label_key = "label" if args.fmt == "parquet" else "cls"
    print(
        f"read them with StreamingDataModule({str(args.out / 'train.index.json')!r}, "
        f"{str(args.out / 'val.index.json')!r}, image_key={image_key!r}, "
        f"label_key={label_key!r}, classes=json.load(open({str(args.out / 'classes.json')!r})))"
    )
    return 0


#: Work that pays for a process: bytes of images to copy, or images to re-encode.
BYTES_PER_PROCESS = 64 << 20
RESIZES_PER_PROCESS = 16
_progress: Any = None  # in a worker process: the queue its progress goes to


def _useful_processes(todo: list[dict[str, Any]], resize: int | None) -> int:
    images = [path for shard in todo for path, _, _ in shard["images"]]
    if resize is not None:
        return max(1, len(images) // RESIZES_PER_PROCESS)
    return max(1, sum(os.path.getsize(p) for p in images) // BYTES_PER_PROCESS)


def _set_progress(queue: Any) -> None:
    global _progress
    _progress = queue


def _write(todo: list[dict[str, Any]], args: argparse.Namespace, total: int, kept: int) -> None:
    import multiprocessing

    from tqdm.auto import tqdm

    bar = tqdm(total=total, initial=kept, unit="img", desc="shards", disable=None, smoothing=0.1)
    jobs = [(s, str(args.out), args.fmt, args.resize, args.quality) for s in todo]
    try:
        workers = min(args.workers, len(todo), _useful_processes(todo, args.resize))
        if workers <= 1:
            for job in jobs:
                bar.update(write_planned(job))
            return
        queue = multiprocessing.Queue()
        with ProcessPoolExecutor(workers, initializer=_set_progress, initargs=(queue,)) as pool:
            pending = {pool.submit(write_planned, job) for job in jobs}
            while pending:
                done, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
                while not queue.empty():
                    bar.update(queue.get())
                for future in done:
                    if future.exception() is not None:
                        for other in pending:
                            other.cancel()
                        future.result()  # raises the worker's error here
    finally:
        bar.close()
