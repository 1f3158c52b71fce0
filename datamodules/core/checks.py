"""Argument checks of BaseDataModule and the core modules, and a weak call for loaders.

Each check raises early with a message that names the argument, the value and what is
accepted, as every DataModule argument does.
"""

from __future__ import annotations

import numbers
import weakref
from collections.abc import Callable
from typing import Any

from datamodules.core.hardware import validate_flag, validate_num_workers, validate_prefetch_factor
from datamodules.core.splits import validate_split_pair

__all__ = ["WeakCall", "check_bool", "check_common_arguments", "check_int"]


class WeakCall:
    """Calls a bound method through a weak reference; returns None once its object is gone."""

    def __init__(self, method: Callable[[], Any]) -> None:
        self._method = weakref.WeakMethod(method)

    def __call__(self) -> Any:
        method = self._method()
        return None if method is None else method()


def check_int(value: Any, name: str, minimum: int) -> None:
    """Raises unless ``value`` is an int (not a bool) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name}={value!r} ({type(value).__name__}) is not accepted: use an int >= {minimum}."
        )
    if value < minimum:
        raise ValueError(f"{name}={value!r} is not accepted: use an int >= {minimum}.")


def check_bool(value: Any, name: str) -> None:
    """Raises unless ``value`` is True or False."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}={value!r} is not accepted: use True or False.")


def check_common_arguments(
    *,
    batch_size: Any,
    val_split: Any,
    test_split: Any,
    split_seed: Any,
    splits: Any,
    stratify: Any,
    num_workers: Any,
    pin_memory: Any,
    persistent_workers: Any,
    prefetch_factor: Any,
    shuffle: Any,
    drop_last: Any,
    shuffle_seed: Any,
    train_transforms: Any,
    eval_transforms: Any,
    reuse_batch_memory: Any,
) -> None:
    """Checks the arguments every DataModule shares (see :class:`~datamodules.BaseDataModule`).

    Raises:
        TypeError, ValueError: The first bad argument, named with its value and what is
            accepted.
    """
    check_int(batch_size, "batch_size", 1)
    validate_split_pair(val_split, test_split)
    check_int(split_seed, "split_seed", -(2**63))
    if shuffle_seed is not None:
        check_int(shuffle_seed, "shuffle_seed", -(2**63))
    validate_num_workers(num_workers)
    validate_flag(pin_memory, "pin_memory")
    validate_flag(persistent_workers, "persistent_workers")
    validate_prefetch_factor(prefetch_factor)
    flags = {"stratify": stratify, "shuffle": shuffle, "drop_last": drop_last,
             "reuse_batch_memory": reuse_batch_memory}  # fmt: skip
    for name, flag in flags.items():
        check_bool(flag, name)
    transforms = {"train_transforms": train_transforms, "eval_transforms": eval_transforms}
    for name, fn in transforms.items():
        if fn is not None and not callable(fn):
            raise TypeError(f"{name}={fn!r} is not accepted: use a callable or None.")
    if splits is not None and stratify:
        raise ValueError("stratify=True has no effect with explicit splits: drop one of them.")
