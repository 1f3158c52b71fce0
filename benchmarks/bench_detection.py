"""DetectionDataModule against torchvision's reference detection pipeline, on the same data.

The data (generated, cached under ``--data``): crops of the two photos scikit-learn ships
(``load_sample_images()``: ``china.jpg``, ``flower.jpg``, 640x427), resized to 640x480,
480x640, 640x427, 512x512 or 800x600, with 1-20 objects pasted on each: scikit-learn's
handwritten digits (``load_digits``, upscaled and coloured; classes ``0``-``9``) and filled
shapes (``ellipse``, ``triangle``, ``rectangle``), each with its box and its outline as a COCO
polygon. ``--images`` JPEGs (quality 90) and one COCO JSON file.

The two pipelines, batch 8, random order, the training transform of torchvision's detection
references (their ``DetectionPresetTrain(data_augmentation="hflip")``: a horizontal flip with
probability 0.5, boxes XYXY; no resize, as torchvision's models resize inside):

* ours: ``DetectionDataModule(json, group_by_aspect_ratio=3, masks=...)`` and its train loader,
  whose default transform is that flip. Its images are ``uint8``: the DataModule turns them into
  floats in [0, 1] on the device (``on_after_batch_transfer``). Measured twice: the loader
  alone (what a GPU run waits for), and the loader with that device step run here, on this
  machine's CPU, in the main process;
* the reference, as torchvision's ``references/detection`` builds it (``--backend pil
  --use-v2``): ``torchvision.datasets.CocoDetection`` + ``wrap_dataset_for_transforms_v2``
  (target keys boxes, labels, image_id, and masks with ``--masks``) + their preset,
  ``v2.Compose([RandomHorizontalFlip(0.5), ToImage(), ToDtype(torch.float, scale=True),
  ConvertBoundingBoxFormat("XYXY"), SanitizeBoundingBoxes(), ToPureTensor()])`` (the flip on
  the PIL image, the float conversion in the loader), aspect-ratio grouping (their
  ``GroupedBatchSampler`` over a ``RandomSampler`` with ``create_aspect_ratio_groups(k=3)``,
  written out below from ``references/detection/group_by_aspect_ratio.py``) and
  ``collate_fn=lambda b: tuple(zip(*b))``.

Figures, each from this one run (medians over ``--repeats``):

1. **Images per second** over an epoch, 0 and 2 workers (``--workers``), with and without
   masks: ours over the reference's, both as floats in [0, 1]; ours with the device step
   counted on this CPU, and without it. Bar: ours at least 2.5x.
2. **Annotation loading** of a COCO-scale file (``--coco-images`` images, about 7.3 objects
   each with a polygon: 118k and 860k by default, as COCO train2017; empty image files, as our
   index checks that each image exists): our first setup (parsing, writing the index) against
   ``pycocotools.coco.COCO(path)``. Bar: ours at least 2x faster. Our later setup (the
   index mapped) as a share of the first. Bar: at most 5%.
3. **Worker memory**: each worker's USS (``Private_Clean + Private_Dirty`` of
   ``/proc/PID/smaps_rollup``, the memory only that worker holds) once every worker has sent
   its first batch and at the epoch's last one, 2 workers, with masks, the growth as a share
   of the first; ours and the reference's. The main process reads every batch it gets (a
   byte of each page of the images and masks, as a copy to the device would), so that the
   shared memory a batch travels in is not counted as the worker's own. Each side runs in a
   fresh interpreter (``spawn``), so that what the other figures leave in this process is
   not counted in its workers. Bar: ours at most 10%.

The load average is printed before and after: figures from a loaded machine mean little.

Run: ``python benchmarks/bench_detection.py`` (2,000 images, 3 repeats, COCO-scale
annotations: several minutes and about 3 GB of memory). Quick check that it works:
``python benchmarks/bench_detection.py --images 100 --repeats 1 --coco-images 2000``.
"""

from __future__ import annotations

import argparse
import bisect
import json
import logging
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from collections.abc import Iterator
from itertools import chain, repeat
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BATCH = 8
SIZES = [(640, 480), (480, 640), (640, 427), (512, 512), (800, 600)]
SHAPES = ["ellipse", "triangle", "rectangle"]
CLASSES = [str(d) for d in range(10)] + SHAPES
logging.getLogger("datamodules").setLevel(logging.WARNING)
logging.getLogger("lightning").setLevel(logging.WARNING)
warnings.filterwarnings("ignore")


