"""Decode-only throughput on an image folder: our decode_image against the usual alternatives.

Methods, each turning every file of the folder into a ``uint8`` ``(3, H, W)`` tensor:

* ``decode_image``: ``datamodules.imaging.decoding.decode_image(path)`` (TorchCodec for JPEG,
  contiguous result);
* ``decode_image_cl``: the same with ``channels_last=True`` (the decoder's own layout, no
  copy);
* ``torchcodec``: ``torchcodec.decoders.decode_jpeg(path)`` called directly (our overhead);
* ``pil``: ``PIL.Image.open(path).convert("RGB")`` + ``pil_to_tensor`` (torchvision's
  ``pil_loader``, then a tensor);
* ``tv_io``: ``torchvision.io.decode_jpeg(torchvision.io.read_file(path))``: deprecated in
  torchvision 0.29, it warns ``DeprecationWarning`` on every call (silenced here, counted).

Each repeat decodes every file once per method, in ``--processes`` processes (one thread
each), in chunks of ``--chunk`` files per process; the methods take turns chunk by chunk,
so a busy machine's drifting load hits them alike. Throughput is chunk files / chunk wall
time; the table gives the median over all chunks of all ``--repeats`` (after one warm-up
pass) and ratios against ``pil`` measured in the same run. A second table times decode ->
resize to 224x224 -> stack a batch of 64 with contiguous and with channels-last images
(alternating batch by batch), to show what the memory layout costs downstream.

Usage::

    python benchmarks/make_image_folder.py --out /tmp/bench_images
    python benchmarks/bench_decode.py --root /tmp/bench_images [--processes 2] [--repeats 5]
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collates.images import stack_uint8_images  # noqa: E402
from datamodules.images.index import scan_image_folder  # noqa: E402
from datamodules.imaging.decoding import decode_image  # noqa: E402

# Benchmarks print figures, not the DataModules' summaries (logged at INFO).
logging.getLogger("datamodules").setLevel(logging.WARNING)

METHODS = ("decode_image", "decode_image_cl", "torchcodec", "pil", "tv_io")
_deprecations = 0


def _decoder(name: str) -> Callable[[str], torch.Tensor]:
    """The decode function of method ``name`` (imports kept out of the timed loops)."""
    if name == "decode_image":
        return decode_image
    if name == "decode_image_cl":
        return lambda path: decode_image(path, channels_last=True)
    if name == "torchcodec":
        from torchcodec.decoders import decode_jpeg

        return decode_jpeg
    if name == "pil":
        from PIL import Image
        from torchvision.transforms.v2.functional import pil_to_tensor

        def pil(path: str) -> torch.Tensor:
            with Image.open(path) as img:
                return pil_to_tensor(img.convert("RGB"))

        return pil
    if name == "tv_io":
        import torchvision.io

        def tv_io(path: str) -> torch.Tensor:
            global _deprecations
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", DeprecationWarning)
                image = torchvision.io.decode_jpeg(torchvision.io.read_file(path))
            _deprecations += sum(issubclass(w.category, DeprecationWarning) for w in caught)
            return image

        return tv_io
    raise ValueError(f"unknown method {name!r}; choose from {METHODS}")


def _init_worker() -> None:
    torch.set_num_threads(1)


def _decode_shard(job: tuple[str, list[str]]) -> int:
    global _deprecations
    _deprecations = 0
    name, paths = job
    decode = _decoder(name)
    for path in paths:
        decode(path)
    return _deprecations


def _time_chunk(name: str, shards: list[list[str]], pool) -> tuple[float, int]:
    """Decode one chunk (a shard per process) with ``name``: (images/s, DeprecationWarnings)."""
    jobs = [(name, shard) for shard in shards]
    start = time.perf_counter()
    counts = pool.map(_decode_shard, jobs) if pool else [_decode_shard(jobs[0])]
    return sum(len(s) for s in shards) / (time.perf_counter() - start), sum(counts)


def _pipeline(paths: list[str], repeats: int, batch: int = 64) -> dict[str, float]:
    """Images/s of decode -> resize 224x224 -> stack, per memory layout (one process).

    The two layouts alternate batch by batch; the result is the median over all batches.
    """
    from torchvision.transforms.v2.functional import resize

    layouts = {"contiguous": False, "channels_last": True}
    rates: dict[str, list[float]] = {label: [] for label in layouts}
    for r in range(repeats + 1):
        for i in range(0, len(paths) - batch + 1, batch):
            for label, channels_last in layouts.items():
                fmt = torch.channels_last if channels_last else torch.contiguous_format
                start = time.perf_counter()
                images = [
                    resize(decode_image(p, channels_last=channels_last), [224, 224], antialias=True)
                    for p in paths[i : i + batch]
                ]
                stack_uint8_images(images, memory_format=fmt)
                if r:  # the first pass is a warm-up
                    rates[label].append(batch / (time.perf_counter() - start))
    return {label: statistics.median(r) for label, r in rates.items()}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="image folder (class sub-folders)")
    parser.add_argument("--processes", type=int, default=1, help="decoding processes")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes per method")
    parser.add_argument("--chunk", type=int, default=100, help="files per process per timing")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N files")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated")
    parser.add_argument("--no-pipeline", action="store_true", help="skip the layout table")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    paths = scan_image_folder(args.root).paths[: args.limit]
    import PIL
    import torchcodec
    import torchvision

    print(
        f"{len(paths)} files from {args.root}; {args.processes} process(es), 1 thread each; "
        f"{args.repeats} repeats; {_cpu_name()}, {os.cpu_count()} CPUs\n"
        f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
        f"torchcodec {torchcodec.__version__}, pillow {PIL.__version__}"
    )
    context = multiprocessing.get_context("fork")
    pool = context.Pool(args.processes, _init_worker) if args.processes > 1 else None
    names = args.methods.split(",")
    step = args.chunk * args.processes
    chunks = [paths[i : i + step] for i in range(0, len(paths) - step + 1, step)] or [paths]
    rates: dict[str, list[float]] = {name: [] for name in names}
    warned: dict[str, int] = dict.fromkeys(names, 0)
    try:
        for name in names:  # warm-up pass: page cache, lazy imports, allocator
            for chunk in chunks:
                _time_chunk(name, [chunk[k :: args.processes] for k in range(args.processes)], pool)
        for _ in range(args.repeats):
            # Methods alternate chunk by chunk, so drifting machine load hits all alike.
            for chunk in chunks:
                shards = [chunk[k :: args.processes] for k in range(args.processes)]
                for name in names:
                    rate, count = _time_chunk(name, shards, pool)
                    rates[name].append(rate)
                    warned[name] += count
    finally:
        if pool is not None:
            pool.close()
            pool.join()

    medians = {name: statistics.median(r) for name, r in rates.items()}
    base = medians.get("pil")
    print(f"\n{'method':<16} {'images/s':>10}  {'vs pil':>7}  min..max")
    for name, rate in medians.items():
        ratio = f"{rate / base:6.2f}x" if base else "      -"
        note = f"[{min(rates[name]):,.0f} .. {max(rates[name]):,.0f}]"
        if warned[name]:
            per_image = warned[name] / (args.repeats * sum(len(c) for c in chunks))
            note += f"  ({per_image:g} DeprecationWarning(s) per image)"
        print(f"{name:<16} {rate:>10,.0f}  {ratio}  {note}")

    if not args.no_pipeline:
        rates = _pipeline(paths, args.repeats)
        print("\ndecode -> resize 224x224 -> stack batches of 64 (1 process):")
        for label, rate in rates.items():
            print(f"  {label:<14} {rate:>8,.0f} images/s  {rate / rates['contiguous']:.2f}x")


if __name__ == "__main__":
    main()
