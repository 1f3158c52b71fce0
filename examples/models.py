"""Small LightningModules for ``examples/cli.py``: one per kind of data.

* :class:`TabularClassifier`: feature vectors and class labels, ``(x (B, F), y (B,))``
  (TensorDataModule).
* :class:`ImageClassifier`: images and class indices, ``(images (B, 3, H, W), targets (B,))``
  (ImageFolderDataModule).
* :class:`TextClassifier`: padded token ids, ``{"input_ids", "lengths", "labels"}``
  (TextDataModule).

Every model logs ``train_loss``, ``val_loss`` / ``val_acc`` and ``test_acc``, and defines its
own optimizer so that a config needs no ``optimizer:`` section. Sizes that depend on the data
(class count, vocabulary size) default to None: the model then reads them from the Trainer's
DataModule in ``configure_model`` (after the DataModule's ``setup``) and records them in its
hyperparameters, so one config fits any folder or text file, and a checkpoint reloads with
``load_from_checkpoint`` alone.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence


class _Classifier(pl.LightningModule):
    """Shared steps of the classifiers: cross-entropy, accuracy, Adam."""

    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = lr

    def _step(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str) -> torch.Tensor:
        x, y = batch
        logits = self._logits(x)
        loss = nn.functional.cross_entropy(logits, y)
        acc = (logits.argmax(dim=1) == y).float().mean()
        self.log(f"{stage}_loss", loss, prog_bar=stage == "val", batch_size=len(y))
        self.log(f"{stage}_acc", acc, prog_bar=stage != "train", batch_size=len(y))
        return loss

    def _logits(self, x: Any) -> torch.Tensor:
        return self(x)

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


def _datamodule(model: pl.LightningModule) -> Any:
    """The Trainer's DataModule, or None (no Trainer, or fit with bare loaders)."""
    try:
        return model.trainer.datamodule
    except RuntimeError:  # not attached to a Trainer
        return None


def _resolve_size(model: pl.LightningModule, name: str, given: int | None, found: Any) -> int:
    """``given`` if set (it must cover the DataModule's ``found``), else ``found``.

    Raises:
        ValueError: Neither is known, or ``given`` is smaller than the data needs.
    """
    if given is None:
        if found is None:
            raise ValueError(
                f"{type(model).__name__}: {name}=None takes {name} from the Trainer's "
                f"DataModule, and there is none that has it: pass {name}=<int>."
            )
        return int(found)
    if found is not None and int(given) < int(found):
        raise ValueError(
            f"{type(model).__name__}: {name}={given} but the DataModule needs {found}: "
            f"raise it, or set {name}: null to take the DataModule's."
        )
    return int(given)


class ImageClassifier(_Classifier):
    """Two conv blocks and a linear head (``SmallCNN`` of examples/train_image_folder.py).

    Images arrive as normalised float on the device (ImageFolderDataModule converts them in
    ``on_after_batch_transfer``); any image size of at least 4 pixels works.

    Args:
        num_classes: Number of classes; None: ``len(datamodule.classes)``.
        width: Channels of the first conv block (the second has twice as many).
        lr: Adam's learning rate.
    """

    def __init__(self, num_classes: int | None = None, width: int = 32, lr: float = 3e-3) -> None:
        super().__init__(lr)
        self.save_hyperparameters()
        self.net: nn.Module | None = None
        if num_classes is not None:
            self._build(num_classes)

    def _build(self, num_classes: int) -> None:
        w = self.hparams.width
        self.net = nn.Sequential(
            nn.Conv2d(3, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(w, 2 * w, 3, padding=1), nn.BatchNorm2d(2 * w), nn.ReLU(),
            nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(2 * w * 16, num_classes),
        )  # fmt: skip

    def configure_model(self) -> None:
        """Builds the layers with the DataModule's class count (once)."""
        if self.net is None:
            classes = getattr(_datamodule(self), "classes", None)
            found = None if classes is None else len(classes)
            self.hparams.num_classes = _resolve_size(
                self, "num_classes", self.hparams.num_classes, found
            )
            self._build(self.hparams.num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        assert self.net is not None, "the layers are built in configure_model()"
        return self.net(images)


class TextClassifier(_Classifier):
    """Embeds tokens, runs a bidirectional GRU over the real ones, classifies (``CharGRU`` of
    examples/train_text.py).

    Args:
        vocab_size: Ids to embed; None: ``datamodule.vocab_size``.
        num_classes: Number of classes; None: ``datamodule.num_classes``.
        dim: Embedding and GRU width.
        lr: Adam's learning rate.
    """

    def __init__(
        self,
        vocab_size: int | None = None,
        num_classes: int | None = None,
        dim: int = 64,
        lr: float = 3e-3,
    ) -> None:
        super().__init__(lr)
        self.save_hyperparameters()
        self.built = False
        if vocab_size is not None and num_classes is not None:
            self._build(vocab_size, num_classes)

    def _build(self, vocab_size: int, num_classes: int) -> None:
        dim = self.hparams.dim
        self.embed = nn.Embedding(vocab_size, dim)
        self.gru = nn.GRU(dim, dim, batch_first=True, bidirectional=True)
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(2 * dim, num_classes))
        self.built = True

    def configure_model(self) -> None:
        """Builds the layers with the DataModule's vocabulary size and class count (once)."""
        if not self.built:
            datamodule = _datamodule(self)
            for name in ("vocab_size", "num_classes"):
                found = getattr(datamodule, name, None)
                self.hparams[name] = _resolve_size(self, name, self.hparams[name], found)
            self._build(self.hparams.vocab_size, self.hparams.num_classes)

    def forward(self, input_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        assert self.built, "the layers are built in configure_model()"
        packed = pack_padded_sequence(
            self.embed(input_ids), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        _, hidden = self.gru(packed)  # (2, B, dim): the last state of each direction
        return self.head(torch.cat([hidden[0], hidden[1]], dim=1))

    def _step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        return super()._step(((batch["input_ids"], batch["lengths"]), batch["labels"]), stage)

    def _logits(self, x: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return self(*x)
