"""Each train epoch's mix, logged to every Trainer logger as ``mix/<name>``.

:class:`MixLog` is a part the stream DataModules hold (``dm.mix_log``: its state, the epoch
logged last, is its own); text and chat blends call :func:`log_epoch_mix` from their blends
component. At the first train batch of each epoch (the
DataModule's ``on_before_batch_transfer`` hook, which Lightning calls for every batch) it logs
the epoch's quotas, ``dm.quotas(epoch)``, one metric per source, at the Trainer's global step:
a run's logs then show how its mix moved over training, next to the loss.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MixLog", "log_epoch_mix", "log_quotas"]


def log_quotas(trainer: Any, quotas: dict[str, int]) -> None:
    """Logs ``{name: quota}`` to every logger of ``trainer`` as ``mix/<name>`` (loggers write
    on rank 0 only)."""
    metrics = {f"mix/{name}": float(q) for name, q in quotas.items()}
    for logger in getattr(trainer, "loggers", ()):
        logger.log_metrics(metrics, step=int(trainer.global_step))


def log_epoch_mix(trainer: Any, logged: int | None, dm: Any) -> int | None:
    """Logs ``dm``'s quotas of the Trainer's epoch at its first train batch (``logged``: the
    epoch logged last); returns the epoch logged last now. The DataModule provides
    ``mixture(split)`` and ``quotas(epoch)``."""
    if trainer is not None and trainer.training:
        epoch = int(trainer.current_epoch)
        if logged != epoch:
            logged = epoch
            if dm.mixture("train") is not None:
                log_quotas(trainer, dm.quotas(epoch))
    return logged


class MixLog:
    """Logs a DataModule's train mix at the start of every epoch (a part it holds; the
    DataModule provides ``mixture(split)`` and ``quotas(epoch)``).

    Attributes:
        logged: The epoch logged last (None: none yet).
    """

    def __init__(self) -> None:
        self.logged: int | None = None

    def log(self, trainer: Any, dm: Any) -> None:
        """Logs ``dm``'s quotas of the Trainer's epoch at its first train batch (called for
        every batch, by the DataModule's ``on_before_batch_transfer``)."""
        self.logged = log_epoch_mix(trainer, self.logged, dm)
