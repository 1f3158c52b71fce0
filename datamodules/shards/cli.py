"""The command line of the shard layer, kept light: ``python -m datamodules shards --help``
parses and answers without importing torch or Lightning (the work is imported after parsing).

* ``python -m datamodules shards SRC OUT``: an image folder to train and val shards
  (:mod:`~datamodules.shards.folder_shards`; its arguments: :mod:`~datamodules.shards.folder_args`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from datamodules.shards.folder_args import PROG, parse_args

__all__ = ["PROG", "parse_args", "shards_main"]


def shards_main(argv: Sequence[str] | None = None) -> int:
    """``python -m datamodules shards``: parses, then writes; returns the exit status."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from datamodules.shards.folder_shards import run  # torch and the image decoders: now

    return run(args)
