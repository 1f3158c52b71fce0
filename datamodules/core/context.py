"""Where a DataModule runs: rank and world, local devices, the Trainer's progress, the log.

Under a Trainer every answer comes from it (global rank and world size across nodes, the
devices of this node, the batches the fit loop has processed); outside one, from the
initialised process group and the environment (``LOCAL_WORLD_SIZE``).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
from lightning.pytorch.trainer.states import TrainerFn

from datamodules.core.samplers import current_rank_and_world

__all__ = ["consumed_train_batches", "local_hardware", "log", "trainer_rank_and_world"]

#: The library's logger; DataModules log their summary here once, on rank 0, at INFO.
log = logging.getLogger("datamodules")
# As Lightning does for its own logger: only when the application has configured no logging
# (the root logger has no handler) does the library print through a handler of its own.
# Otherwise its records propagate to the application's handlers (logging.basicConfig,
# pytest's caplog), and its level is the user's: a level set before the import is kept.
if not logging.getLogger().hasHandlers() and not log.handlers:
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    log.addHandler(logging.StreamHandler())
    log.propagate = False


def trainer_rank_and_world(trainer: Any) -> tuple[int, int]:
    """(global rank, world size) from the Trainer, else from the process group.

    A Trainer with ``use_distributed_sampler=False`` gives (0, 1): the user shards the data.
    """
    if trainer is not None:
        connector = getattr(trainer, "_accelerator_connector", None)
        if not getattr(connector, "use_distributed_sampler", True):
            return 0, 1
        return trainer.global_rank, trainer.world_size
    return current_rank_and_world()


def local_hardware(trainer: Any) -> tuple[int, str | None]:
    """(local world size, accelerator name) from the Trainer, else from this process."""
    if trainer is not None:
        return max(1, int(trainer.num_devices)), trainer.strategy.root_device.type
    accelerator = "cuda" if torch.cuda.is_available() else "cpu"
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(1, local), accelerator


def consumed_train_batches(trainer: Any) -> int | None:
    """Train batches of this epoch the fit loop has processed; None outside fitting."""
    if trainer is None or trainer.state.fn != TrainerFn.FITTING:
        return None
    return int(trainer.fit_loop.epoch_loop.batch_progress.current.processed)
