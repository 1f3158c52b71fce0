"""Hyperparameters as plain data, so that every checkpoint loads with ``weights_only=True``.

Lightning writes a DataModule's ``hparams`` into every checkpoint and loads checkpoints with
``torch.load(weights_only=True)``, which refuses any class that is not allow-listed: a
``Path`` or a :class:`~datamodules.Source` in the hyperparameters would make the checkpoint
unreadable, both to ``Trainer.fit(ckpt_path=...)`` and to a process that never imports this
library. So :meth:`~datamodules.BaseDataModule.__init__` turns the saved arguments into plain
data (:func:`to_plain`):

* ``None``, bools, ints, floats and strings stay; NumPy and torch scalars become Python ones;
* a path (``os.PathLike``) becomes its string;
* a tuple or list becomes a list, a mapping with string keys a dict, element by element;
* an object with a ``to_plain()`` method becomes what it returns (``Source`` gives the dict
  that ``train_files=`` accepts again);
* anything else (a callable, a tokenizer object, a tensor) is not saved: it is listed in
  ``dm.unsaved_arguments`` and in ``summary()``, and must be given again to
  ``load_from_checkpoint(path, name=value)``.

Arguments that hold data (texts, tensors, explicit split indices) or callables (transforms)
are never saved (``hparams_ignore`` of each DataModule); a string given for one of them (such as
``tokenizer="char"``) is plain and is saved.
"""

from __future__ import annotations

import copy
import inspect
import numbers
import os
from collections.abc import Mapping
from types import FrameType
from typing import Any

import numpy as np

__all__ = [
    "NotPlain",
    "PLAIN_TYPES",
    "describe",
    "given_arguments",
    "make_hparams_plain",
    "own_arguments",
    "set_hparam",
    "to_plain",
]

PLAIN_TYPES = (str, bool, int, float, type(None))


class NotPlain(TypeError):
    """A value that has no plain-data form; ``reason`` says what it is."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def describe(value: Any) -> str:
    """A short account of a value that is not plain data: ``"a callable"``, ``"a Tensor"``."""
    if callable(value) and not isinstance(value, type):
        name = getattr(value, "__name__", None) or type(value).__name__
        return f"a callable ({name})"
    name = type(value).__name__
    return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


def to_plain(value: Any) -> Any:
    """Returns ``value`` as plain data (see the module docstring).

    Raises:
        NotPlain: If some part of ``value`` has no plain form; its ``reason`` names that part.
    """
    if type(value) in PLAIN_TYPES:
        return value
    if isinstance(value, np.generic) and np.ndim(value) == 0:  # NumPy scalars
        return to_plain(value.item())
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):  # a subclass, such as a StrEnum member
        return str.__str__(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, os.PathLike):
        path = os.fspath(value)
        return path if isinstance(path, str) else os.fsdecode(path)
    to_dict = getattr(type(value), "to_plain", None)
    if callable(to_dict):
        return to_plain(value.to_plain())
    if isinstance(value, Mapping):
        plain = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotPlain(f"a mapping with the key {key!r} (not a string)")
            plain[key] = to_plain(item)
        return plain
    if isinstance(value, (list, tuple)):
        return [to_plain(item) for item in value]
    raise NotPlain(describe(value))


def given_arguments(frame: FrameType | None, module: Any, names: tuple[str, ...]) -> dict:
    """The values of ``names`` among the ``__init__`` arguments of ``module`` that were given.

    Walks the ``__init__`` frames of ``module`` from ``frame`` outwards (a subclass's
    ``__init__`` calls its parent's, as Lightning's ``save_hyperparameters`` walks them) and
    returns each name bound there to something other than None or an empty tuple.
    """
    found: dict[str, Any] = {}
    while frame is not None and frame.f_code.co_name == "__init__":
        local = frame.f_locals
        if local.get("self") is not module:
            break
        for name in names:
            value = local.get(name)
            empty = value is None or (isinstance(value, tuple) and not value)  # no *tensors
            if name in local and not empty and name not in found:
                found[name] = value
        frame = frame.f_back
    return found


def own_arguments(frame: FrameType | None, module: Any) -> set[str] | None:
    """The arguments the concrete class's own ``__init__`` took: its named parameters (and its
    ``*args``), plus the keywords that reached the base through its ``**kwargs``.

    A subclass may fix base arguments itself (``super().__init__(root=".", **kwargs)``); those
    are not its arguments, so saving them would make ``load_from_checkpoint`` pass them twice.
    ``frame`` is an ``__init__`` frame of ``module``; the outermost one is the concrete
    class's. None when there is no such frame.
    """
    outer = None
    while frame is not None and frame.f_code.co_name == "__init__":
        code = frame.f_code
        if not code.co_varnames or frame.f_locals.get(code.co_varnames[0]) is not module:
            break
        outer, frame = frame, frame.f_back
    if outer is None:
        return None
    code = outer.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    varargs = bool(code.co_flags & inspect.CO_VARARGS)
    names = set(code.co_varnames[1 : count + varargs])  # ``*tensors`` too: given by the caller
    if code.co_flags & inspect.CO_VARKEYWORDS:
        names.update(outer.f_locals.get(code.co_varnames[count + varargs]) or ())
    return names


def make_hparams_plain(module: Any, ignored: Mapping[str, Any]) -> dict[str, str]:
    """Turns ``module.hparams`` into plain data in place and returns what is not saved.

    Args:
        module: A Lightning DataModule whose ``save_hyperparameters`` just ran.
        ignored: The arguments kept out of ``hparams`` (data, callables) that were given:
            a string among them is plain and is saved after all; the others are reported.

    Returns:
        ``{argument: why it is not saved}``, in argument order.
    """
    unsaved: dict[str, str] = {}
    hparams = module._hparams  # Lightning's AttributeDict, written into checkpoints
    for name, value in ignored.items():
        if isinstance(value, str):
            hparams[name] = value
        else:
            unsaved[name] = "data" if not callable(value) else describe(value)
    for name in list(hparams):
        try:
            hparams[name] = to_plain(hparams[name])
        except NotPlain as error:
            del hparams[name]
            unsaved[name] = error.reason
    module._hparams_initial = copy.deepcopy(hparams)
    return unsaved


def set_hparam(module: Any, name: str, value: Any) -> None:
    """Replaces one saved hyperparameter (and its initial copy) with the plain ``value``."""
    module._hparams[name] = to_plain(value)
    module._hparams_initial[name] = copy.deepcopy(module._hparams[name])
