"""Public names loaded on first use (PEP 562), for the packages whose imports must stay light.

``import datamodules`` and ``import datamodules.shards`` import nothing heavy: the command line
(``python -m datamodules shards``) starts without torch or Lightning, and each name is imported
from its home module the first time it is used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, namespace: dict[str, Any], homes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__``: ``homes`` maps each public name to the
    module that defines it; a name is imported once and kept in ``namespace``."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(home), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(homes))

    return __getattr__, __dir__
