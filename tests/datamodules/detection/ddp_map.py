"""A 2-process CPU DDP run (gloo) of DetectionDataModule that records the image ids each rank
trains and validates on, and the mAP of the predictions gathered over the ranks every epoch.

The ranks' shares of the validation split differ by an image (5 images on 2 ranks: none is
repeated), so the predictions are gathered with ``all_gather_object`` and scored by one
torchmetrics ``MeanAveragePrecision``: its own ``sync_on_compute`` gathers its per-image list
states one tensor at a time and needs the same number of images on every rank.

``test_contract.py`` runs it in a process forked from a preloaded forkserver
(:func:`tests.forked.run_main` with ``--launch fork``: the ranks are forks of that process,
``strategy="ddp_fork"``); as a plain script,
``python ddp_map.py --root DIR --out DIR``, Lightning re-runs the command line for rank 1.
The "detector" predicts from the targets themselves, shifted and scored by image id, so the
mAP is a fixed, non-trivial number.
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
import torch  # noqa: E402

__all__ = ["predictions", "single_process_map"]


def predictions(targets: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """Made-up predictions for a batch's targets, and the targets as torchmetrics takes them."""
    preds, truth = [], []
    for target in targets:
        boxes = target["boxes"].as_subclass(torch.Tensor).float()
        image = int(target["image_id"])
        shifted = boxes + float(image % 4)
        spurious = torch.tensor([[1.0, 1.0, 6.0, 6.0]])
        preds.append({
            "boxes": torch.cat([shifted, spurious]),
            # Scores without ties: COCO's matching sorts them, and ties would make the
            # result depend on the order in which images arrive.
            "scores": torch.tensor([0.2 + 0.03 * image + 0.005 * k for k in range(len(boxes))]
                                   + [0.21 + 0.03 * image]),
            "labels": torch.cat([target["labels"], torch.tensor([1 + image % 3])]),
        })  # fmt: skip
        truth.append({"boxes": boxes, "labels": target["labels"]})
    return preds, truth


def single_process_map(dm: Any) -> float:
    """The mAP over the validation loader of ``dm`` in this process."""
    from torchmetrics.detection import MeanAveragePrecision

    metric = MeanAveragePrecision()
    for _, targets in dm.val_dataloader():
        metric.update(*predictions(targets))
    return round(float(metric.compute()["map"]), 6)


class MapModel(pl.LightningModule):
    """Records ids and the gathered mAP; each rank writes ``out/rank{R}.json`` at fit end."""

    def __init__(self, out: str) -> None:
        super().__init__()
        self.out = out
        from torchmetrics.detection import MeanAveragePrecision

        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.metric = MeanAveragePrecision(sync_on_compute=False)
        self.pairs: list[tuple[list[dict], list[dict]]] = []
        self.seen: dict[str, list] = {"train": [], "val": [], "map": []}

    def training_step(self, batch: Any, index: int) -> torch.Tensor:
        self._record("train", batch)
        return (self.weight - 1).pow(2).sum()

    def _record(self, stage: str, batch: Any) -> None:
        epochs = self.seen[stage]
        while len(epochs) <= self.current_epoch:
            epochs.append([])
        epochs[self.current_epoch].append([int(t["image_id"]) for t in batch[1]])

    def validation_step(self, batch: Any, index: int) -> None:
        self._record("val", batch)
        self.pairs.append(predictions(batch[1]))

    def on_validation_epoch_end(self) -> None:
        gathered: list[Any] = [None] * self.trainer.world_size
        torch.distributed.all_gather_object(gathered, self.pairs)
        for pairs in gathered:
            for preds, truth in pairs:
                self.metric.update(preds, truth)
        self.seen["map"].append(round(float(self.metric.compute()["map"]), 6))
        self.metric.reset()
        self.pairs = []

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def on_fit_end(self) -> None:
        out = Path(self.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"rank{self.trainer.global_rank}.json").write_text(json.dumps(self.seen))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--launch", choices=("subprocess", "fork"), default="subprocess")
    args = parser.parse_args(argv)
    from tests.datamodules.detection.detection_data import ddp_datamodule

    dm, _ = ddp_datamodule(args.root)
    model = MapModel(args.out)
    trainer = pl.Trainer(
        accelerator="cpu", devices=2, strategy="ddp_fork" if args.launch == "fork" else "ddp",
        max_epochs=2, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(model, datamodule=dm)


if __name__ == "__main__":
    main()
