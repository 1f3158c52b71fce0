"""Segment handwritten digits pasted on photos with SegmentationDataModule and a tiny U-Net.

The data is generated at run time from what scikit-learn ships (nothing is downloaded):
backgrounds are random 32 x 32 crops of scikit-learn's two sample photos
(``sklearn.datasets.load_sample_images()``: a Chinese temple and a flower), and on each one
of scikit-learn's 8 x 8 handwritten digits (``sklearn.datasets.load_digits()``) is pasted at
a random place and scale (16 to 26 pixels) in a random bright colour. The class mask
is the digit's class + 1 where its strokes are, 0 (background) elsewhere: 11 classes. The
images and masks are written as PNG files into an image folder and a mask folder per split,
which is what SegmentationDataModule reads. Held-out images use digits (the handwriting of
writers) never pasted into a training image.

A small U-Net with BatchNorm and an image-level context branch (about 130 k parameters)
trains with cross entropy (background weighted 0.2, ``ignore_index=255``: pixels that the
scale-jitter crop padded) plus a soft Dice term, and an auxiliary loss on the context branch:
which digit classes the mask holds (read from the training masks). AdamW with a one-cycle
schedule. The mean IoU over the 11 classes on the held-out images is printed after each epoch
and at the end.

Full run (1,500 training images, 300 held-out, 10 epochs): mean IoU 0.642 in 3 min 27 s to 3
min 44 s on a shared 2-core machine (load 1.4 to 4, ``OMP_NUM_THREADS=1``; two runs, the same
figure). This example's earlier form (GroupNorm, one or two digits of 12-20 pixels, plain cross
entropy) predicted background everywhere (0.08): with GroupNorm even a plain digit classifier
on the same trunk stayed at chance for 5 epochs, with BatchNorm it reached 0.88 held-out
accuracy in 4.

Run: ``python examples/train_segmentation.py``, or ``--fast`` (64 images, 1 epoch: a smoke
run whose figure means nothing).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from PIL import Image
from torch import nn
from torchvision import tv_tensors
from torchvision.transforms import v2

from datamodules import SegmentationDataModule

warnings.filterwarnings(
    "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
)
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
logging.getLogger("datamodules").setLevel(logging.WARNING)

SIZE = 32
CLASSES = 11  # background and the ten digits
IGNORE = 255
#: Digits (of scikit-learn's 1,797) that only held-out images use.
HELD_OUT_DIGITS = 400
#: The side of a pasted digit, in pixels: ``[low, high)``.
DIGIT_SIZES = (16, 27)
#: The weight of the background class in the cross entropy (most pixels are background).
BACKGROUND_WEIGHT = 0.2


def paste_digits(
    photo: np.ndarray, digits: np.ndarray, labels: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """A ``SIZE`` x ``SIZE`` crop of ``photo`` with one of ``digits`` pasted, and its mask."""
    side = int(rng.integers(SIZE, 3 * SIZE))
    top = int(rng.integers(0, photo.shape[0] - side))
    left = int(rng.integers(0, photo.shape[1] - side))
    crop = Image.fromarray(photo[top : top + side, left : left + side])
    image = np.asarray(crop.resize((SIZE, SIZE), Image.BILINEAR), dtype=np.float32)
    image = image * 0.8  # darker backgrounds: bright digits stand out, but not trivially
    mask = np.zeros((SIZE, SIZE), dtype=np.uint8)
    k = int(rng.integers(len(digits)))
    size = int(rng.integers(*DIGIT_SIZES))
    glyph = Image.fromarray((digits[k] * 255 / 16).astype(np.uint8))
    alpha = np.asarray(glyph.resize((size, size), Image.BILINEAR), dtype=np.float32) / 255
    y, x = (int(v) for v in rng.integers(0, SIZE - size + 1, size=2))
    colour = rng.uniform(150, 255, size=3).astype(np.float32)
    region = image[y : y + size, x : x + size]
    region[:] = region * (1 - alpha[..., None]) + colour * alpha[..., None]
    mask[y : y + size, x : x + size][alpha > 0.5] = int(labels[k]) + 1
    return image.round().clip(0, 255).astype(np.uint8), mask


def write_split(root: Path, name: str, count: int, digits: Any, seed: int) -> tuple[Path, Path]:
    """``count`` images and masks as PNG files under ``root/name/{images,masks}``."""
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    rng = np.random.default_rng(seed)
    images, masks = root / name / "images", root / name / "masks"
    images.mkdir(parents=True)
    masks.mkdir(parents=True)
    for i in range(count):
        photo = photos[i % len(photos)]
        image, mask = paste_digits(photo, digits[0], digits[1], rng)
        Image.fromarray(image).save(images / f"{i:05d}.png")
        Image.fromarray(mask, mode="L").save(masks / f"{i:05d}.png")
    return images, masks


def block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
    )  # fmt: skip


class TinyUNet(pl.LightningModule):
    """A U-Net of two stages down (16, 32 channels; 64 at 1/4) and two up with skips, plus an
    image-level context (the deepest features max-pooled, as DeepLab's image pooling) that
    tells every pixel which digit the image holds; ``presence`` reads the digit classes from
    that context (an auxiliary loss that teaches it digits)."""

    def __init__(self, lr: float = 3e-3) -> None:
        super().__init__()
        self.lr = lr
        self.down1, self.down2, self.deep = block(3, 16), block(16, 32), block(32, 64)
        self.context = nn.Sequential(nn.Linear(64, 64), nn.ReLU())
        self.up2, self.merge2 = nn.ConvTranspose2d(128, 32, 2, stride=2), block(64, 32)
        self.up1, self.merge1 = nn.ConvTranspose2d(32, 16, 2, stride=2), block(32, 16)
        self.head = nn.Conv2d(16, CLASSES, 1)
        self.presence = nn.Linear(64, CLASSES - 1)
        self.confusion = torch.zeros(CLASSES, CLASSES, dtype=torch.int64)
        self.history: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)[0]

    def features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The class logits ``(B, CLASSES, H, W)`` and the image-level context ``(B, 64)``."""
        a = self.down1(x)
        b = self.down2(nn.functional.max_pool2d(a, 2))
        c = self.deep(nn.functional.max_pool2d(b, 2))
        pooled = self.context(c.amax((2, 3)))
        context = pooled[:, :, None, None].expand_as(c)
        x = self.merge2(torch.cat([self.up2(torch.cat([c, context], 1)), b], 1))
        x = self.merge1(torch.cat([self.up1(x), a], 1))
        return self.head(x), pooled

    def training_step(self, batch: dict[str, torch.Tensor], index: int) -> torch.Tensor:
        logits, pooled = self.features(batch["image"])
        mask = batch["mask"]
        weight = torch.ones(CLASSES, device=logits.device)
        weight[0] = BACKGROUND_WEIGHT
        loss = nn.functional.cross_entropy(logits, mask, weight=weight, ignore_index=IGNORE)
        return loss + dice_loss(logits, mask) + presence_loss(self.presence(pooled), mask)

    def validation_step(self, batch: dict[str, torch.Tensor], index: int) -> None:
        predicted = self(batch["image"]).argmax(1)
        truth = batch["mask"]
        keep = truth != IGNORE
        pairs = truth[keep] * CLASSES + predicted[keep]
        counts = torch.bincount(pairs, minlength=CLASSES * CLASSES).view(CLASSES, CLASSES)
        self.confusion += counts.cpu()

    def on_validation_epoch_end(self) -> None:
        self.history.append(mean_iou(self.confusion))
        print(f"epoch {self.current_epoch}: held-out mean IoU {self.history[-1]:.3f}", flush=True)
        self.confusion.zero_()

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=1e-4)
        steps = int(self.trainer.estimated_stepping_batches)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, self.lr, total_steps=steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def dice_loss(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One minus the soft Dice of each class the batch's masks hold, averaged (``IGNORE``
    pixels left out): every class counts alike, however few its pixels."""
    keep = (mask != IGNORE).unsqueeze(1)
    probs = logits.softmax(1) * keep
    truth = nn.functional.one_hot(mask.clamp(max=CLASSES - 1), CLASSES).permute(0, 3, 1, 2) * keep
    inter = (probs * truth).sum((0, 2, 3))
    total = probs.sum((0, 2, 3)) + truth.sum((0, 2, 3))
    present = truth.sum((0, 2, 3)) > 0
    return (1 - (2 * inter[present] + 1) / (total[present] + 1)).mean()


def presence_loss(presence: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Binary cross entropy of ``presence`` ``(B, CLASSES - 1)`` against the digit classes
    each mask holds."""
    held = torch.stack([(mask == k).flatten(1).any(1) for k in range(1, CLASSES)], 1)
    return nn.functional.binary_cross_entropy_with_logits(presence, held.float())


