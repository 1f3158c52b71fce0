"""Runs a real 2-process CPU DDP ``Trainer.fit`` (gloo) and records the ids each rank saw.

The contract tests run it in a process forked from a preloaded forkserver
(:func:`tests.forked.run_main`, with ``--launch fork``: the ranks are forks of that process,
``strategy="ddp_fork"``); as a plain script,
``python tests/ddp_runner.py --factory MOD:FN --out DIR``, Lightning's DDP launcher re-runs
the same command line for rank 1. ``FN(**json.loads(--kwargs))`` returns
``(datamodule, batch_ids)``, where ``batch_ids(batch)`` gives the sample ids in a batch. Each
rank writes ``rank{R}.json``: ``{"train": [[ids of batch 0], ...] per epoch, "val": [...],
"batches": [...]}``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lightning.pytorch as pl  # noqa: E402
from lightning.pytorch.callbacks import Callback, ModelCheckpoint  # noqa: E402

from tests.recording import RecordingModel  # noqa: E402


class WriteRecord(Callback):
    """Writes each rank's record when its ``fit`` ends (in the rank's own process)."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        assert isinstance(pl_module, RecordingModel)
        record = {
            "rank": trainer.global_rank,
            "world": trainer.world_size,
            "train": pl_module.train_epochs(),
            "val": pl_module.val_epochs(),
            "pid": os.getpid(),
        }
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--factory", required=True)
    parser.add_argument("--kwargs", default="{}")
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--ckpt-dir", default=None, help="save a checkpoint every train step")
    parser.add_argument("--resume", default=None, help="a checkpoint to resume from")
    parser.add_argument("--launch", choices=("subprocess", "fork"), default="subprocess")
    args = parser.parse_args(argv)
    module_name, fn_name = args.factory.split(":")
    factory = getattr(importlib.import_module(module_name), fn_name)
    dm, batch_ids = factory(**json.loads(args.kwargs))
    model = RecordingModel(batch_ids)
    callbacks: list[Callback] = [WriteRecord(Path(args.out))]
    if args.ckpt_dir is not None:
        every_step = ModelCheckpoint(
            dirpath=args.ckpt_dir, every_n_train_steps=1, save_top_k=-1, filename="{epoch}-{step}"
        )
        callbacks.append(every_step)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy="ddp_fork" if args.launch == "fork" else "ddp",
        max_epochs=args.epochs,
        logger=False,
        enable_checkpointing=args.ckpt_dir is not None,
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, datamodule=dm, ckpt_path=args.resume)


if __name__ == "__main__":
    main()
