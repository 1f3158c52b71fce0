"""``python -m datamodules COMMAND ...``: ``inspect`` (tools/inspect_cli.py), ``shards``
(shards/cli.py) and ``index`` (shards/index_cli.py). ``shards`` and ``index`` import neither
Lightning nor torch before their arguments parse."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator

import datamodules

__all__ = ["USAGE", "expand_help", "import_named_class", "main"]

USAGE = """usage: python -m datamodules inspect --data CLASS [--data.ARG VALUE ...] [--tune]
                                     [--split {train,val,test}] [--out PATH]
       python -m datamodules shards SRC OUT [--fmt tar|parquet] [--max-bytes SIZE]
                                    [--workers N] [--val-split F] [--resize N] [--quality Q]
       python -m datamodules index SHARDS... --output FILE.index.json [--workers N]

commands:
  inspect   print a DataModule's summary and data statistics, draw one batch, tune its loader
  shards    write an image folder as train and val shards (tar or Parquet)
  index     index shards another tool wrote into a dataset index that setup reads instead

Run 'python -m datamodules COMMAND --help' for the options."""


def _named_classes(argv: list[str]) -> Iterator[str]:
    """The class names given as ``--data NAME``, ``--data=NAME``, ``--data.class_path NAME``
    or as the ``class_path`` of a ``--data`` JSON object (what ``--config`` expands to)."""
    for i, arg in enumerate(argv):
        if arg in ("--data", "--data.class_path") and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(("--data=", "--data.class_path=")):
            value = arg.split("=", 1)[1]
        else:
            continue
        if value.lstrip().startswith("{"):
            with contextlib.suppress(ValueError):
                loaded = json.loads(value)
                value = loaded.get("class_path", "") if isinstance(loaded, dict) else ""
        if isinstance(value, str):
            yield value


def import_named_class(argv: list[str]) -> None:
    """Imports the public DataModule that ``argv`` names by its short name (``--data
    TensorDataModule``), so that jsonargparse, which resolves a short name among the subclasses
    of :class:`BaseDataModule` already imported, finds it in a fresh interpreter: the package
    root loads its classes lazily (PEP 562), on first use."""
    for name in _named_classes(argv):
        if name in datamodules.__all__:
            getattr(datamodules, name)


def expand_help(argv: list[str]) -> list[str]:
    """``--data.help NAME`` with a public short name (as ``--data NAME`` takes it) becomes
    ``--data.help datamodules.NAME``: jsonargparse's help wants an import path."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--data.help" and i + 1 < len(out) and out[i + 1] in datamodules.__all__:
            out[i + 1] = f"datamodules.{out[i + 1]}"
        elif arg.startswith("--data.help=") and arg.split("=", 1)[1] in datamodules.__all__:
            out[i] = f"--data.help=datamodules.{arg.split('=', 1)[1]}"
    return out


def main(argv: list[str] | None = None) -> int:
    """Dispatches to a command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "shards":
        from datamodules.shards.cli import shards_main

        return shards_main(rest)
    if command == "index":
        from datamodules.shards.index_cli import index_main

        return index_main(rest)
    if command != "inspect":
        print(
            f"python -m datamodules: unknown command {command!r}: use 'inspect', 'shards' or "
            "'index'.\n",
            file=sys.stderr,
        )
        print(USAGE, file=sys.stderr)
        return 2
    from datamodules.tools.inspect_cli import expand_config
    from datamodules.tools.inspect_cli import main as inspect_main

    rest = expand_help(expand_config(rest))
    import_named_class(rest)
    return inspect_main(rest)


if __name__ == "__main__":
    sys.exit(main())
