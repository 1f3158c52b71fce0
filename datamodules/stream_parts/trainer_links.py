"""How the train loader of a StreamingDataModule follows its Trainer, holding it weakly.

* :class:`ConsumedBatches`: the batches of this epoch the Trainer consumed (what a checkpoint
  saves as the stream's position).
* :class:`ResumedEpochEnd`: after an epoch resumed on another layout (or the last epoch of a
  mix changed on resume), has the Trainer measure the train loader again (a fresh epoch's
  length differs from the resumed one's).
* :func:`restored_inside_finished_epoch` and :class:`TrainerLength`: a checkpoint taken at
  the last batch of such an epoch, which the Trainer would resume as not finished yet.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from datamodules.core.trainer_length import remeasure_train_loader, set_train_length
from datamodules.stream_engine.stream import ShardedStream

if TYPE_CHECKING:
    from datamodules.core.base import BaseDataModule as StreamingDataModule

__all__ = ["ConsumedBatches", "ResumedEpochEnd", "TrainerLength", "restored_inside_finished_epoch"]


class ConsumedBatches:
    """Asks the DataModule how many train batches the Trainer consumed, holding it weakly, so
    that a loader never keeps its DataModule (and the Trainer) alive."""

    def __init__(self, dm: StreamingDataModule) -> None:
        self._dm = weakref.ref(dm)

    def __call__(self) -> int | None:
        dm = self._dm()
        return None if dm is None else dm._consumed_batches()


class ResumedEpochEnd:
    """Run when the train loader yields the last batch of an epoch: after an epoch resumed on
    another layout, whose length differs from a fresh epoch's, makes the Trainer build the
    train loader again at the next epoch, so that it measures the next epochs' length anew
    (Lightning measures it once). Holds the DataModule weakly."""

    def __init__(self, dm: StreamingDataModule, stream: ShardedStream) -> None:
        self._dm, self._stream = weakref.ref(dm), stream

    def __call__(self) -> None:
        dm, stream = self._dm(), self._stream
        trainer = None if dm is None else dm._trainer()
        # (an epoch resumed on another layout, or the last epoch of a changed mix)
        if trainer is None or len(stream) == stream.plan_of(stream.epoch + 1).nb:
            return
        remeasure_train_loader(trainer)  # rebuilt (and measured) at the next epoch


def restored_inside_finished_epoch(trainer: Any, state: dict[str, Any], length: int) -> bool:
    """Whether the Trainer restores a checkpoint as inside an epoch ``state`` has finished.

    A checkpoint taken after the last batch of an epoch resumed on another layout saves the
    stream at the next epoch (``ended_length``: the batches the finished one had). The
    Trainer saved it before counting that batch as completed; on restore it compares its
    count with the loader's length and, when a fresh epoch is longer (``length``), would
    take the epoch for unfinished. :class:`TrainerLength` prevents that.
    """
    ended = state.get("ended_length")
    loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    if ended is None or loop is None or not loop.restarting:
        return False
    progress = loop.batch_progress.current
    at_batch_end = progress.completed == progress.processed - 1
    return at_batch_end and int(progress.processed) == int(ended) < length


class TrainerLength:
    """Shows a restoring Trainer the finished epoch's length, then the true one.

    The stream reports ``ended_length`` while the Trainer measures the loader and decides
    that the restored epoch is over; at the second batch of the next epoch (the Trainer has
    reset its count by then) this sets the Trainer's train length (and a fractional
    ``val_check_interval``'s batch) to the fresh epoch's. These are Lightning's own
    attributes (``fit_loop.max_batches``, its data fetcher's ``length``,
    ``trainer.val_check_batch``); it measures them once per loader.
    """

    def __init__(self, dm: StreamingDataModule, stream: ShardedStream, ended: int) -> None:
        self._dm, self._stream = weakref.ref(dm), stream
        stream.override_length(ended)

    def __call__(self) -> None:
        stream, dm = self._stream, self._dm()
        stream.override_length(None)
        trainer = None if dm is None else dm._trainer()
        if trainer is not None:
            set_train_length(trainer, len(stream))
