"""Classify surnames by language with a character-level GRU and TextDataModule.

The data is real and needs no download: the surname lists that the Faker package ships for
ten locales (``faker.providers.person.<locale>.Provider.last_names``). A surname listed under
several locales is ambiguous and left out (the script says how many). Texts are tokenized
once into a character vocabulary built from the training split; batches group names of
similar length, and the GRU reads them packed by their ``lengths``.

Run: ``python examples/train_text.py`` (about a minute on 2 CPU cores), or point it at your
own data: ``python examples/train_text.py --file names.jsonl --text-key text --label-key
label`` (a ``.jsonl``, ``.csv`` or ``.tsv`` file with a text and a label per record).
"""

from __future__ import annotations

import argparse
import importlib
import time
import warnings
from collections import Counter
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from datamodules import TextDataModule

# Lightning's _pytree calls a torch API that torch deprecates, with a FutureWarning on every fit
# that a user can do nothing about. It is filtered here, in the example scripts, and nowhere else.
warnings.filterwarnings(
    "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
)

LOCALES = {
    "cs_CZ": "Czech",
    "de_DE": "German",
    "en_US": "English",
    "es_ES": "Spanish",
    "fi_FI": "Finnish",
    "fr_FR": "French",
    "hr_HR": "Croatian",
    "it_IT": "Italian",
    "nl_NL": "Dutch",
    "sv_SE": "Swedish",
}


def faker_surnames() -> tuple[list[str], list[str], int]:
    """Surnames and their language from Faker's locales; drops names listed by several."""
    by_name: dict[str, set[str]] = {}
    for locale, language in LOCALES.items():
        provider = importlib.import_module(f"faker.providers.person.{locale}").Provider
        for name in provider.last_names:
            by_name.setdefault(name, set()).add(language)
    names = sorted(name for name, languages in by_name.items() if len(languages) == 1)
    ambiguous = len(by_name) - len(names)
    return names, [next(iter(by_name[name])) for name in names], ambiguous


class SurnameDataModule(TextDataModule):
    """Faker's surnames of ten locales, labelled by language (the extension point in use)."""

    def load_texts(self) -> tuple[list[str], list[str]]:
        names, languages, self.ambiguous = faker_surnames()
        return names, languages


class CharGRU(pl.LightningModule):
    """Embeds characters, runs a bidirectional GRU over the real ones, classifies."""

    def __init__(self, vocab_size: int, num_classes: int, dim: int = 64, lr: float = 3e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.gru = nn.GRU(dim, dim, batch_first=True, bidirectional=True)
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(2 * dim, num_classes))

    def forward(self, input_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = pack_padded_sequence(
            self.embed(input_ids), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        _, hidden = self.gru(packed)  # (2, B, dim): last state of each direction
        return self.head(torch.cat([hidden[0], hidden[1]], dim=1))

    def _step(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        logits = self(batch["input_ids"], batch["lengths"])
        loss = nn.functional.cross_entropy(logits, batch["labels"])
        acc = (logits.argmax(dim=1) == batch["labels"]).float().mean()
        size = len(batch["labels"])
        self.log(f"{stage}_loss", loss, prog_bar=stage == "val", batch_size=size)
        self.log(f"{stage}_acc", acc, prog_bar=stage != "train", batch_size=size)
        return loss

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        self._step(batch, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", help="a .jsonl/.csv/.tsv file of texts and labels instead")
    parser.add_argument("--text-key", default="text")
    parser.add_argument("--label-key", default="label")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    pl.seed_everything(0, verbose=False)

    common: dict[str, Any] = {
        "batch_size": args.batch_size,
        "val_split": 0.1,
        "test_split": 0.2,
        "stratify": True,
    }
    if args.file:
        dm: TextDataModule = TextDataModule(
            train_file=args.file, text_key=args.text_key, label_key=args.label_key, **common
        )
    else:
        dm = SurnameDataModule(**common)
    dm.setup("fit")
    if isinstance(dm, SurnameDataModule):
        counts = Counter(dm.dataset.labels)
        print(
            f"{len(dm.dataset)} surnames in {len(counts)} languages "
            f"({dm.ambiguous} listed by several locales left out): "
            + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        )
    model = CharGRU(dm.vocab_size, dm.num_classes)
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
    (result,) = trainer.test(model, datamodule=dm, verbose=False)
    test_labels = dm.view("test").encoded.labels[dm.split_indices["test"]]
    majority = max(Counter(test_labels.tolist()).values()) / len(test_labels)
    print(
        f"test accuracy: {result['test_acc']:.3f} on {len(test_labels)} held-out texts "
        f"(always guessing the largest class: {majority:.3f}); trained {args.epochs} epochs "
        f"in {seconds:.0f} s"
    )


if __name__ == "__main__":
    main()
