"""Train a small causal transformer on a mixture of two token sources whose weights anneal halfway.

The data needs no download; it is this Python's own standard library, on disk:

* ``code``: the standard library's ``.py`` files (``sysconfig.get_paths()["stdlib"]``, tests
  and site-packages left out), one document per file;
* ``docs``: its documentation text: the docstrings of those same modules (module, classes and
  functions, one document per module) and the Python documentation's topics that ship in the
  standard library for ``help()`` (``pydoc_data.topics``), one document per topic.

One byte-level BPE (Hugging Face ``tokenizers``) is trained at run time on both and saved
beside them. Each source is written as JSONL shards and read through the token store
(tokenized once; later runs map it). ``TextDataModule(train_file=[Source(...), Source(...)],
packing=True, epoch_size=...)`` blends them: every epoch holds exactly ``epoch_size`` packed
rows, split between the sources by their weights, and each row comes from one source only.
The schedule is an annealing one: mostly documentation for the first half of the run, then
mostly code (``weight=[[epoch, weight], ...]``, linear between the points). The module logs a
validation loss per source (``eval_per_source=True``: one validation loader per source), and
every Trainer logger gets the epoch's quotas as ``mix/code`` and ``mix/docs`` (a CSV here).

Run: ``python examples/train_lm_mixture.py`` (about a minute on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import ast
import csv
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import CSVLogger

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datamodules import Source, TextDataModule  # noqa: E402
from examples.train_lm import TinyLM, bpe_tokenizer, default_cache, stdlib_sources, write_shards  # noqa: E402,I001


def module_docstrings(sources: Sequence[str]) -> list[str]:
    """Per module, its docstrings (module, classes, functions) joined: one document each."""
    out = []
    for text in sources:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        nodes = [tree, *(n for n in ast.walk(tree) if isinstance(
            n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))]  # fmt: skip
        found = [d for d in (ast.get_docstring(n) for n in nodes) if d]
        if found:
            out.append("\n\n".join(found))
    return out


def documentation(sources: Sequence[str]) -> list[str]:
    """The docs source: the modules' docstrings, then the documentation topics of ``help()``."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # some distributions leave pydoc_data out
        topics = {}
    return module_docstrings(sources) + [topics[k] for k in sorted(topics)]


class MixtureLM(TinyLM):
    """TinyLM with a validation loss per source (one validation loader each)."""

    def __init__(self, names: Sequence[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.names = list(names)

    def validation_step(
        self, batch: dict[str, torch.Tensor], _: int, dataloader_idx: int = 0
    ) -> None:
        loss, count = self._loss(batch)
        name = self.names[dataloader_idx]
        self.log(f"val_loss/{name}", loss, batch_size=count, add_dataloader_idx=False)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Trains, printing each epoch's quotas and validation loss per source; returns them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--rows", type=int, default=320, help="packed rows per epoch")
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--max-files", type=int, default=200)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--val-batches", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--cache", type=Path, default=None, help="shards, tokenizer, store, logs")
    args = parser.parse_args(argv)
    pl.seed_everything(0, verbose=False)
    cache = (
        args.cache or default_cache().with_name("train_lm_mixture")
    ) / f"files-{args.max_files}"
    code = stdlib_sources(args.max_files)
    docs = documentation(code)
    tokenizer = bpe_tokenizer(code + docs, args.vocab, cache / f"bpe-{args.vocab}.json")
    half = max(args.epochs // 2, 1)
    # Annealing: docs 3 : code 1 until halfway, then code 3 : docs 1 (linear over one epoch).
    sources = [
        Source(write_shards(code, cache / "code"), weight=[[half - 1, 1], [half, 3]], name="code"),
        Source(write_shards(docs, cache / "docs"), weight=[[half - 1, 3], [half, 1]], name="docs"),
    ]
    dm = TextDataModule(
        train_file=sources,
        tokenizer=tokenizer,
        token_cache=cache / "tokens",
        packing=True,
        seq_length=args.seq_length,
        epoch_size=args.rows,
        val_split=0.05,
        eval_per_source=True,
        batch_size=args.batch_size,
        num_workers=args.workers,
    )
    dm.setup("fit")
    print(
        f"code: {len(code)} stdlib .py files; docs: {len(docs)} documents (docstrings and "
        f"pydoc_data topics); one {dm.vocab_size}-id BPE; {args.rows} rows of "
        f"{args.seq_length} tokens per epoch"
    )
    logger = CSVLogger(cache / "logs", name="mixture")
    model = MixtureLM(dm.source_names("val"), vocab=dm.vocab_size, dim=args.dim, layers=2)
    trainer = pl.Trainer(
        max_epochs=args.epochs,
        limit_val_batches=args.val_batches,
        num_sanity_val_steps=0,
        accelerator="cpu",
        devices=1,
        logger=logger,
        log_every_n_steps=10,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    history: list[dict[str, Any]] = []

    class Report(pl.Callback):
        def on_validation_epoch_end(self, trainer: pl.Trainer, _: pl.LightningModule) -> None:
            epoch = trainer.current_epoch
            losses = {n: float(trainer.callback_metrics[f"val_loss/{n}"]) for n in model.names}
            history.append({"epoch": epoch, "quotas": dm.quotas(epoch), "val_loss": losses})
            mix = ", ".join(f"{n} {q} rows" for n, q in dm.quotas(epoch).items())
            loss = ", ".join(f"{n} {v:.3f}" for n, v in losses.items())
            print(f"epoch {epoch}: {mix}; val loss (nats/token) {loss}")

    trainer.callbacks.append(Report())
    trainer.fit(model, datamodule=dm)
    with open(Path(logger.log_dir) / "metrics.csv") as f:
        logged = sorted(
            {k for row in csv.DictReader(f) for k, v in row.items() if v and "mix/" in k}
        )
    print(f"logged per epoch: {', '.join(logged)} ({logger.log_dir}/metrics.csv)")
    first, last = history[0]["val_loss"], history[-1]["val_loss"]
    print(
        "val loss from the first epoch to the last: "
        + ", ".join(f"{n} {first[n]:.3f} -> {last[n]:.3f}" for n in first)
        + f" (uniform guessing: {math.log(dm.vocab_size):.3f})"
    )
    return {"history": history, "logged": logged, "vocab": dm.vocab_size}


if __name__ == "__main__":
    main()
