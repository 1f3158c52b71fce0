"""Reusable, fast and DDP-correct LightningDataModules.

The public names are loaded lazily (PEP 562): ``import datamodules`` imports nothing heavy,
so ``python -m datamodules shards`` / ``index`` start without Lightning or torch, while
``from datamodules import TextDataModule`` imports that DataModule (and Lightning) on first
use. The tools that :class:`BaseDataModule` hands work to register themselves when core first
needs them (:mod:`datamodules.core.hooks`).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__all__ = [
    "BaseDataModule",
    "DataWaitMonitor",
    "ImageFolderDataModule",
    "Source",
    "StreamingDataModule",
    "TensorDataModule",
    "TextDataModule",
]

#: Where each public name is defined.
_HOMES = {
    "BaseDataModule": "datamodules.core.base",
    "DataWaitMonitor": "datamodules.tools.monitor",
    "ImageFolderDataModule": "datamodules.images.datamodule",
    "Source": "datamodules.core.sources",
    "StreamingDataModule": "datamodules.streaming.datamodule",
    "TensorDataModule": "datamodules.tensor",
    "TextDataModule": "datamodules.text.datamodule",
}

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from datamodules.core.base import BaseDataModule
    from datamodules.core.sources import Source
    from datamodules.images.datamodule import ImageFolderDataModule
    from datamodules.streaming.datamodule import StreamingDataModule
    from datamodules.tensor import TensorDataModule
    from datamodules.text.datamodule import TextDataModule
    from datamodules.tools.monitor import DataWaitMonitor


def __getattr__(name: str) -> Any:
    """Imports a public name on first use (PEP 562) and keeps it in the module."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'datamodules' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
