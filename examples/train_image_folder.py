"""Train a small CNN on an image folder with ImageFolderDataModule.

With no ``--root``, the data is scikit-learn's bundled handwritten digits (1,797 real 8x8
grayscale scans, shipped inside scikit-learn: nothing is downloaded), written once as PNG
class folders (``0/`` ... ``9/``) into a cache directory. ``--root`` points the same script
at any folder of class sub-folders.

Run: ``python examples/train_image_folder.py`` (about a minute on 2 CPU cores; prints the
test accuracy, about 0.98 on the digits).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch
from PIL import Image
from torch import nn
from torchvision.transforms import v2

from datamodules import ImageFolderDataModule

# Lightning's _pytree calls a torch API that torch deprecates, with a FutureWarning on every fit
# that a user can do nothing about. It is filtered here, in the example scripts, and nowhere else.
warnings.filterwarnings(
    "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
)

DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "datamodules"


def write_digits(root: Path) -> Path:
    """Writes scikit-learn's digits as ``root/<digit>/<n>.png`` (once; reused afterwards)."""
    done = root / ".complete"
    if done.exists():
        return root
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = (digits.images * (255.0 / 16.0)).round().astype(np.uint8)
    for n, (image, label) in enumerate(zip(pixels, digits.target, strict=True)):
        folder = root / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image, mode="L").save(folder / f"{n:04d}.png")
    done.touch()
    return root


class SmallCNN(pl.LightningModule):
    """Two conv blocks and a linear head; inputs arrive as normalised float on the device."""

    def __init__(self, num_classes: int, lr: float = 3e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.LazyLinear(num_classes),
        )  # fmt: skip

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)

    def _step(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str) -> torch.Tensor:
        images, targets = batch
        logits = self(images)
        loss = nn.functional.cross_entropy(logits, targets)
        acc = (logits.argmax(dim=1) == targets).float().mean()
        self.log(f"{stage}_loss", loss, batch_size=len(targets))
        self.log(f"{stage}_acc", acc, prog_bar=stage != "train", batch_size=len(targets))
        return loss

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> None:
        self._step(batch, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="a folder of class sub-folders (default: the digits)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where digits go")
    parser.add_argument("--image-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    pl.seed_everything(0, verbose=False)
    start = time.perf_counter()
    root = Path(args.root) if args.root else write_digits(args.cache / "digits")

    size = args.image_size
    dm = ImageFolderDataModule(
        str(root),
        image_size=size,
        batch_size=args.batch_size,
        val_split=0.1,
        test_split=0.2,
        # Digits are small and centred: mild affine jitter instead of aggressive crops.
        train_transforms=v2.Compose(
            [v2.Resize((size, size)), v2.RandomAffine(degrees=10, translate=(0.1, 0.1))]
        ),
        eval_transforms=v2.Resize((size, size)),
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
    )
    dm.setup("fit")
    model = SmallCNN(num_classes=len(dm.classes))
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
    print(
        f"test accuracy: {result['test_acc']:.3f} on {dm.split_size('test')} held-out images "
        f"of {len(dm.classes)} classes ({time.perf_counter() - start:.0f} s in all)"
    )


if __name__ == "__main__":
    main()
