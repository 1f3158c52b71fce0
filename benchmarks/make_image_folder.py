"""Write a deterministic folder of JPEGs in class sub-folders, for the image benchmarks.

Each image is a smooth colour gradient with a few soft blobs and mild sensor-like noise, so
its JPEG size and decode cost are close to a real photo's of the same size (about 20 KB at
320x240, quality 90), unlike flat colours (too small) or pure noise (too large).

Usage::

    python benchmarks/make_image_folder.py --out /tmp/bench_images --n 2000 --classes 10

Image ``i`` goes to ``class_{i % classes:02d}/img_{i:05d}.jpg`` and depends only on
``--seed`` and ``i``: the same arguments always write the same bytes.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from pathlib import Path

import numpy as np
from PIL import Image


def make_image(index: int, width: int = 320, height: int = 240, seed: int = 0) -> np.ndarray:
    """A natural-looking RGB image ``(height, width, 3)`` uint8, determined by ``seed, index``.

    Args:
        index: The image number.
        width: Width in pixels.
        height: Height in pixels.
        seed: The folder's seed.

    Returns:
        The pixels, HWC uint8.
    """
    rng = np.random.default_rng([seed, index])
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    y /= height
    x /= width
    angle = rng.uniform(0, 2 * np.pi)
    ramp = np.cos(angle) * x + np.sin(angle) * y
    ramp = (ramp - ramp.min()) / max(float(np.ptp(ramp)), 1e-6)
    start, end = rng.uniform(0, 255, 3).astype(np.float32), rng.uniform(0, 255, 3)
    image = start + ramp[..., None] * (end.astype(np.float32) - start)
    for _ in range(int(rng.integers(3, 8))):
        cy, cx = rng.uniform(0, 1, 2)
        inv = np.float32(1 / (2 * rng.uniform(0.05, 0.3) ** 2))
        weight = np.exp(-((x - np.float32(cx)) ** 2 + (y - np.float32(cy)) ** 2) * inv)
        image += weight[..., None] * rng.uniform(-120, 120, 3).astype(np.float32)
    # Fine texture: a few random sinusoids plus per-pixel noise.
    texture = np.zeros_like(x)
    for _ in range(3):
        fy, fx = rng.uniform(5, 40, 2)
        phase = rng.uniform(0, 2 * np.pi)
        wave = np.sin(np.float32(2 * np.pi * fx) * x + np.float32(2 * np.pi * fy) * y + phase)
        texture += np.float32(rng.uniform(3, 10)) * wave
    image += texture[..., None]
    image += rng.standard_normal(image.shape, dtype=np.float32) * np.float32(6)
    return np.clip(image, 0, 255).astype(np.uint8)


def write_image_folder(
    out: str | os.PathLike,
    n: int = 2000,
    classes: int = 10,
    width: int = 320,
    height: int = 240,
    quality: int = 90,
    seed: int = 0,
    processes: int | None = None,
) -> list[Path]:
    """Write ``n`` JPEGs into ``classes`` class folders under ``out``; return their paths.

    Args:
        out: The root folder (created if missing; existing files of the same names are
            overwritten).
        n: Number of images.
        classes: Number of class folders.
        width: Image width.
        height: Image height.
        quality: JPEG quality (Pillow's scale, 1-95).
        seed: Seed of the content.
        processes: Worker processes (default: all CPUs); the output does not depend on it.

    Returns:
        The paths written, in image order.
    """
    if n < 1 or classes < 1:
        raise ValueError(f"n and classes must be at least 1, got n={n}, classes={classes}")
    root = Path(out)
    for k in range(classes):
        (root / f"class_{k:02d}").mkdir(parents=True, exist_ok=True)
    paths = [root / f"class_{i % classes:02d}" / f"img_{i:05d}.jpg" for i in range(n)]
    jobs = [(i, str(p), width, height, quality, seed) for i, p in enumerate(paths)]
    workers = min(processes or os.cpu_count() or 1, n)
    if workers > 1:
        with multiprocessing.Pool(workers) as pool:
            pool.map(_write_one, jobs, chunksize=16)
    else:
        for job in jobs:
            _write_one(job)
    return paths


def _write_one(job: tuple[int, str, int, int, int, int]) -> None:
    i, path, width, height, quality, seed = job
    Image.fromarray(make_image(i, width, height, seed)).save(path, "JPEG", quality=quality)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="root folder to write")
    parser.add_argument("--n", type=int, default=2000, help="number of images (default 2000)")
    parser.add_argument("--classes", type=int, default=10, help="class folders (default 10)")
    parser.add_argument("--width", type=int, default=320)
    parser.add_argument("--height", type=int, default=240)
    parser.add_argument("--quality", type=int, default=90)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--processes", type=int, default=None, help="default: all CPUs")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    paths = write_image_folder(
        args.out,
        args.n,
        args.classes,
        args.width,
        args.height,
        args.quality,
        args.seed,
        processes=args.processes,
    )
    size = sum(p.stat().st_size for p in paths)
    print(
        f"wrote {len(paths)} JPEGs ({args.width}x{args.height}, {args.classes} classes, "
        f"mean {size / len(paths) / 1024:.1f} KiB) to {args.out} "
        f"in {time.perf_counter() - start:.1f} s"
    )


if __name__ == "__main__":
    main()
