"""``python -m datamodules inspect``: look at a DataModule before training on it.

Usage (the same ``--data`` syntax as LightningCLI)::

    python -m datamodules inspect --data TensorDataModule --data.path data.npz --data.batch_size 64
    python -m datamodules inspect --data examples.bundled_data.WineDataModule --tune
    python -m datamodules inspect --config examples/configs/tensor.yaml   # its ``data:`` section

It prints the DataModule's summary (split sizes, loader settings and why),
:meth:`~datamodules.core.base.BaseDataModule.describe_data` (classes and counts, or length
statistics) and the structure of one batch; writes a picture of that batch
(:meth:`~datamodules.core.base.BaseDataModule.plot_batch`) to a path it prints (without
matplotlib, the ``plots`` extra, it says how to install it instead); and with ``--tune``
first runs the worker tuner, whose table then appears in the summary. Any step that takes
more than a second shows a progress bar on the terminal (tqdm, as Lightning's default bar).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import yaml

from datamodules.core.base import BaseDataModule
from datamodules.tools.descriptions import describe_batch
from datamodules.tools.figures import PlotsUnavailable

__all__ = [
    "PROG",
    "build_parser",
    "expand_config",
    "main",
    "progress_step",
    "split_argument",
]

PROG = "python -m datamodules inspect"


@contextlib.contextmanager
def progress_step(description: str, delay: float = 1.0) -> Iterator[None]:
    """Shows a tqdm bar with the elapsed time if the enclosed step runs longer than ``delay``.

    The bar is drawn from a helper thread (the step itself is one opaque call) on stderr, and
    only on a terminal (tqdm's ``disable=None``).
    """
    from tqdm.auto import tqdm

    done = threading.Event()

    def show() -> None:
        if done.wait(delay):
            return
        with tqdm(
            total=None, desc=description, bar_format="{desc}: {elapsed}", disable=None
        ) as bar:
            if bar.disable:  # not a terminal: nothing to draw
                return
            bar.start_t -= delay  # count from the start of the step, not of the bar
            while not done.wait(0.2):
                bar.refresh()

    thread = threading.Thread(target=show, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def split_argument(method: Any, split: str) -> dict[str, str]:
    """``{"split": split}`` if ``method`` takes a ``split`` argument, else ``{}``.

    ``BaseDataModule.plot_batch(batch, path)`` does not say which split the batch is from;
    an override that draws split-wide context (text: the split's lengths and batches) takes
    ``split`` as a keyword.
    """
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return {}
    accepted = parameters.get("split")
    if accepted is None or accepted.kind is inspect.Parameter.POSITIONAL_ONLY:
        return {}
    return {"split": split}


def build_parser() -> Any:
    """The jsonargparse parser of ``inspect`` (``--data`` as in ``LightningCLI``)."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(
        prog=PROG,
        description="Print a DataModule's summary and data statistics, draw one batch, "
        "optionally tune its loader. '--config FILE' takes a LightningCLI config and uses its "
        "'data:' section (later --data.ARG arguments override it).",
    )
    parser.add_subclass_arguments(
        BaseDataModule,
        "data",
        fail_untyped=False,
        required=True,
        help="The DataModule: a class name or import path, with --data.ARG VALUE arguments.",
    )
    parser.add_argument(
        "--split",
        type=Literal["train", "val", "test"],
        default="train",
        help="The split whose batch is described and drawn.",
    )
    parser.add_argument(
        "--out",
        type=str | None,
        default=None,
        help="Where to write the picture (default: ./<DataModule>_<split>_batch.png).",
    )
    parser.add_argument("--tune", action="store_true", help="Run the worker tuner first.")
    parser.add_argument(
        "--tune_batches", type=int, default=20, help="Batches timed per tuner candidate."
    )
    parser.add_argument(
        "--tune_repeats", type=int, default=3, help="Measurements per tuner candidate."
    )
    return parser


def expand_config(argv: list[str]) -> list[str]:
    """Replaces ``--config FILE`` (a LightningCLI config) by ``--data`` with its data section."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--config" or arg.startswith("--config="):
            if arg == "--config":
                if i + 1 >= len(argv):
                    raise SystemExit(f"{PROG}: --config needs a file.")
                path, i = argv[i + 1], i + 2
            else:
                path, i = arg.split("=", 1)[1], i + 1
            with open(path, encoding="utf-8") as handle:
                config = yaml.safe_load(handle) or {}
            if "data" not in config:
                raise SystemExit(f"{PROG}: --config {path} has no 'data' section.")
            out += ["--data", json.dumps(config["data"])]
            continue
        out.append(arg)
        i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    """Runs ``inspect``; returns the exit status."""
    argv = expand_config(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    cfg = parser.parse_args(argv)
    package_log = logging.getLogger("datamodules")
    level = package_log.level
    package_log.setLevel(logging.WARNING)  # the summary is printed below, not logged
    try:
        with progress_step("building the DataModule"):
            try:
                # jsonargparse >= 4.49 calls it ``instantiate``; older ones ``instantiate_classes``.
                instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes
                dm: BaseDataModule = instantiate(cfg).data
            except (TypeError, ValueError) as error:  # bad --data.ARG values
                parser.error(str(error))
        with progress_step("setting up the splits"):
            dm.setup("fit")
        if cfg.tune:
            dm.tune_loader(max_batches=cfg.tune_batches, repeats=cfg.tune_repeats)
        split = cfg.split
        if not dm.split_size(split):
            raise SystemExit(f"{PROG}: the {split} split of {type(dm).__name__} is empty.")
        print(dm.summary())
        print("\n".join(dm.describe_data()))
        with progress_step(f"fetching one {split} batch"):
            batch = next(iter(dm.make_loader(split)))
        print(f"one {split} batch:")
        print("\n".join(f"  {line}" for line in describe_batch(batch)))
        out = Path(cfg.out or f"{type(dm).__name__}_{split}_batch.png")
        try:
            with progress_step("drawing the batch"):
                written = dm.plot_batch(batch, out, **split_argument(dm.plot_batch, split))
        except PlotsUnavailable as missing:  # the text above stands; say how to get the picture
            print(f"no picture of one {split} batch: {missing}")
        else:
            print(f"picture of one {split} batch: {Path(written).resolve()}")
    finally:
        package_log.setLevel(level)
    return 0
