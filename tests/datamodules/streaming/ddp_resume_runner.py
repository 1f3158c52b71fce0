"""Runs a real CPU ``Trainer.fit`` of a StreamingDataModule on N processes (DDP, gloo), optionally
checkpointing every n steps or resuming from a checkpoint, and records the ids each rank saw.

test_elastic_ddp.py runs it in a process forked from a preloaded forkserver
(:func:`tests.forked.run_main` with ``--launch fork``: the ranks are forks of that process,
``strategy="ddp_fork"``). As a plain script,
``python tests/datamodules/streaming/ddp_resume_runner.py --kwargs JSON --devices N --out DIR
[--max-steps S --ckpt-dir D] [--ckpt-path P] [--ids labels]`` (``labels``: the ids are the
labels of ``(images, labels)`` batches), Lightning's DDP launcher re-runs the same command
line for the other ranks. Each rank writes ``rank{R}.json``: ``{"rank", "world", "train":
{epoch: [[ids of batch 0], ...]}, "val": {...}}``. :func:`fit` runs it in-process.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import lightning.pytorch as pl  # noqa: E402
from lightning.pytorch.callbacks import Callback, ModelCheckpoint  # noqa: E402

from datamodules import StreamingDataModule  # noqa: E402
from tests.recording import RecordingModel  # noqa: E402


def batch_ids(batch: Any) -> list[int]:
    """The record ids of a batch."""
    return batch["id"].tolist()


def label_ids(batch: Any) -> list[int]:
    """The record ids of an ``(images, labels)`` batch whose labels are the ids."""
    return batch[1].tolist()


def _record(trainer: pl.Trainer, model: RecordingModel) -> dict[str, Any]:
    record: dict[str, Any] = {"rank": trainer.global_rank, "world": trainer.world_size}
    for stage in ("train", "val"):
        epochs_seen: dict[str, list[list[int]]] = {}
        for epoch, _, ids in model.seen[stage]:
            epochs_seen.setdefault(str(epoch), []).append(ids)
        record[stage] = epochs_seen
    return record


class WriteRecord(Callback):
    """Writes each rank's record to ``out/rank{R}.json`` when its ``fit`` ends, in the rank's
    own process."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        assert isinstance(pl_module, RecordingModel)
        self.out.mkdir(parents=True, exist_ok=True)
        record = _record(trainer, pl_module)
        (self.out / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


def fit(
    kwargs: dict[str, Any],
    devices: int = 1,
    epochs: int = 2,
    max_steps: int = -1,
    ckpt_dir: str | None = None,
    ckpt_path: str | None = None,
    id_source: str = "id",
    out: Path | None = None,
    launch: str = "subprocess",
) -> dict[str, Any]:
    """One ``Trainer.fit``; returns this process's record (see the module docstring) and,
    given ``out``, writes each rank's there. ``launch="fork"`` forks the ranks."""
    dm = StreamingDataModule(**kwargs)
    model = RecordingModel(label_ids if id_source == "labels" else batch_ids)
    callbacks: list[Callback] = [] if out is None else [WriteRecord(out)]
    if ckpt_dir is not None:
        every = ModelCheckpoint(
            dirpath=ckpt_dir, every_n_train_steps=max_steps, save_top_k=-1, filename="{step}"
        )
        callbacks.append(every)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=("ddp_fork" if launch == "fork" else "ddp") if devices > 1 else "auto",
        max_epochs=epochs,
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=ckpt_dir is not None,
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return _record(trainer, model)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kwargs", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=-1)
    parser.add_argument("--ckpt-dir", default=None)
    parser.add_argument("--ckpt-path", default=None)
    parser.add_argument("--ids", choices=("id", "labels"), default="id")
    parser.add_argument("--launch", choices=("subprocess", "fork"), default="subprocess")
    args = parser.parse_args(argv)
    fit(
        json.loads(args.kwargs),
        args.devices,
        args.epochs,
        args.max_steps,
        args.ckpt_dir,
        args.ckpt_path,
        args.ids,
        out=Path(args.out),
        launch=args.launch,
    )


if __name__ == "__main__":
    main()
