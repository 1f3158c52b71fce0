"""The argument rule of ``collates``, which never imports ``datamodules``: the same rule as
:mod:`datamodules.core.checks`, in the few lines the collate functions need.

A value of the wrong kind is a :class:`TypeError` (a bool, a float, a string or None where an
int is expected); an int of the right kind out of range is a :class:`ValueError`.
"""

from __future__ import annotations

import numbers
from typing import Any

__all__ = ["check_int", "int_mistake"]


def int_mistake(
    value: Any, minimum: int | None = None, *, allow_none: bool = False
) -> type[Exception] | None:
    """The kind of mistake ``value`` is where an int >= ``minimum`` (or None with
    ``allow_none``) is expected: TypeError, ValueError, or None when it is accepted."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return TypeError
    return ValueError if minimum is not None and value < minimum else None


def check_int(
    value: Any, name: str, minimum: int | None = None, *, allow_none: bool = False
) -> None:
    """Raises the mistake :func:`int_mistake` finds in ``value``, naming ``name``, the value and
    what is accepted (``"seq_length=0 is not accepted: use an int >= 1."``)."""
    mistake = int_mistake(value, minimum, allow_none=allow_none)
    if mistake is not None:
        accepted = "an int" + ("" if minimum is None else f" >= {minimum}")
        accepted += " or None" if allow_none else ""
        raise mistake(f"{name}={value!r} is not accepted: use {accepted}.")
