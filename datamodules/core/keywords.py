"""The keyword arguments every DataModule shares, and unknown keywords refused with a suggestion.

Every DataModule lists the shared arguments of :class:`~datamodules.BaseDataModule` in its own
signature, so that ``inspect.signature``, ``help()``, IDEs and LightningCLI show them, and
passes them on with ``super().__init__(..., **shared_arguments(locals()))``.

A keyword that no ``__init__`` of the class accepts fails before any ``__init__`` runs, naming
the DataModule and the nearest accepted name (``TextDataModule() got an unexpected keyword
argument 'batchsize': did you mean 'batch_size'?``), also for a user's subclass that passes
``**kwargs`` on to ours.
"""

from __future__ import annotations

import difflib
import inspect
from abc import ABCMeta
from collections.abc import Mapping
from typing import Any

__all__ = [
    "CheckedKeywords",
    "SHARED_ARGUMENTS",
    "accepted_keywords",
    "check_keywords",
    "shared_arguments",
]

#: The arguments of ``BaseDataModule.__init__``, in its order.
SHARED_ARGUMENTS = (
    "batch_size",
    "val_split",
    "test_split",
    "split_seed",
    "splits",
    "stratify",
    "num_workers",
    "pin_memory",
    "persistent_workers",
    "prefetch_factor",
    "shuffle",
    "drop_last",
    "shuffle_seed",
    "train_transforms",
    "eval_transforms",
    "reuse_batch_memory",
)


def shared_arguments(values: Mapping[str, Any]) -> dict[str, Any]:
    """The shared arguments among ``values`` (a subclass's ``locals()``), to pass on."""
    return {name: values[name] for name in SHARED_ARGUMENTS if name in values}


def accepted_keywords(cls: type) -> set[str] | None:
    """Every keyword the ``__init__`` chain of ``cls`` accepts by name (None: any keyword).

    An ``__init__`` that takes ``**kwargs`` is taken to pass them to the next ``__init__`` of
    the method resolution order, as ``super().__init__(**kwargs)`` does.
    """
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            parameters = list(inspect.signature(init).parameters.values())[1:]
        except (TypeError, ValueError):  # a builtin __init__: nothing to check against
            return None
        names.update(
            p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        )
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            return names
    return None


def check_keywords(cls: type, kwargs: Mapping[str, Any]) -> None:
    """Raises a TypeError for the first keyword ``cls`` does not accept, with a suggestion."""
    accepted = accepted_keywords(cls)
    if accepted is None:
        return
    for name in kwargs:
        if name in accepted:
            continue
        close = difflib.get_close_matches(name, sorted(accepted), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"see help({cls.__name__})"
        raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {name!r}: {hint}")


class CheckedKeywords(ABCMeta):
    """The metaclass of :class:`~datamodules.BaseDataModule`: calling a DataModule class checks
    its keywords (:func:`check_keywords`) before ``__init__`` runs.

    The check sits in the class call, not in ``__new__``, so that signature readers
    (``inspect``, LightningCLI's jsonargparse) still see each ``__init__`` as written; it
    derives from ``ABCMeta`` so that a DataModule may also be an ``abc.ABC``.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        check_keywords(cls, kwargs)
        return super().__call__(*args, **kwargs)

    @property
    def __signature__(cls) -> inspect.Signature:
        """The class's call signature is its ``__init__``'s without ``self`` (not this
        metaclass's ``__call__``), for ``inspect.signature(cls)`` and ``help(cls)``."""
        signature = inspect.signature(cls.__init__)
        return signature.replace(
            parameters=list(signature.parameters.values())[1:],
            return_annotation=inspect.Signature.empty,
        )
