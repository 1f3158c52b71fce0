"""Where core hands work to the tools without importing them.

``core`` imports no tool (the import rule of the contributing guide), yet three defaults of
:class:`~datamodules.BaseDataModule` are the tools' work: the worker tuner behind
``num_workers="tune"`` and :meth:`~datamodules.BaseDataModule.tune_loader` (``"tune"``), the
default description of a DataModule, :meth:`~datamodules.BaseDataModule.describe_data`
(``"describe"``), and the default picture of a batch,
:meth:`~datamodules.BaseDataModule.plot_batch` (``"plot_batch"``).

:mod:`datamodules.tools` registers them here when it is imported. The package root loads its
names lazily, so nothing guarantees that the tools were imported before a DataModule asks for
one: :func:`tool` then imports the tools package by its name (:data:`TOOLS_PACKAGE`), once.
That is a plug-in lookup, not an import of ``core`` upwards: ``core`` still names no tool.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

from datamodules.core.checks import check_choice

__all__ = ["TOOLS_PACKAGE", "TOOL_NAMES", "register_tool", "tool"]

TOOL_NAMES = ("tune", "describe", "plot_batch")
#: The package that registers the tools when imported.
TOOLS_PACKAGE = "datamodules.tools"
_TOOLS: dict[str, Callable[..., Any]] = {}


def register_tool(name: str, function: Callable[..., Any]) -> None:
    """Makes ``function`` the implementation of the tool ``name`` (one of :data:`TOOL_NAMES`)."""
    check_choice(name, "name", TOOL_NAMES)
    _TOOLS[name] = function


def tool(name: str) -> Callable[..., Any]:
    """The registered implementation of the tool ``name``.

    Raises:
        LookupError: Nothing registered it, even after importing :data:`TOOLS_PACKAGE`.
    """
    if name not in _TOOLS:
        import_module(TOOLS_PACKAGE)  # registers the tools
    try:
        return _TOOLS[name]
    except KeyError:
        raise LookupError(
            f"no {name!r} tool is registered: importing {TOOLS_PACKAGE} registered none."
        ) from None