# --------------------------------------------------------------------------- the data
def _outline(kind: str, x: float, y: float, w: float, h: float) -> list[float]:
    if kind == "ellipse":
        t = np.linspace(0, 2 * np.pi, 16, endpoint=False)
        points = np.stack([x + w / 2 + w / 2 * np.cos(t), y + h / 2 + h / 2 * np.sin(t)], 1)
    elif kind == "triangle":
        points = np.array([[x + w / 2, y], [x + w, y + h], [x, y + h]])
    else:
        points = np.array([[x, y], [x + w, y], [x + w, y + h], [x, y + h]])
    return [round(float(v), 2) for v in points.reshape(-1)]


def write_dataset(root: Path, n_images: int, seed: int = 0) -> Path:
    """``n_images`` JPEGs under ``root/images`` and ``root/train.json`` (kept between runs)."""
    from PIL import Image, ImageDraw
    from sklearn.datasets import load_digits, load_sample_images

    path = root / "train.json"
    if path.is_file() and json.loads(path.read_text()).get("info", {}).get("n") == n_images:
        return path
    shutil.rmtree(root, ignore_errors=True)
    (root / "images").mkdir(parents=True)
    photos = [Image.fromarray(p) for p in load_sample_images().images]
    digits = load_digits()
    rng = np.random.default_rng(seed)
    images, anns = [], []
    for image_id in range(1, n_images + 1):
        width, height = SIZES[int(rng.integers(len(SIZES)))]
        photo = photos[int(rng.integers(len(photos)))]
        cw = int(rng.integers(photo.width // 3, photo.width))
        ch = max(8, min(photo.height, int(cw * height / width)))
        left = int(rng.integers(0, photo.width - cw + 1))
        top = int(rng.integers(0, photo.height - ch + 1))
        canvas = photo.crop((left, top, left + cw, top + ch)).resize((width, height))
        draw = ImageDraw.Draw(canvas)
        for _ in range(int(rng.integers(1, 21))):
            w, h = (int(v) for v in rng.integers(16, min(width, height) // 3, 2))
            x, y = int(rng.integers(0, width - w)), int(rng.integers(0, height - h))
            colour = tuple(int(c) for c in rng.integers(0, 256, 3))
            label = int(rng.integers(len(CLASSES)))
            if label < 10:  # a digit: its 8x8 scan, upscaled, inked in the colour
                scan = digits.images[int(rng.choice(np.flatnonzero(digits.target == label)))]
                alpha = Image.fromarray((scan * 16).clip(0, 255).astype(np.uint8)).resize((w, h))
                canvas.paste(Image.new("RGB", (w, h), colour), (x, y), alpha)
                outline = _outline("rectangle", x, y, w, h)
            else:
                outline = _outline(CLASSES[label], x, y, w, h)
                draw.polygon([tuple(p) for p in np.reshape(outline, (-1, 2))], fill=colour)
            anns.append({
                "id": len(anns) + 1, "image_id": image_id, "category_id": label + 1,
                "bbox": [x, y, w, h], "area": float(w * h), "iscrowd": 0,
                "segmentation": [outline],
            })  # fmt: skip
        name = f"images/{image_id:06d}.jpg"
        canvas.save(root / name, quality=90)
        images.append({"id": image_id, "file_name": name, "width": width, "height": height})
    categories = [{"id": i + 1, "name": name} for i, name in enumerate(CLASSES)]
    data = {"info": {"n": n_images}, "images": images, "annotations": anns,
            "categories": categories}  # fmt: skip
    path.write_text(json.dumps(data))
    return path


def write_coco_scale(root: Path, n_images: int, seed: int = 1) -> Path:
    """A COCO-scale annotation file (about 7.3 objects an image, each with a polygon of 8-24
    points) and an empty file per image."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    counts = rng.poisson(7.3, n_images)
    images, anns = [], []
    for image_id in range(1, n_images + 1):
        name = f"{image_id:012d}.jpg"
        open(root / name, "wb").close()
        images.append({"id": image_id, "file_name": name, "width": 640, "height": 480})
        for _ in range(int(counts[image_id - 1])):
            x, y = rng.uniform(0, 500), rng.uniform(0, 360)
            w, h = rng.uniform(4, 140), rng.uniform(4, 120)
            k = int(rng.integers(8, 25))
            t = np.sort(rng.uniform(0, 2 * np.pi, k))
            poly = np.stack([x + w / 2 * (1 + np.cos(t)), y + h / 2 * (1 + np.sin(t))], 1)
            anns.append({
                "id": len(anns) + 1, "image_id": image_id, "category_id": int(rng.integers(1, 81)),
                "bbox": [round(x, 2), round(y, 2), round(w, 2), round(h, 2)],
                "area": round(w * h * 0.78, 2), "iscrowd": 0,
                "segmentation": [np.round(poly.reshape(-1), 2).tolist()],
            })  # fmt: skip
    data = {"images": images, "annotations": anns,
            "categories": [{"id": i, "name": f"class{i}"} for i in range(1, 81)]}  # fmt: skip
    path = root / "instances.json"
    path.write_text(json.dumps(data))
    return path


# --------------------------------------------------------------------------- the reference
def _repeat_to_at_least(iterable: list[int], n: int) -> list[int]:
    repeat_times = math.ceil(n / len(iterable))
    return list(chain.from_iterable(repeat(iterable, repeat_times)))


class ReferenceGroupedBatchSampler:
    """torchvision references/detection/group_by_aspect_ratio.py's ``GroupedBatchSampler``:
    batches of one group from a sampler's order; at the end, the fullest leftover groups are
    topped up with their own earlier samples until ``len(sampler) // batch_size`` batches."""

    def __init__(self, sampler: Any, group_ids: list[int], batch_size: int) -> None:
        self.sampler, self.group_ids, self.batch_size = sampler, group_ids, batch_size

    def __iter__(self) -> Iterator[list[int]]:
        buffer_per_group: dict[int, list[int]] = defaultdict(list)
        samples_per_group: dict[int, list[int]] = defaultdict(list)
        num_batches = 0
        for idx in self.sampler:
            group_id = self.group_ids[idx]
            buffer_per_group[group_id].append(idx)
            samples_per_group[group_id].append(idx)
            if len(buffer_per_group[group_id]) == self.batch_size:
                yield buffer_per_group[group_id]
                num_batches += 1
                del buffer_per_group[group_id]
        num_remaining = len(self) - num_batches
        if num_remaining > 0:
            for group_id, _ in sorted(
                buffer_per_group.items(), key=lambda x: len(x[1]), reverse=True
            ):
                remaining = self.batch_size - len(buffer_per_group[group_id])
                extra = _repeat_to_at_least(samples_per_group[group_id], remaining)
                buffer_per_group[group_id].extend(extra[:remaining])
                yield buffer_per_group[group_id]
                num_remaining -= 1
                if num_remaining == 0:
                    break

    def __len__(self) -> int:
        return len(self.sampler) // self.batch_size


def reference_groups(dataset: Any, k: int = 3) -> list[int]:
    """``create_aspect_ratio_groups(dataset, k)``: width / height quantised by
    ``2 ** linspace(-1, 1, 2k + 1)`` (bisect_right), from the COCO image records."""
    bins = sorted((2 ** np.linspace(-1, 1, 2 * k + 1)).tolist()) if k > 0 else [1.0]
    ratios = []
    for image_id in dataset.ids:
        info = dataset.coco.imgs[image_id]
        ratios.append(float(info["width"]) / float(info["height"]))
    return [bisect.bisect_right(bins, r) for r in ratios]


def _collate(batch: list[Any]) -> tuple:
    return tuple(zip(*batch, strict=True))


def reference_loader(path: Path, masks: bool, workers: int) -> Any:
    import torch
    from torchvision import datasets, tv_tensors
    from torchvision.transforms import v2

    transforms = v2.Compose([
        v2.RandomHorizontalFlip(0.5), v2.ToImage(), v2.ToDtype(torch.float, scale=True),
        v2.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
        v2.SanitizeBoundingBoxes(), v2.ToPureTensor(),
    ])  # fmt: skip
    dataset = datasets.CocoDetection(str(path.parent), str(path), transforms=transforms)
    keys = ["boxes", "labels", "image_id"] + (["masks"] if masks else [])
    dataset = datasets.wrap_dataset_for_transforms_v2(dataset, target_keys=keys)
    sampler = torch.utils.data.RandomSampler(dataset)
    batches = ReferenceGroupedBatchSampler(sampler, reference_groups(dataset), BATCH)
    return torch.utils.data.DataLoader(
        dataset, batch_sampler=batches, num_workers=workers, collate_fn=_collate
    )


def our_module(path: Path, masks: bool, workers: int, cache: Path) -> Any:
    from datamodules import DetectionDataModule

    dm = DetectionDataModule(
        path, masks=masks, group_by_aspect_ratio=3, batch_size=BATCH, val_split=0,
        num_workers=workers, persistent_workers=False, cache=cache,
    )  # fmt: skip
    dm.setup("fit")
    return dm


def our_loader(path: Path, masks: bool, workers: int, cache: Path) -> Any:
    return our_module(path, masks, workers, cache).train_dataloader()


# --------------------------------------------------------------------------- measuring
def uss(pid: int) -> int:
    """Bytes of memory only process ``pid`` holds (Private_Clean + Private_Dirty)."""
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1]) * 1024
    return total


def read(images: Any, targets: Any) -> int:
    """Reads a byte of every page of a batch's images and masks, as a training step that
    copies the batch to its device reads them: the main process maps those pages too, and
    they stop counting in the worker's USS. (Left unread, the shared-memory segments a
    batch travels in count as the worker's own while the worker keeps them for reuse.)"""
    total = 0
    for image in images:
        total += int(image.reshape(-1)[::4096].sum())
    for target in targets:
        masks = target.get("masks") if isinstance(target, dict) else None
        if masks is not None and masks.numel():
            total += int(masks.reshape(-1)[::4096].sum())
    return total


def epoch(
    loader: Any, memory: bool = False, finish: Any = None
) -> tuple[int, float, list[tuple[int, int]]]:
    """Images delivered, seconds, and per worker (USS once each worker has sent a batch, at
    the last batch).
    ``finish``: run on each batch as it arrives (our device step, here on the CPU)."""
    import psutil

    me = psutil.Process()
    images, first, last = 0, {}, {}
    start = time.perf_counter()
    iterator = iter(loader)
    batches = len(loader)
    # Each worker's first reading once it has sent a batch: batches arrive in turn from the
    # workers, so the (workers - 1)th is the last of the workers' first ones.
    first_at = max(int(getattr(loader, "num_workers", 0)) - 1, 0)
    for n, batch in enumerate(iterator):
        if finish is not None:
            batch = finish(batch)
        batch_images, targets = batch
        images += len(batch_images)
        if memory:
            read(batch_images, targets)
        if memory and n in (first_at, batches - 1):
            found = {c.pid: uss(c.pid) for c in me.children() if c.is_running()}
            (first if n == first_at else last).update(found)
    seconds = time.perf_counter() - start
    del iterator
    return images, seconds, [(first[p], last[p]) for p in first if p in last]


def throughput(args: argparse.Namespace, path: Path, cache: Path) -> list[str]:
    lines = []
    for masks in args.masks:
        for workers in args.workers:
            rates: dict[str, list[float]] = {"ours": [], "ours+device": [], "reference": []}
            for _ in range(args.repeats):
                for name in rates:
                    finish = None
                    if name == "reference":
                        loader = reference_loader(path, masks, workers)
                    else:
                        dm = our_module(path, masks, workers, cache)
                        loader = dm.train_dataloader()
                        if name == "ours+device":
                            finish = lambda batch, dm=dm: dm.on_after_batch_transfer(batch, 0)  # noqa: E731
                    images, seconds, _ = epoch(loader, finish=finish)
                    rates[name].append(images / seconds)
            ours, device, ref = (
                statistics.median(rates[k]) for k in ("ours", "ours+device", "reference")
            )
            lines.append(
                f"masks={masks!s:5} workers={workers}: reference {ref:7.1f} img/s; ours "
                f"{ours:7.1f} img/s, {ours / ref:5.2f}x (bar >= 2.5x); with the device step on "
                f"this CPU {device:7.1f} img/s, {device / ref:5.2f}x"
            )
            print(lines[-1], flush=True)
    return lines


def worker_memory(name: str, path: Path, cache: Path) -> list[tuple[int, int]]:
    """Each worker's USS once every worker has sent a batch and at the last batch, over one
    epoch of ``name``'s loader (2 workers, masks; forked, as on Linux by default: a process
    started by ``spawn`` would spawn its workers too)."""
    import multiprocessing

    multiprocessing.set_start_method("fork", force=True)
    loader = our_loader(path, True, 2, cache) if name == "ours" else reference_loader(path, True, 2)
    return epoch(loader, memory=True)[2]


def memory_growth(path: Path, cache: Path) -> list[str]:
    """Worker memory, each side in a fresh interpreter: workers fork from the process that
    runs the loader, and a garbage collection in a worker touches every object it inherited
    (copying its page). What the other parts of this benchmark leave in the process would
    count as the worker's growth, for either side."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    lines = []
    for name in ("ours", "reference"):
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(1, mp_context=spawn) as pool:  # its process may fork workers
            workers = pool.submit(worker_memory, name, path, cache).result()
        growth = [(last - first) / first for first, last in workers]
        shown = ", ".join(
            f"{first / 2**20:.1f} -> {last / 2**20:.1f} MiB ({g:+.1%})"
            for (first, last), g in zip(workers, growth, strict=True)
        )
        bar = " (bar <= 10%)" if name == "ours" else ""
        worst = max(growth) if growth else float("nan")
        lines.append(f"worker USS over an epoch, {name}: {shown}; largest {worst:+.1%}{bar}")
        print(lines[-1], flush=True)
    return lines


def annotation_loading(args: argparse.Namespace, work: Path) -> list[str]:
    from pycocotools.coco import COCO

    from datamodules import DetectionDataModule

    path = write_coco_scale(work / "coco_scale", args.coco_images)
    size = path.stat().st_size / 2**20
    firsts, laters, theirs = [], [], []
    for r in range(args.repeats):
        cache = work / f"coco_cache_{r}"
        timings = []
        for _ in range(2):
            start = time.perf_counter()
            dm = DetectionDataModule(path, val_split=0, num_workers=0, cache=cache)
            dm.setup("fit")
            timings.append(time.perf_counter() - start)
            objects = dm.indexes["train"].num_objects
            del dm
        firsts.append(timings[0])
        laters.append(timings[1])
        start = time.perf_counter()
        coco = COCO(str(path))
        theirs.append(time.perf_counter() - start)
        assert len(coco.anns) == objects, (len(coco.anns), objects)
        del coco
        shutil.rmtree(cache, ignore_errors=True)
    first, later, ref = (statistics.median(x) for x in (firsts, laters, theirs))
    lines = [
        f"annotations: {args.coco_images:,} images, {objects:,} objects, {size:,.0f} MiB of JSON",
        f"  our first setup {first:7.2f} s, pycocotools COCO(path) {ref:7.2f} s: "
        f"{ref / first:5.2f}x faster (bar >= 2x)",
        f"  our later setup {later:7.3f} s: {later / first:6.1%} of the first (bar <= 5%)",
    ]
    for line in lines:
        print(line, flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=2000, help="generated JPEGs")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument(
        "--masks", type=lambda v: {"no": False, "yes": True}[v], nargs="+",
        default=[False, True], metavar="{no,yes}", help="throughput without / with masks",
    )  # fmt: skip
    parser.add_argument("--coco-images", type=int, default=118_287, help="COCO-scale file")
    parser.add_argument("--data", type=Path, default=None, help="dataset cache folder")
    parser.add_argument(
        "--only", choices=["throughput", "annotations", "memory"], nargs="+",
        default=["throughput", "annotations", "memory"],
    )  # fmt: skip
    args = parser.parse_args()
    data = args.data or Path(tempfile.gettempdir()) / "datamodules-bench-detection"
    load_before = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average before: {load_before} ({os.cpu_count()} CPUs)", flush=True)
    path = write_dataset(data / f"images_{args.images}", args.images)
    work = Path(tempfile.mkdtemp(prefix="bench-detection-"))
    try:
        lines = [f"{args.images:,} images, batch {BATCH}, repeats {args.repeats}"]
        if "throughput" in args.only:
            lines += throughput(args, path, work / "cache")
        if "memory" in args.only:
            lines += memory_growth(path, work / "cache")
        if "annotations" in args.only:
            lines += annotation_loading(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_after = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average after: {load_after}")
    print("\n".join(["", "summary:", *lines, f"load before {load_before}, after {load_after}"]))


if __name__ == "__main__":
    main()
