"""Train the image-folder example's CNN from tar shards written by ``python -m datamodules shards``.

The data is scikit-learn's bundled handwritten digits (1,797 real 8x8 scans: nothing is
downloaded), written once as PNG class folders (as ``examples/train_image_folder.py`` does),
then turned into WebDataset tar shards by the library's command line::

    python -m datamodules shards DIGITS OUT --val-split 0.2 --max-bytes 100kB

(a seeded, stratified split, like ImageFolderDataModule's; ``OUT/classes.json`` names the
classes). ``StreamingDataModule(train shards, val shards, image_key="png", classes=...)``
then streams them on the fast image path: decoded in the workers into uint8 batches,
normalised on the device. The model is ``SmallCNN`` of ``train_image_folder.py``; the held-out
val shards give the test accuracy.

Run: ``python examples/train_image_shards.py`` (about a minute on 2 CPU cores; prints the test
accuracy, about 0.97).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import lightning.pytorch as pl
from torchvision.transforms import v2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datamodules import StreamingDataModule  # noqa: E402
from datamodules.__main__ import main as datamodules_command  # noqa: E402
from examples.train_image_folder import DEFAULT_CACHE, SmallCNN, write_digits  # noqa: E402

# Lightning's _pytree calls a torch API that torch deprecates, with a FutureWarning on every fit
# that a user can do nothing about. It is filtered here, in the example scripts, and nowhere else.
warnings.filterwarnings(
    "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
)


def write_shards(digits: Path, out: Path) -> None:
    """``python -m datamodules shards`` (in this process); a rerun keeps the shards there."""
    command = ["shards", str(digits), str(out), "--val-split", "0.2", "--max-bytes", "100kB"]
    if datamodules_command(command) != 0:
        raise SystemExit(f"python -m datamodules {' '.join(command)} failed")


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Writes the shards, trains, tests; prints and returns the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where digits go")
    parser.add_argument("--image-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    pl.seed_everything(0, verbose=False)
    start = time.perf_counter()
    out = args.cache / "digit-shards"
    write_shards(write_digits(args.cache / "digits"), out)
    train, val = sorted(out.glob("train-*.tar")), sorted(out.glob("val-*.tar"))
    size = args.image_size
    dm = StreamingDataModule(
        [str(p) for p in train],
        [str(p) for p in val],
        test_files=[str(p) for p in val],
        image_key="png",
        classes=json.loads((out / "classes.json").read_text()),
        image_size=size,
        batch_size=args.batch_size,
        num_workers=args.workers,
        shuffle_buffer=2000,  # the whole train split: a full shuffle every epoch
        # Digits are small and centred: mild affine jitter instead of aggressive crops.
        train_transforms=v2.Compose(
            [v2.Resize((size, size)), v2.RandomAffine(degrees=10, translate=(0.1, 0.1))]
        ),
        eval_transforms=v2.Resize((size, size)),
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
    )
    model = SmallCNN(num_classes=dm.num_classes)
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
    figures = {
        "test_acc": float(result["test_acc"]),
        "test_images": dm.split_size("test"),
        "shards": len(train) + len(val),
        "seconds": time.perf_counter() - start,
    }
    print(
        f"test accuracy: {figures['test_acc']:.3f} on {figures['test_images']} held-out images "
        f"of {dm.num_classes} classes, from {figures['shards']} tar shards "
        f"({figures['seconds']:.0f} s in all)"
    )
    return figures


if __name__ == "__main__":
    main()
