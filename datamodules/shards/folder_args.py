"""The arguments of ``python -m datamodules shards``, parsed and checked without importing
torch or Lightning: both its light front (:mod:`~datamodules.shards.cli`) and the work
(:mod:`~datamodules.shards.folder_shards`) stand on this module.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from datamodules.core.checks import check_size

__all__ = ["PROG", "parse_args"]

PROG = "python -m datamodules shards"
DESCRIPTION = "an image folder to train and val shards (WebDataset tar or Parquet)."


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The arguments of ``python -m datamodules shards``, checked (exits 2 on bad ones)."""
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION)
    cpus = os.cpu_count() or 1
    parser.add_argument("src", type=Path, help="a folder of class sub-folders of images")
    parser.add_argument("out", type=Path, help="the folder to write the shards into")
    parser.add_argument(
        "--fmt", choices=("tar", "parquet"), default="tar", help="shard format (default: tar)"
    )
    parser.add_argument(
        "--max-bytes", default="256MB", metavar="SIZE", help="about SIZE per shard (default: 256MB)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=cpus,
        metavar="N",
        help=f"at most N processes (default: the CPU count, {cpus} here)",
    )
    parser.add_argument(
        "--val-split",
        type=float,
        default=0.1,
        metavar="F",
        help="fraction (or count) of each class to val (default: 0.1)",
    )
    parser.add_argument(
        "--seed", type=int, default=42, help="of the split and the train order (default: 42)"
    )
    parser.add_argument(
        "--resize",
        type=int,
        default=None,
        metavar="N",
        help="re-encode images whose short side exceeds N pixels (default: keep every image)",
    )
    parser.add_argument(
        "--quality",
        type=int,
        default=90,
        metavar="Q",
        help="JPEG quality of --resize (default: 90)",
    )
    args = parser.parse_args(list(argv))
    try:
        args.max_bytes = check_size(args.max_bytes, "--max-bytes")
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    if args.workers < 1:
        parser.error(f"--workers {args.workers}: use 1 or more")
    if args.resize is not None and args.resize < 1:
        parser.error(f"--resize {args.resize}: use a side of 1 pixel or more")
    if not 1 <= args.quality <= 100:
        parser.error(f"--quality {args.quality}: use 1 to 100")
    if args.val_split >= 1 and not float(args.val_split).is_integer():
        parser.error(f"--val-split {args.val_split}: use a fraction in [0, 1) or a count")
    return args
