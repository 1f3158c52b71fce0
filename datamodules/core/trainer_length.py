"""Keeping Lightning's train length right across an epoch resumed on another layout.

Lightning measures the train loader's length once (when it builds the loader) and uses it for
the whole run: to end each epoch, to place a fractional ``val_check_interval`` and the
end-of-epoch validation. An epoch resumed on another world size, batch size or worker count
has its own length (the batches consumed before plus those of its remainder), so:

* :func:`remeasure_train_loader`, run when such an epoch yields its last batch, makes the
  Trainer build the train loader again at the next epoch, which measures the next epochs'
  length anew;
* :func:`set_train_length`, run at the second batch of the epoch after a checkpoint that was
  taken when such an epoch had just ended (the loader then reported the ended epoch's length,
  so that the restoring Trainer took that epoch for finished), tells the Trainer the true one.

Both set Lightning's own attributes (``fit_loop._combined_loader``, ``fit_loop.max_batches``,
its data fetcher's ``length``, ``trainer.val_check_batch``); Lightning 2.4-2.6 keeps them there.
"""

from __future__ import annotations

from typing import Any

__all__ = ["remeasure_train_loader", "set_train_length"]


def remeasure_train_loader(trainer: Any) -> None:
    """Makes ``trainer`` build (and measure) the train loader again at the next epoch."""
    fit_loop = getattr(trainer, "fit_loop", None)
    if fit_loop is not None and getattr(fit_loop, "_combined_loader", None) is not None:
        fit_loop._combined_loader = None


def set_train_length(trainer: Any, length: int) -> None:
    """Tells ``trainer`` that the current epoch has ``length`` train batches."""
    fit_loop = getattr(trainer, "fit_loop", None)
    if fit_loop is None or trainer.limit_train_batches != 1.0:
        return
    fit_loop.max_batches = length
    fetcher = getattr(fit_loop, "_data_fetcher", None)
    if fetcher is not None and getattr(fetcher, "length", None) is not None:
        fetcher.length = length  # it tells the epoch loop which batch is the last
    interval = trainer.val_check_interval
    if isinstance(interval, float) and getattr(trainer, "val_check_batch", None):
        trainer.val_check_batch = max(1, int(length * interval))
