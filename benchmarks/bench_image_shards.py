"""Image shards: our tar shards against the image folder, webdataset and litdata; remote reads;
the shard writer against copying the files. Every bar of the shards issue in one run.

Run: ``python benchmarks/bench_image_shards.py`` (about 4 minutes on 2 cores; writes the 2,000
JPEGs of 320x240 of ``bench_image_folder.py`` under the temp directory on first use).

Data: the same 2,000 JPEGs, 10 classes, written by ``python -m datamodules shards`` into 10
tar shards of about 4 MB (no val split). Every loader: batch 64, 2 workers, one shuffled epoch
of RandomResizedCrop(224) + horizontal flip to uint8, every image counted; medians over
``--repeats`` epochs.

* **Throughput** (persistent workers, after one warm-up epoch):

  * ``ImageFolderDataModule(folder)``: the baseline, the same images as files;
  * ``StreamingDataModule(tar shards, image_key="jpg")``: ours;
  * webdataset: ``WebDataset(shards, shardshuffle=100).shuffle(1000).decode("pil")``, then
    ``v2.Compose([RandomResizedCrop(224), RandomHorizontalFlip(), PILToTensor()])``,
    ``.batched(64)`` through ``WebLoader(num_workers=2)``: its documented pipeline;
  * litdata: the same JPEG bytes through ``optimize`` (``{"image": PIL JPEG, "cls": int}``:
    litdata stores the file's bytes), then ``StreamingDataset(shuffle=True)``, which decodes
    with torchvision's ``decode_jpeg``, the same v2 crop and flip, ``StreamingDataLoader``.

* **Remote** (a fresh loader per epoch, worker start included, as ``bench_remote.py``): the
  shards on local disk against the same shards from ``bench_remote.py``'s HTTP server
  (``--latency`` 100 ms per request, ``--bandwidth`` 20 MB/s per connection; byte ranges
  served), with the seconds to each epoch's first batch: the first
  epoch (no cache) with the library's defaults (``shuffle_buffer=None``, which is 1,000 for
  image records, and ``prefetch_shards=1``) and with ``shuffle_buffer=256,
  prefetch_shards=4``, each against local disk with the same buffer; and an epoch from the
  cache (``cache_dir``, the defaults; the previous epoch filled it).

* **Writer**: ``python -m datamodules shards SRC OUT`` in-process (planning included, default
  ``--workers``), against copying the same files' bytes one by one with ``shutil.copyfile``
  into a fresh folder (page cache warm for both); MB/s of image bytes.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_remote import serve  # noqa: E402
from make_image_folder import write_image_folder  # noqa: E402

from datamodules import ImageFolderDataModule, StreamingDataModule  # noqa: E402
from datamodules.images.index import scan_image_folder  # noqa: E402
from datamodules.shards.folder_shards import main as shards_main  # noqa: E402

logging.getLogger("datamodules").setLevel(logging.WARNING)  # figures only, no summaries
warnings.filterwarnings("ignore")  # torchvision.io's deprecation, webdataset's notes
BATCH, WORKERS = 64, 2
#: The second remote setting: a buffer a quarter of a worker's 1,000 records (in a real dataset
#: it is a small part of a worker's share), so decoding starts before the whole share has
#: arrived, and four shards downloading ahead.
REMOTE_BUFFER, REMOTE_PREFETCH = 256, 4


def images_per_second(loader: Any, n: int, images: Any = lambda b: b[0]) -> float:
    return timed_epoch(loader, n, images)[0]


def timed_epoch(loader: Any, n: int, images: Any = lambda b: b[0]) -> tuple[float, float]:
    """Images per second over one epoch, and the seconds to its first batch."""
    began = time.perf_counter()
    first = None
    seen = 0
    for batch in loader:
        if first is None:
            first = time.perf_counter() - began
        seen += len(images(batch))
    elapsed = time.perf_counter() - began
    if seen != n:
        raise AssertionError(f"{seen} images instead of {n}")
    return n / elapsed, first or 0.0


def ours(shards: list[str], **kwargs: Any) -> StreamingDataModule:
    return StreamingDataModule(
        shards, image_key="jpg", image_size=224, batch_size=BATCH, num_workers=WORKERS, **kwargs
    )


def _same(value: Any) -> Any:
    return value


def webdataset_loader(shards: list[str]) -> Any:
    import webdataset as wds
    from torchvision.transforms import v2

    augment = v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(), v2.PILToTensor()])
    dataset = (
        wds.WebDataset(shards, shardshuffle=100, empty_check=False)
        .shuffle(1000)
        .decode("pil")
        .to_tuple("jpg", "cls")
        .map_tuple(augment, _same)
        .batched(BATCH)
    )
    return wds.WebLoader(dataset, batch_size=None, num_workers=WORKERS, persistent_workers=True)


def _litdata_sample(item: tuple[str, int]) -> dict[str, Any]:
    from PIL import Image

    return {"image": Image.open(item[0]), "cls": item[1]}


class _Augment:
    def __init__(self) -> None:
        from torchvision.transforms import v2

        self.crop = v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()])

    def __call__(self, sample: dict[str, Any]) -> tuple[torch.Tensor, int]:
        return self.crop(sample["image"]), sample["cls"]


def litdata_loader(samples: list[tuple[str, int]], out: Path) -> Any:
    import litdata

    if not (out / "index.json").exists():
        litdata.optimize(
            fn=_litdata_sample,
            inputs=samples,
            output_dir=str(out),
            chunk_bytes="4MB",
            num_workers=WORKERS,
            verbose=False,
            start_method="fork",  # its default, spawn, would become every later loader's
        )
    dataset = litdata.StreamingDataset(str(out), shuffle=True, transform=_Augment())
    return litdata.StreamingDataLoader(
        dataset, batch_size=BATCH, num_workers=WORKERS, persistent_workers=True
    )


def throughput(folder: Path, shards: list[str], litdata_dir: Path, n: int, repeats: int):
    samples = scan_image_folder(folder).samples
    folder_dm = ImageFolderDataModule(
        str(folder), image_size=224, batch_size=BATCH, val_split=0, num_workers=WORKERS
    )
    loaders = {
        "ImageFolderDataModule": folder_dm.train_dataloader(),
        "StreamingDataModule, tar": ours(shards, index_cache=False).train_dataloader(),
        "webdataset": webdataset_loader(shards),
        "litdata": litdata_loader(samples, litdata_dir),
    }
    rates: dict[str, list[float]] = {name: [] for name in loaders}
    for loader in loaders.values():  # warm-up: workers started, page cache filled
        images_per_second(loader, n)
    for _ in range(repeats):
        for name, loader in loaders.items():
            rates[name].append(images_per_second(loader, n))
    del loaders, folder_dm  # their workers stop now, not inside the next loaders' workers
    gc.collect()
    return {name: statistics.median(r) for name, r in rates.items()}


def remote(root: Path, shards: list[str], n: int, repeats: int, latency: float, bandwidth: float):
    server, base = serve(root, latency, bandwidth)
    urls = [f"{base}/{Path(p).relative_to(root).as_posix()}" for p in shards]
    index = root / "index"
    rates: dict[str, list[float]] = {}
    firsts: dict[str, list[float]] = {}

    def epoch(name: str, dm: StreamingDataModule) -> None:
        loader = dm.train_dataloader()  # indexed here, outside the timing
        rate, first = timed_epoch(loader, n)
        rates.setdefault(name, []).append(rate)
        firsts.setdefault(name, []).append(first)

    try:
        for _ in range(repeats):
            for buffer, prefetch in ((None, 1), (REMOTE_BUFFER, REMOTE_PREFETCH)):
                settings = f"shuffle_buffer={buffer}"
                fresh = {
                    "persistent_workers": False,
                    "index_cache": index,
                    "shuffle_buffer": buffer,
                }
                epoch(f"local disk, {settings}", ours(shards, **fresh))
                epoch(f"first epoch, {settings}, prefetch_shards={prefetch}",
                      ours(urls, prefetch_shards=prefetch, **fresh))  # fmt: skip
            cache = root / "cache"
            shutil.rmtree(cache, ignore_errors=True)
            cached = ours(urls, persistent_workers=False, index_cache=index, cache_dir=cache)
            images_per_second(cached.train_dataloader(), n)  # fills the cache
            epoch("from the cache, shuffle_buffer=None", cached)
    finally:
        server.shutdown()
    return {
        name: (statistics.median(r), statistics.median(firsts[name])) for name, r in rates.items()
    }


def writer(folder: Path, work: Path, repeats: int) -> dict[str, float]:
    files = [Path(p) for p in scan_image_folder(folder).paths]
    size = sum(f.stat().st_size for f in files) / 1e6
    rates: dict[str, list[float]] = {}
    for _ in range(repeats):
        target = work / "copy"
        shutil.rmtree(target, ignore_errors=True)
        began = time.perf_counter()
        for k in range(10):
            (target / f"class_{k:02d}").mkdir(parents=True)
        for f in files:
            shutil.copyfile(f, target / f.parent.name / f.name)
        rates.setdefault("copy the files (shutil.copyfile)", []).append(
            size / (time.perf_counter() - began)
        )
        out = work / "shards"
        shutil.rmtree(out, ignore_errors=True)
        began = time.perf_counter()
        assert shards_main([str(folder), str(out), "--val-split", "0", "--max-bytes", "4MB"]) == 0
        rates.setdefault("python -m datamodules shards", []).append(
            size / (time.perf_counter() - began)
        )
    return {name: statistics.median(r) for name, r in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "bench-jpegs")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per request")
    parser.add_argument("--bandwidth", type=float, default=20e6, help="bytes/s per connection")
    parser.add_argument("--parts", default="throughput,remote,writer", help="which to run")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if not (args.root / ".complete").exists():
        write_image_folder(str(args.root), n=args.n, classes=10)
        (args.root / ".complete").touch()
    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="bench-shards-"))
    try:
        out = work / "tar"
        with open(os.devnull, "w") as quiet:  # the command's own report
            stdout, sys.stdout = sys.stdout, quiet
            try:
                assert shards_main([str(args.root), str(out), "--val-split", "0",
                                    "--max-bytes", "4MB", "--workers", "2"]) == 0  # fmt: skip
                write = writer(args.root, work, args.repeats) if "writer" in parts else {}
            finally:
                sys.stdout = stdout
        shards = sorted(str(p) for p in out.glob("train-*.tar"))
        n = len(scan_image_folder(args.root).paths)
        fast, far = {}, {}
        if "throughput" in parts:
            fast = throughput(args.root, shards, work / "litdata", n, args.repeats)
        if "remote" in parts:
            far = remote(work, shards, n, args.repeats, args.latency, args.bandwidth)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cpus, python = os.cpu_count(), platform.python_version()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"{n} JPEGs 320x240 -> 224, batch {BATCH}, {WORKERS} workers, {len(shards)} tar shards; "
        f"median of {args.repeats}; machine: {platform.machine()}, {cpus} CPUs, Python {python}, "
        f"torch {torch.__version__}; load average {load}"
    )
    if fast:
        base, tar = fast["ImageFolderDataModule"], fast["StreamingDataModule, tar"]
        print(f"{'loader':<34}{'images/s':>10}{'vs folder':>11}{'tar vs it':>11}")
        for name, rate in fast.items():
            print(f"{name:<34}{rate:>10,.0f}{rate / base:>10.2f}x{tar / rate:>10.2f}x")
    if far:
        print(
            f"remote: {args.latency * 1000:.0f} ms per request, {args.bandwidth / 1e6:.0f} MB/s "
            "per connection (a fresh loader per epoch)"
        )
        print(f"{'loader':<58}{'images/s':>10}{'vs local':>11}{'first batch':>13}")
        for name, (rate, first) in far.items():
            buffer = name.split("shuffle_buffer=")[1].split(",")[0]
            local = far[f"local disk, shuffle_buffer={buffer}"][0]
            print(f"{name:<58}{rate:>10,.0f}{rate / local:>10.2f}x{first:>12.2f}s")
    if write:
        copy = write["copy the files (shutil.copyfile)"]
        print(f"{'writer':<34}{'MB/s':>10}{'vs copy':>11}")
        for name, rate in write.items():
            print(f"{name:<34}{rate:>10,.1f}{rate / copy:>10.2f}x")


if __name__ == "__main__":
    main()
