"""Where core hands work to the tools without importing them.

``core`` imports no tool (the import rule of the contributing guide), yet three defaults of
:class:`~datamodules.BaseDataModule` are the tools' work: the worker tuner behind
``num_workers="tune"`` and :meth:`~datamodules.BaseDataModule.tune_loader` (``"tune"``), the
default description of a DataModule, :meth:`~datamodules.BaseDataModule.describe_data`
(``"describe"``), and the default picture of a batch,
:meth:`~datamodules.BaseDataModule.plot_batch` (``"plot_batch"``).

:mod:`datamodules.tools` registers them here when it is imported, and ``import datamodules``
imports it before anything else can run (importing any submodule imports the package first),
so they are always there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TOOL_NAMES = ("tune", "describe", "plot_batch")
_TOOLS: dict[str, Callable[..., Any]] = {}


def register_tool(name: str, function: Callable[..., Any]) -> None:
    """Makes ``function`` the implementation of the tool ``name`` (one of :data:`TOOL_NAMES`)."""
    if name not in TOOL_NAMES:
        raise ValueError(f"name={name!r} is not accepted: use one of {TOOL_NAMES}.")
    _TOOLS[name] = function


def tool(name: str) -> Callable[..., Any]:
    """The registered implementation of the tool ``name``.

    Raises:
        LookupError: Nothing registered it (``datamodules.tools`` was not imported).
    """
    try:
        return _TOOLS[name]
    except KeyError:
        raise LookupError(
            f"no {name!r} tool is registered: import datamodules.tools (import datamodules "
            "does) before using it."
        ) from None
