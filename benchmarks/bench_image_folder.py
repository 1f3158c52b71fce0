"""ImageFolderDataModule against torchvision's ImageFolder + PIL, and against the decoder alone.

Run: ``python benchmarks/bench_image_folder.py`` (writes 2,000 JPEGs of 320x240 in 10 class
folders under the temp directory on first use; about 3 minutes on 2 cores).

For num_workers 0 and 2, on the same folder, batch 64, one full shuffled epoch per repeat,
median images/s over the repeats, all measured in one run:

* baseline: ``DataLoader(torchvision.datasets.ImageFolder(root, transform=Compose([
  RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor()])), batch_size=64, shuffle=True)``;
* ours: ``ImageFolderDataModule(root, image_size=224, batch_size=64).train_dataloader()``
  (same train pipeline: RandomResizedCrop(224) + flip, uint8 out of the loader);
* with workers, ours again with ``reuse_batch_memory=False`` (a fresh shared-memory segment
  per batch, as PyTorch's default path): what the reused batch buffers are worth;
* decode only: the same files decoded in the same number of processes (a DataLoader whose
  workers decode and return nothing) exactly as our loader decodes them:
  :func:`datamodules.imaging.decoding.decode_image` with ``channels_last=True``, i.e. TorchCodec's
  decoder on the file's bytes with no layout copy: the decoder's limit.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset
from torchvision import datasets, transforms

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_image_folder import write_image_folder  # noqa: E402

from datamodules import ImageFolderDataModule  # noqa: E402
from datamodules.core.loaders import ResumableDataLoader  # noqa: E402
from datamodules.images.index import scan_image_folder  # noqa: E402
from datamodules.imaging.decoding import decode_image  # noqa: E402

# Benchmarks print figures, not the DataModules' summaries (logged at INFO).
logging.getLogger("datamodules").setLevel(logging.WARNING)


class DecodeOnly(Dataset):
    """Decodes a file and returns only its height (so nothing big crosses the queue)."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> int:
        return decode_image(self.paths[i], channels_last=True).shape[1]


def count_heights(batch: list[int]) -> int:
    return len(batch)


def images_per_second(loader: DataLoader, n: int) -> float:
    start = time.perf_counter()
    seen = 0
    for batch in loader:
        seen += batch if isinstance(batch, int) else len(batch[0])
    elapsed = time.perf_counter() - start
    assert seen == n, (seen, n)
    return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "bench-jpegs")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", default="0,2")
    args = parser.parse_args()
    if not (args.root / ".complete").exists():
        write_image_folder(str(args.root), n=args.n, classes=10)
        (args.root / ".complete").touch()
    torch.set_num_threads(1)
    paths = scan_image_folder(args.root).paths
    n = len(paths)
    v1 = transforms.Compose(
        [
            transforms.RandomResizedCrop(224),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
        ]
    )
    print(f"{n} JPEGs of 320x240 -> 224x224, batch 64, median of {args.repeats} epochs")
    header = ("workers", "loader", "images/s", "vs torchvision", "vs decode")
    print("{:>7s} {:28s} {:>9s} {:>15s} {:>10s}".format(*header))
    for workers in (int(w) for w in args.workers.split(",")):
        baseline = DataLoader(
            datasets.ImageFolder(str(args.root), transform=v1),
            batch_size=64,
            shuffle=True,
            num_workers=workers,
        )
        dm = ImageFolderDataModule(
            str(args.root), image_size=224, batch_size=64, val_split=0, num_workers=workers
        )
        ours = dm.train_dataloader()
        decode = DataLoader(
            DecodeOnly(paths),
            batch_size=64,
            num_workers=workers,
            collate_fn=count_heights,
            persistent_workers=workers > 0,
        )
        loaders = {"torchvision ImageFolder+PIL": baseline, "ImageFolderDataModule": ours,
                   "decode only": decode}  # fmt: skip
        if workers:
            loaders["ours, fresh shm per batch"] = ResumableDataLoader(
                ours.dataset,
                sampler=ours.sampler,
                reuse_batch_memory=False,
                num_workers=workers,
                persistent_workers=True,
            )
        for loader in loaders.values():  # warm-up: start persistent workers, fill caches
            images_per_second(loader, n)
        rates: dict[str, list[float]] = {name: [] for name in loaders}
        for epoch in range(args.repeats):
            ours.sampler.set_epoch(epoch + 1)
            for name, loader in loaders.items():
                rates[name].append(images_per_second(loader, n))
        median = {name: statistics.median(r) for name, r in rates.items()}
        if ours.batch_pool is not None:
            print(f"  reused batch buffers: {ours.batch_pool.stats()}")
        for name, rate in median.items():
            print(
                f"{workers:7d} {name:28s} {rate:9.0f} "
                f"{rate / median['torchvision ImageFolder+PIL']:14.2f}x "
                f"{rate / median['decode only']:9.2f}x"
            )


if __name__ == "__main__":
    main()
