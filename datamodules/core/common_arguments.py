"""The check of the keyword arguments every DataModule shares (see
:class:`~datamodules.BaseDataModule`), built from the checks of :mod:`~datamodules.core.checks`.

It lives apart from those checks because it needs the split and hardware rules of ``core``,
which the torch-free checks must not import.
"""

from __future__ import annotations

from typing import Any

from datamodules.core.checks import check_bool, check_callable, check_int
from datamodules.core.hardware import validate_flag, validate_num_workers, validate_prefetch_factor
from datamodules.core.splits import validate_split_pair

__all__ = ["check_common_arguments"]

#: The range of a seed: what ``torch.Generator.manual_seed`` takes.
SEED_MIN = -(2**63)


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
            accepted (TypeError for a value of the wrong kind, ValueError for a wrong value).
    """
    check_int(batch_size, "batch_size", 1)
    validate_split_pair(val_split, test_split)
    check_int(split_seed, "split_seed", SEED_MIN)
    check_int(shuffle_seed, "shuffle_seed", SEED_MIN, allow_none=True)
    validate_num_workers(num_workers)
    validate_flag(pin_memory, "pin_memory")
    validate_flag(persistent_workers, "persistent_workers")
    validate_prefetch_factor(prefetch_factor)
    flags = {"stratify": stratify, "shuffle": shuffle, "drop_last": drop_last,
             "reuse_batch_memory": reuse_batch_memory}  # fmt: skip
    for name, flag in flags.items():
        check_bool(flag, name)
    check_callable(train_transforms, "train_transforms")
    check_callable(eval_transforms, "eval_transforms")
    if splits is not None and stratify:
        raise ValueError("stratify=True has no effect with explicit splits: drop one of them.")
