"""Train a digit classifier from shards streamed by StreamingDataModule.

The data is real and needs no download: scikit-learn's bundled handwritten digits
(``sklearn.datasets.load_digits``: 1,797 images of 8 x 8 pixels with values 0-16, ten
classes). On the first run the script shuffles them with a fixed seed and writes them as
shards into a cache directory (``--cache``, default ``~/.cache/datamodules/examples/digits``):
80 % as six Parquet shards of uneven sizes for training, 20 % as two gzipped JSONL shards for
validation, each record ``{"id": int, "pixels": 64 ints, "label": int}``. Later runs stream
the shards as they are; point ``--train``/``--val`` at your own shards (same record layout)
to train on them instead.

StreamingDataModule indexes the shards once, deals the records to the DataLoader workers so
that each arrives exactly once per epoch (the script checks it), shuffles them through a
bounded buffer, and batches them with its default collate: ``{"id": (B,), "pixels": (B, 64),
"label": (B,)}`` int64 tensors. The model scales the pixels itself (on the device).

Run: ``python examples/train_streaming.py`` (about 15 s on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time
import warnings
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch
from torch import nn

from datamodules import StreamingDataModule

# Lightning's _pytree calls a torch API that torch deprecates, with a FutureWarning on every fit
# that a user can do nothing about. It is filtered here, in the example scripts, and nowhere else.
warnings.filterwarnings(
    "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
)

TRAIN_SHARDS = (0.30, 0.05, 0.25, 0.10, 0.18, 0.12)  # shares of the train records: uneven


def default_cache() -> Path:
    root = os.environ.get("DATAMODULES_CACHE") or Path.home() / ".cache" / "datamodules"
    return Path(root) / "examples" / "digits"


def write_digit_shards(root: Path) -> tuple[str, str]:
    """Writes the digits as Parquet (train) and gzipped JSONL (val) shards, once.

    Returns:
        Globs of the train and the validation shards.
    """
    train_glob, val_glob = str(root / "train-*.parquet"), str(root / "val-*.jsonl.gz")
    done = root / "COMPLETE"
    if done.exists():
        return train_glob, val_glob
    import pyarrow as pa
    import pyarrow.parquet as pq
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    records = [
        {
            "id": int(i),
            "pixels": digits.data[i].astype(int).tolist(),
            "label": int(digits.target[i]),
        }
        for i in order
    ]
    n_train = int(0.8 * len(records))
    train, val = records[:n_train], records[n_train:]
    root.mkdir(parents=True, exist_ok=True)
    bounds = np.rint(np.cumsum((0, *TRAIN_SHARDS)) * n_train).astype(int)
    for k, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        table = pa.Table.from_pylist(train[start:stop])
        pq.write_table(table, root / f"train-{k:02d}.parquet", row_group_size=100)
    for k, part in enumerate((val[: len(val) // 2], val[len(val) // 2 :])):
        with gzip.open(root / f"val-{k:02d}.jsonl.gz", "wt") as f:
            f.writelines(json.dumps(r) + "\n" for r in part)
    done.write_text(f"{len(train)} train and {len(val)} validation records\n")
    return train_glob, val_glob


class DigitClassifier(pl.LightningModule):
    """An MLP over the 64 pixels; also records the ids it trained on, per epoch."""

    def __init__(self, lr: float = 3e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10))
        self.seen: dict[int, list[int]] = {}

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.net(pixels.float() / 16.0)

    def _step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        logits = self(batch["pixels"])
        loss = nn.functional.cross_entropy(logits, batch["label"])
        acc = (logits.argmax(dim=1) == batch["label"]).float().mean()
        size = len(batch["label"])
        self.log(f"{stage}_loss", loss, prog_bar=stage == "val", batch_size=size)
        self.log(f"{stage}_acc", acc, prog_bar=stage == "val", batch_size=size)
        return loss

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        self.seen.setdefault(self.current_epoch, []).extend(batch["id"].tolist())
        return self._step(batch, "train")

    def validation_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        self._step(batch, "val")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=default_cache(), help="where the shards go")
    parser.add_argument("--train", help="train shards (a glob or path) instead of the digits")
    parser.add_argument("--val", help="validation shards instead of the digits")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    pl.seed_everything(0, verbose=False)

    train_files, val_files = args.train, args.val
    if train_files is None:
        train_files, val_files = write_digit_shards(args.cache)
    dm = StreamingDataModule(train_files, val_files, batch_size=args.batch_size, shuffle_buffer=500)
    dm.setup("fit")
    print(
        f"train: {dm.split_size('train')} records in {len(dm.shards['train'])} shards, "
        f"validation: {dm.split_size('val')} records in {len(dm.shards['val'])} shards"
    )
    model = DigitClassifier()
    trainer = pl.Trainer(
        max_epochs=args.epochs,
        accelerator="auto",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    start = time.perf_counter()
    trainer.fit(model, datamodule=dm)
    seconds = time.perf_counter() - start
    once = all(len(ids) == len(set(ids)) == dm.split_size("train") for ids in model.seen.values())
    (result,) = trainer.validate(model, datamodule=dm, verbose=False)
    print(
        f"validation accuracy: {result['val_acc']:.3f} on {dm.split_size('val')} held-out "
        f"digits after {args.epochs} epochs in {seconds:.0f} s; every train record seen "
        f"exactly once in each epoch: {once}"
    )


if __name__ == "__main__":
    main()
