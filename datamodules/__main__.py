"""``python -m datamodules COMMAND ...``; the one command is ``inspect`` (see inspect_cli.py)."""

from __future__ import annotations

import sys

USAGE = """usage: python -m datamodules inspect --data CLASS [--data.ARG VALUE ...] [--tune]
                                     [--split {train,val,test}] [--out PATH]

commands:
  inspect   print a DataModule's summary and data statistics, draw one batch, tune its loader

Run 'python -m datamodules inspect --help' for the options."""


def main(argv: list[str] | None = None) -> int:
    """Dispatches to a command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command != "inspect":
        print(
            f"python -m datamodules: unknown command {command!r}: use 'inspect'.\n", file=sys.stderr
        )
        print(USAGE, file=sys.stderr)
        return 2
    from datamodules.tools.inspect_cli import main as inspect_main

    return inspect_main(rest)


if __name__ == "__main__":
    sys.exit(main())
