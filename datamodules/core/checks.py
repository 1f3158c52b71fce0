"""The one set of argument checks that every module of the package uses.

One rule everywhere: a value of the wrong *kind* raises :class:`TypeError` (a bool, a float or
a string where an int is expected, a string where a number is, a number where a flag or a name
is); a value of the right kind that is not accepted raises :class:`ValueError` (a count below
its minimum, a number out of range, an unknown choice, an empty name). A word given where a few
words are accepted besides a number (``num_workers="many"``) is an unknown choice: ValueError.

One message form everywhere, naming the argument, the value and what is accepted::

    batch_size=0 is not accepted: use an int >= 1.

Each ``check_*`` function returns the value it accepted (an int as ``int``, a size as bytes,
``mean`` / ``std`` as tuples of floats). :func:`rejected` builds the exception for a check that
has no function here, so that its message has the same form.

This module imports nothing but the standard library: the shard layer's command line
(``python -m datamodules shards``) checks its arguments without importing torch or Lightning.
"""

from __future__ import annotations

import math
import numbers
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "ON_ERROR",
    "check_bool",
    "check_callable",
    "check_choice",
    "check_fraction",
    "check_int",
    "check_mean_std",
    "check_number",
    "check_on_error",
    "check_path",
    "check_size",
    "check_string",
    "int_mistake",
    "is_int",
    "is_number",
    "number_mistake",
    "rejected",
]

#: What ``on_error`` accepts wherever a DataModule or the shard layer takes it.
ON_ERROR = ("raise", "skip")

_MOVED = {"WeakCall": "loaders", "check_common_arguments": "common_arguments"}


