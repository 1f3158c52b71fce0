"""The text of ``BaseDataModule.summary()``: the splits, the loader settings and why.

Logged once on rank 0 when the first loader is built, and what ``repr(dm)`` shows. Subclasses
add their own lines through :meth:`~datamodules.BaseDataModule.extra_summary`.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["counted", "summary_lines", "unsaved_lines"]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``"1 batch"``, ``"2 batches"``: a count with its noun in the right number."""
    if n == 1:
        return f"1 {noun}"
    return f"{n} {plural or (noun + 'es' if noun.endswith(('s', 'ch', 'x')) else noun + 's')}"


def summary_lines(dm: Any) -> list[str]:
    """The lines of ``dm.summary()`` for a :class:`~datamodules.BaseDataModule`."""
    lines = [f"{type(dm).__name__}"]
    if dm.split_indices is None:
        lines.append("  splits: not set up yet (call setup())")
    else:
        rank, world = dm._rank_world()
        sizes = ", ".join(f"{k}={len(v)}" for k, v in dm.split_indices.items())
        lines.append(
            f"  splits: {sizes} (split_seed={dm.split_seed}, fingerprint {dm.fingerprint})"
        )
        sampler = dm._samplers.get("train")
        if sampler is None:  # the sampler knows its units and batch count (rows, budgets...)
            sampler = dm.make_sampler("train", dm.view("train"), rank, world)
        per_rank = math.ceil(sampler.dataset_size / world)
        lines.append(
            f"  train: batch_size={dm.batch_size} per process, world={world}, "
            f"{counted(per_rank, sampler.unit)} and {counted(len(sampler), 'batch')} per rank, "
            f"shuffle={dm.shuffle}, drop_last={dm.drop_last}"
        )
    settings = dm._settings.get("train") or dm.loader_settings("train")
    for key in ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor"):
        lines.append(f"  {key}={getattr(settings, key)!r}: {settings.reasons[key]}")
    repeats = getattr(dm._samplers.get("train"), "resume_repeats", 0)
    if repeats:
        lines.append(f"  resume repeats: {repeats} sample(s), the rest of the epoch was small")
    if dm.tuned is not None:
        lines.extend(dm.tuned.summary_lines())
    lines.extend(dm.extra_summary())
    lines.extend(unsaved_lines(dm))
    return lines


def unsaved_lines(dm: Any) -> list[str]:
    """The summary line naming the arguments that checkpoints do not hold (none: no line)."""
    unsaved = getattr(dm, "unsaved_arguments", None)
    if not unsaved:
        return []
    listed = ", ".join(f"{name} ({why})" for name, why in unsaved.items())
    return [
        f"  not saved in checkpoints: {listed}; give them again to "
        f"{type(dm).__name__}.load_from_checkpoint(path, ...)"
    ]
