"""A tiny LightningModule that records which sample ids every batch held.

It trains one scalar parameter (so the Trainer runs real optimisation steps) and leaves the
data untouched: the tests built on it check the data pipeline, not a model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch


class RecordingModel(pl.LightningModule):
    """Records ``batch_ids(batch)`` for every train / val / test / predict batch.

    Args:
        batch_ids: Maps a batch to the list of sample ids it holds.
    """

    def __init__(self, batch_ids: Callable[[Any], list[int]]) -> None:
        super().__init__()
        self.batch_ids = batch_ids
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.seen: dict[str, list[tuple[int, int, list[int]]]] = {
            "train": [],
            "val": [],
            "test": [],
            "predict": [],
        }

    def _record(self, stage: str, batch: Any, batch_idx: int) -> None:
        self.seen[stage].append((self.current_epoch, batch_idx, list(self.batch_ids(batch))))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self._record("train", batch, batch_idx)
        return (self.weight - 1.0).pow(2).sum()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._record("val", batch, batch_idx)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._record("test", batch, batch_idx)

    def predict_step(self, batch: Any, batch_idx: int) -> list[int]:
        self._record("predict", batch, batch_idx)
        return list(self.batch_ids(batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def _by_epoch(self, stage: str) -> list[list[list[int]]]:
        epochs: dict[int, list[list[int]]] = {}
        for epoch, _, ids in self.seen[stage]:
            epochs.setdefault(epoch, []).append(ids)
        return [epochs[e] for e in sorted(epochs)]

    def train_epochs(self) -> list[list[list[int]]]:
        """Per epoch, the list of train batches (each a list of ids), in order."""
        return self._by_epoch("train")

    def val_epochs(self) -> list[list[list[int]]]:
        """Per epoch, the list of validation batches."""
        return self._by_epoch("val")
