"""Camera-sized photos: scaled JPEG decoding against torchvision and against full decoding.

Run: ``python benchmarks/bench_image_hires.py`` (writes 240 JPEGs of 2000x1500, quality 90,
in 4 class folders under the temp directory on first use: 2-6 minutes on 2 cores; then 5-20
minutes, depending on the load). A quick run: ``--n 64 --repeats 1``.

The photos are generated, not downloaded: a smooth scene (:func:`make_image_folder.make_image`
at a quarter of the size, upsampled) with per-pixel sensor-like noise, i.e. fine detail: about
1 MB each, and, as in real photos of textured scenes, Huffman decoding is a large share of the
decode time (so decoding at 1/8 scale is only about 1.6x faster than in full, not 8x).

Same folder, batch 32, ``--workers`` (2) persistent workers for every loader, one warm-up epoch
each, then the median over ``--repeats`` (3) epochs, the loaders taking turns epoch by epoch
(in an order rotated every epoch) so that a busy machine's drifting load hits them alike.
Train (RandomResizedCrop(224) + flip):

* torchvision: ``DataLoader(ImageFolder(root, transform=v2.Compose([v2.RandomResizedCrop(224),
  v2.RandomHorizontalFlip(), v2.PILToTensor()])), batch_size=32, shuffle=True)``: PIL decodes
  every pixel, v2 crops and resizes the PIL image, uint8 out as ours;
* full-decode limit: a DataLoader whose workers decode every file in full exactly as our
  ``decode="full"`` loader does (``decode_image(path, channels_last=True)``: TorchCodec) and
  return nothing: what any loader that decodes every pixel can reach;
* ``ImageFolderDataModule(root, batch_size=32, val_split=0)`` with ``decode="scaled"`` (the
  default) and with ``decode="full"``; the train loader, uint8 out (normalised on the device).

Eval (Resize(256) + CenterCrop(224)): torchvision ``ImageFolder`` + ``v2.Resize(256)`` +
``v2.CenterCrop(224)`` + ``PILToTensor``, and the DataModule's ``val_dataloader()`` (the whole
folder as ``val_root``) with each ``decode``. Ratios against the torchvision loader and the
full-decode limit of the same run.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import datasets
from torchvision.transforms import v2

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_image_folder import DecodeOnly, count_heights, images_per_second  # noqa: E402
from make_image_folder import make_image  # noqa: E402

from datamodules import ImageFolderDataModule  # noqa: E402
from datamodules.images.index import scan_image_folder  # noqa: E402

# Benchmarks print figures, not the DataModules' summaries (logged at INFO).
logging.getLogger("datamodules").setLevel(logging.WARNING)


def make_photo(index: int, width: int = 2000, height: int = 1500, seed: int = 0) -> np.ndarray:
    """A photo-like RGB image ``(height, width, 3)`` uint8 with fine detail, from ``seed, index``.

    A smooth scene drawn at a quarter of the size and upsampled (bicubic), plus per-pixel noise:
    luminance noise of +-10 and colour noise of +-4 levels, like a camera sensor's at a high ISO.
    """
    scene = Image.fromarray(make_image(index, width // 4, height // 4, seed))
    pixels = np.asarray(scene.resize((width, height), Image.Resampling.BICUBIC), dtype=np.int16)
    rng = np.random.default_rng([seed, index, 1])
    luma = rng.integers(-10, 11, (height, width, 1), dtype=np.int16)
    chroma = rng.integers(-4, 5, (height, width, 3), dtype=np.int16)
    return np.clip(pixels + luma + chroma, 0, 255).astype(np.uint8)


def _write_one(job: tuple[int, str, int, int]) -> None:
    index, path, width, height = job
    Image.fromarray(make_photo(index, width, height)).save(path, "JPEG", quality=90)


def write_photos(
    root: Path, n: int, classes: int = 4, size: tuple[int, int] = (2000, 1500)
) -> None:
    """Writes ``n`` photos into ``classes`` class folders of ``root`` (2 processes)."""
    jobs = []
    for i in range(n):
        folder = root / f"class_{i % classes:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        jobs.append((i, str(folder / f"photo_{i:04d}.jpg"), *size))
    with multiprocessing.Pool(min(2, os.cpu_count() or 1)) as pool:
        pool.map(_write_one, jobs, chunksize=4)


def measure(loaders: dict[str, DataLoader], n: int, repeats: int) -> dict[str, float]:
    """Median images/s of each loader: one warm-up epoch, then loaders take turns."""
    for loader in loaders.values():
        images_per_second(loader, n)
    rates: dict[str, list[float]] = {name: [] for name in loaders}
    names = list(loaders)
    for epoch in range(repeats):
        for name in names[epoch % len(names) :] + names[: epoch % len(names)]:  # rotated
            loader = loaders[name]
            sampler = getattr(loader, "sampler", None)
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(epoch + 1)
            rates[name].append(images_per_second(loader, n))
    return {name: statistics.median(r) for name, r in rates.items()}


def report(title: str, median: dict[str, float], baseline: str, limit: str) -> None:
    print(title)
    print("{:34s} {:>9s} {:>15s} {:>14s}".format("loader", "images/s", "vs torchvision",
                                                "vs full decode"))  # fmt: skip
    for name, rate in median.items():
        print(
            f"{name:34s} {rate:9.1f} {rate / median[baseline]:14.2f}x {rate / median[limit]:13.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root", type=Path, default=Path(tempfile.gettempdir()) / "bench-hires-jpegs"
    )
    parser.add_argument("--n", type=int, default=240, help="photos (default 240)")
    parser.add_argument("--repeats", type=int, default=3, help="timed epochs (default 3)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    root = args.root if args.n == 240 else args.root.with_name(f"{args.root.name}-{args.n}")
    if not (root / ".complete").exists():
        start = time.perf_counter()
        write_photos(root, args.n)
        (root / ".complete").touch()
        print(f"wrote {args.n} JPEGs to {root} in {time.perf_counter() - start:.0f} s")
    torch.set_num_threads(1)
    paths = scan_image_folder(root).paths
    n, workers, batch = len(paths), args.workers, args.batch_size
    size = sum(os.path.getsize(p) for p in paths) / n / 1e6
    print(
        f"{n} JPEGs 2000x1500 (quality 90, {size:.2f} MB each) -> 224, batch {batch}, "
        f"{workers} workers, median of {args.repeats}; machine: {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, torch {torch.__version__}"
    )
    common = {"batch_size": batch, "num_workers": workers, "persistent_workers": workers > 0}
    decode_only = DataLoader(DecodeOnly(paths), collate_fn=count_heights, **common)
    train_v2 = v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), v2.PILToTensor()])
    eval_v2 = v2.Compose([v2.Resize(256), v2.CenterCrop(224), v2.PILToTensor()])
    ours = {
        decode: ImageFolderDataModule(
            root,
            val_root=root,
            batch_size=batch,
            val_split=0,
            num_workers=workers,
            decode=decode,
        )  # fmt: skip
        for decode in ("scaled", "full")
    }
    train = {
        "torchvision ImageFolder+PIL+v2": DataLoader(
            datasets.ImageFolder(str(root), transform=train_v2), shuffle=True, **common
        ),
        "full decode only (TorchCodec)": decode_only,
        'ImageFolderDataModule "scaled"': ours["scaled"].train_dataloader(),
        'ImageFolderDataModule "full"': ours["full"].train_dataloader(),
    }
    median = measure(train, n, args.repeats)
    report("train: RandomResizedCrop(224) + flip", median, *list(median)[:2])
    evaluate = {
        "torchvision ImageFolder+PIL+v2": DataLoader(
            datasets.ImageFolder(str(root), transform=eval_v2), **common
        ),
        "full decode only (TorchCodec)": decode_only,
        'ImageFolderDataModule "scaled"': ours["scaled"].val_dataloader(),
        'ImageFolderDataModule "full"': ours["full"].val_dataloader(),
    }
    median = measure(evaluate, n, args.repeats)
    report("eval: Resize(256) + CenterCrop(224)", median, *list(median)[:2])


if __name__ == "__main__":
    main()
