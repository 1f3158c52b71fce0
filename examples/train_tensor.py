"""Train a small classifier on scikit-learn's bundled wine data with TensorDataModule.

The data ships with scikit-learn (178 wines, 13 chemical measurements, 3 cultivars): nothing
is downloaded. Features are standardised with statistics of the training split only, done
inside the model, so they run on whatever device the Trainer uses.

Run: ``python examples/train_tensor.py`` (about 10 s on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import warnings

import lightning.pytorch as pl
import torch
from sklearn.datasets import load_wine
from torch import nn

from datamodules import TensorDataModule

# Lightning's _pytree calls a torch API that torch deprecates, with a FutureWarning on every fit
# that a user can do nothing about. It is filtered here, in the example scripts, and nowhere else.
warnings.filterwarnings(
    "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
)


class WineClassifier(pl.LightningModule):
    """A two-layer MLP whose input standardisation is fitted on the training split."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, lr: float = 1e-2) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["mean", "std"])
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)
        self.net = nn.Sequential(nn.Linear(13, 32), nn.ReLU(), nn.Linear(32, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.mean) / self.std)

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
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    pl.seed_everything(0, verbose=False)

    wine = load_wine()
    x = torch.tensor(wine.data, dtype=torch.float32)
    y = torch.tensor(wine.target, dtype=torch.int64)
    dm = TensorDataModule(
        x, y, batch_size=args.batch_size, val_split=0.15, test_split=0.2, stratify=True
    )
    dm.setup("fit")
    train_x = x[dm.split_indices["train"]]
    model = WineClassifier(train_x.mean(dim=0), train_x.std(dim=0))
    trainer = pl.Trainer(
        max_epochs=args.epochs,
        accelerator="auto",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=dm)
    (result,) = trainer.test(model, datamodule=dm, verbose=False)
    print(f"test accuracy: {result['test_acc']:.3f} on {dm.split_size('test')} held-out wines")


if __name__ == "__main__":
    main()
