"""Small LightningModules for ``examples/cli.py``: one per kind of data.

* :class:`TabularClassifier`: feature vectors and class labels, ``(x (B, F), y (B,))``
  (TensorDataModule).

Every model logs ``train_loss``, ``val_loss`` / ``val_acc`` and ``test_acc``, and defines its
own optimizer so that a config needs no ``optimizer:`` section.
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch import nn


class _Classifier(pl.LightningModule):
    """Shared steps of the classifiers: cross-entropy, accuracy, Adam."""

    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = lr

    def _step(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = nn.functional.cross_entropy(logits, y)
        acc = (logits.argmax(dim=1) == y).float().mean()
        self.log(f"{stage}_loss", loss, prog_bar=stage == "val", batch_size=len(y))
        self.log(f"{stage}_acc", acc, prog_bar=stage != "train", batch_size=len(y))
        return loss

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> None:
        self._step(batch, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class TabularClassifier(_Classifier):
    """An MLP over feature vectors; a BatchNorm layer standardises the raw features.

    Args:
        num_features: Length of a feature vector.
        num_classes: Number of classes.
        hidden: Width of the hidden layer.
        lr: Adam's learning rate.
    """

    def __init__(
        self, num_features: int = 13, num_classes: int = 3, hidden: int = 32, lr: float = 1e-2
    ) -> None:
        super().__init__(lr)
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.BatchNorm1d(num_features),
            nn.Linear(num_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