def __getattr__(name: str) -> Any:
    # Names this module held before it became torch-free, imported from their new home.
    if name in _MOVED:
        from importlib import import_module

        return getattr(import_module(f"datamodules.core.{_MOVED[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def rejected(
    name: str, value: Any, accepted: str, error: type[Exception] = ValueError, *, when: str = ""
) -> Exception:
    """The exception for ``name=value``: ``"{name}={value!r} is not accepted{when}: use
    {accepted}."`` (``when`` is a condition such as ``" with packing=True"``).

    Raise it: ``raise rejected("batch_size", 0, "an int >= 1")``.
    """
    return error(f"{name}={value!r} is not accepted{when}: use {accepted}.")


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer: an ``int`` or a NumPy integer, never a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """Whether ``value`` is a real number (an int or a float, NumPy's too), never a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def int_mistake(
    value: Any, minimum: int | None = None, maximum: int | None = None
) -> type[Exception] | None:
    """The kind of mistake ``value`` is where an int in ``[minimum, maximum]`` is expected:
    TypeError (not an int), ValueError (out of range) or None (accepted)."""
    if not is_int(value):
        return TypeError
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        return ValueError
    return None


def number_mistake(
    value: Any,
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    above: float | None = None,
    below: float | None = None,
) -> type[Exception] | None:
    """As :func:`int_mistake` for a real number within inclusive (``minimum``, ``maximum``) or
    exclusive (``above``, ``below``) bounds; NaN is out of every range."""
    if not is_number(value):
        return TypeError
    inside = not math.isnan(value) and all(
        (
            minimum is None or value >= minimum,
            maximum is None or value <= maximum,
            above is None or value > above,
            below is None or value < below,
        )
    )
    return None if inside else ValueError


def _join(options: Iterable[str]) -> str:
    """``"a"``, ``"a or b"``, ``"a, b or c"``."""
    items = list(options)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def _range(low: Any, low_closed: bool, high: Any, high_closed: bool) -> str:
    """`` >= 1``, `` < 1``, `` in [0, 1)``, or nothing without bounds."""
    if low is not None and high is not None:
        return f" in {'[' if low_closed else '('}{low}, {high}{']' if high_closed else ')'}"
    if low is not None:
        return f" {'>=' if low_closed else '>'} {low}"
    if high is not None:
        return f" {'<=' if high_closed else '<'} {high}"
    return ""


def _accepted(kind: str, allow_none: bool, words: Sequence[str], note: str) -> str:
    described = _join([kind, *(["None"] if allow_none else []), *map(repr, words)])
    return f"{described} {note}" if note else described


def _is_word(value: Any, words: Sequence[str]) -> bool:
    return isinstance(value, str) and value in words


def check_int(
    value: Any,
    name: str,
    minimum: int | None = None,
    maximum: int | None = None,
    *,
    allow_none: bool = False,
    words: Sequence[str] = (),
    when: str = "",
    note: str = "",
) -> Any:
    """Returns ``value`` if it is an int in ``[minimum, maximum]`` (or None with
    ``allow_none``, or one of ``words`` such as ``"auto"``), as an ``int``.

    Args:
        value: The user's value.
        name: The argument's name, for the message.
        minimum, maximum: Inclusive bounds (None: unbounded).
        allow_none: Accept None.
        words: Strings accepted besides an int; another string is then a ValueError.
        when: A condition for the message: ``" with batch_by='tokens'"``.
        note: Said after what is accepted: ``"(tokens per packed row)"``.

    Raises:
        TypeError: Not an int (a bool, a float, a string...).
        ValueError: An int out of range, or a string other than ``words``.
    """
    if (value is None and allow_none) or _is_word(value, words):
        return value
    error = int_mistake(value, minimum, maximum)
    if error is None:
        return int(value)
    if isinstance(value, str) and words:
        error = ValueError
    kind = f"an int{_range(minimum, True, maximum, True)}"
    raise rejected(name, value, _accepted(kind, allow_none, words, note), error, when=when)


def check_number(
    value: Any,
    name: str,
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    above: float | None = None,
    below: float | None = None,
    allow_none: bool = False,
    what: str = "a number",
    when: str = "",
    note: str = "",
) -> Any:
    """Returns ``value`` if it is a real number within inclusive (``minimum``, ``maximum``)
    or exclusive (``above``, ``below``) bounds, or None with ``allow_none``.

    ``what`` names the number in the message (``"a number of seconds"``); ``when`` and
    ``note`` as for :func:`check_int`.

    Raises:
        TypeError: Not a number (a bool, a string...).
        ValueError: Out of range, or NaN.
    """
    if value is None and allow_none:
        return value
    error = number_mistake(value, minimum, maximum, above=above, below=below)
    if error is None:
        return value
    low, low_closed = (minimum, True) if minimum is not None else (above, False)
    high, high_closed = (maximum, True) if maximum is not None else (below, False)
    kind = f"{what}{_range(low, low_closed, high, high_closed)}"
    raise rejected(name, value, _accepted(kind, allow_none, (), note), error, when=when)


def check_fraction(value: Any, name: str, *, zero: bool = False) -> Any:
    """Returns ``value`` if it is a number in (0, 1), or in [0, 1) with ``zero``."""
    if zero:
        return check_number(value, name, 0, below=1)
    return check_number(value, name, above=0, below=1)


def check_bool(value: Any, name: str, *, words: Sequence[str] = ()) -> Any:
    """Returns ``value`` if it is True or False (or one of ``words``, such as ``"auto"``).

    Raises:
        TypeError: Not a bool (``1``, ``None``; a string when no word is accepted).
        ValueError: A string other than ``words``.
    """
    if isinstance(value, bool) or _is_word(value, words):
        return value
    error = ValueError if isinstance(value, str) and words else TypeError
    raise rejected(name, value, _join(["True", "False", *map(repr, words)]), error)


def check_choice(value: Any, name: str, choices: Sequence[Any], *, allow_none: bool = False) -> Any:
    """Returns ``value`` if it is one of ``choices`` (or None with ``allow_none``).

    Raises:
        TypeError: The choices are strings and ``value`` is not one (``on_error=True``).
        ValueError: Any other value that is not a choice (``on_error="ignore"``).
    """
    if value is None and allow_none:
        return value
    try:
        if value in choices:
            return value
    except (TypeError, ValueError):  # a value that cannot be compared (an array, say)
        pass
    words = all(isinstance(c, str) for c in choices)
    error = TypeError if words and not isinstance(value, str) else ValueError
    accepted = _join([*map(repr, choices), *(["None"] if allow_none else [])])
    raise rejected(name, value, accepted, error)


def check_on_error(value: Any) -> Any:
    """Returns ``on_error`` if it is ``"raise"`` or ``"skip"``; see :func:`check_choice`."""
    return check_choice(value, "on_error", ON_ERROR)


def check_string(
    value: Any,
    name: str,
    accepted: str = "a non-empty string",
    *,
    allow_none: bool = False,
    allow_empty: bool = False,
) -> Any:
    """Returns ``value`` if it is a string (not empty unless ``allow_empty``), or None with
    ``allow_none``; ``accepted`` says what it names (``"a field name or None"``).

    Raises:
        TypeError: Not a string.
        ValueError: An empty string.
    """
    if (value is None and allow_none) or (isinstance(value, str) and (value or allow_empty)):
        return value
    raise rejected(name, value, accepted, ValueError if isinstance(value, str) else TypeError)


def check_callable(value: Any, name: str, *, allow_none: bool = True) -> Any:
    """Returns ``value`` if it is callable (or None with ``allow_none``); else a TypeError."""
    if callable(value) or (value is None and allow_none):
        return value
    raise rejected(name, value, "a callable or None" if allow_none else "a callable", TypeError)


def check_path(
    value: Any, name: str, accepted: str = "a path", *, allow_none: bool = False
) -> str | None:
    """Returns ``value`` as a string path if it is a ``str`` or an ``os.PathLike`` (None stays
    None with ``allow_none``); else a TypeError saying ``accepted``."""
    if value is None and allow_none:
        return None
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    raise rejected(name, value, accepted, TypeError)


def _channel_stats(value: Any, name: str, channels: int, positive: bool) -> tuple[float, ...]:
    given = value
    if hasattr(value, "tolist") and not isinstance(value, Sequence):  # an array or a tensor
        value = value.tolist()
    each = f"{channels} numbers{' > 0' if positive else ''}"
    accepted = f"{each} (R, G, B)" if channels == 3 else f"{each}, one per channel"
    listed = isinstance(value, Sequence) and not isinstance(value, (str, bytes))
    if not listed or not all(is_number(v) for v in value):
        raise rejected(name, given, accepted, TypeError)
    bound = 0 if positive else None
    if len(value) != channels or any(number_mistake(v, above=bound) for v in value):
        raise rejected(name, given, accepted)
    return tuple(float(v) for v in value)


def check_mean_std(
    mean: Any, std: Any, channels: int = 3
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Returns ``mean`` and ``std`` as tuples of floats if each holds ``channels`` numbers,
    ``std`` all > 0 (lists, tuples, arrays and tensors are accepted).

    Raises:
        TypeError: Not a sequence of numbers.
        ValueError: Another count of numbers, a ``std`` <= 0, or NaN.
    """
    return (
        _channel_stats(mean, "mean", channels, positive=False),
        _channel_stats(std, "std", channels, positive=True),
    )


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_UNITS.update({"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40})
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")


def check_size(value: Any, name: str, *, allow_none: bool = False) -> int | None:
    """Bytes from an int > 0 or a string such as ``"50GB"``, ``"512 MiB"`` or ``"1.5kb"``
    (decimal and binary units, case-insensitive); None stays None with ``allow_none``.

    Raises:
        TypeError: Neither an int nor a string (a float, a bool...).
        ValueError: An int <= 0, or a string that is not a size > 0.
    """
    if value is None and allow_none:
        return None
    if is_int(value) and value > 0:
        return int(value)
    if isinstance(value, str):
        match = _SIZE.fullmatch(value)
        if match and match.group(2).upper() in _UNITS:
            size = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
            if size > 0:
                return size
    error = ValueError if is_int(value) or isinstance(value, str) else TypeError
    accepted = "a number of bytes > 0 or a string such as '50GB', '512MB' or '8GiB'"
    raise rejected(name, value, accepted + (" or None" if allow_none else ""), error)