def mean_iou(confusion: torch.Tensor) -> float:
    """The mean over classes of intersection over union, from a confusion matrix (truth rows)."""
    hits = confusion.diag().double()
    union = confusion.sum(0).double() + confusion.sum(1).double() - hits
    present = union > 0
    return float((hits[present] / union[present]).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="fewer images and epochs")
    parser.add_argument("--epochs", type=int, default=None)
    args = parser.parse_args()
    from sklearn.datasets import load_digits

    pl.seed_everything(0, verbose=False)
    digits = load_digits()
    train_digits = (digits.images[HELD_OUT_DIGITS:], digits.target[HELD_OUT_DIGITS:])
    held_digits = (digits.images[:HELD_OUT_DIGITS], digits.target[:HELD_OUT_DIGITS])
    train_count, held_count = (64, 16) if args.fast else (1500, 300)
    epochs = args.epochs or (1 if args.fast else 10)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        train = write_split(root, "train", train_count, train_digits, seed=1)
        held = write_split(root, "held-out", held_count, held_digits, seed=2)
        # Scale jitter and a crop back to 32 (padding masked with IGNORE); no flip: digits
        # are not mirror-symmetric (the default train transform would flip them).
        fill = {tv_tensors.Image: 0, tv_tensors.Mask: IGNORE}
        jitter = v2.Compose(
            [v2.RandomResize(28, 40), v2.RandomCrop(SIZE, pad_if_needed=True, fill=fill)]
        )
        dm = SegmentationDataModule(
            train, held, num_classes=CLASSES, ignore_index=IGNORE, transforms=jitter,
            batch_size=16, num_workers=1,
        )  # fmt: skip
        model = TinyUNet()
        trainer = pl.Trainer(
            max_epochs=epochs, accelerator="cpu", devices=1, logger=False,
            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
            num_sanity_val_steps=0,
        )  # fmt: skip
        trainer.fit(model, datamodule=dm)
        print(dm.summary())
        print(f"skipped: {dm.skipped.summary()}")
        print(
            f"held-out images: mean IoU {model.history[-1]:.3f} over {CLASSES} classes "
            f"({held_count} images, {epochs} epochs on {train_count}, "
            f"{time.perf_counter() - start:.0f} s)"
        )


if __name__ == "__main__":
    main()
