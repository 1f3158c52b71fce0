"""Train a small causal transformer on the Python standard library, packed, from a token store.

The corpus needs no download: the ``.py`` files of this Python's own standard library
(``sysconfig.get_paths()["stdlib"]``, tests and site-packages left out), one document per
file, written once as JSONL shards under ``--cache``. The tokenizer is real: a byte-level BPE
(``--vocab`` ids, ``<pad>`` = 0) that the first run trains on those files with Hugging Face
``tokenizers`` and saves beside them. ``TextDataModule(train_file=shards, tokenizer=bpe)``
reads the shards through the token store: the first run tokenizes them into it, every later
run maps it and starts at once. The documents are split by file into train and validation.

``TextDataModule(packing=True)`` packs the tokens into rows of ``--seq-length``; the model
keeps attention within each document with a block-diagonal causal mask built from
``document_ids`` (SDPA), and rotary position embeddings from ``position_ids`` (which go on
counting when a file continues into the next row).

``--batching bucket`` trains the same model on the same files without packing: each file cut
into chunks of at most ``--seq-length`` tokens, batched by length buckets and padded, for the
comparison in the docs (real tokens/s, validation loss after the same wall time).

Run: ``python examples/train_lm.py`` (3 minutes of training on 2 CPU cores, then the
validation loss and the real tokens/s); ``--max-minutes``, ``--max-steps``, ``--max-files``
make it shorter.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sysconfig
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F

from datamodules import TextDataModule

# Lightning's _pytree calls a torch API that torch deprecates, with a FutureWarning on every fit
# that a user can do nothing about. It is filtered here, in the example scripts, and nowhere else.
warnings.filterwarnings(
    "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
)

PAD = "<pad>"  # id 0: padding only


def stdlib_sources(max_files: int | None = None) -> list[str]:
    """The standard library's ``.py`` files (no tests, no site-packages), in path order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "test", "tests", "idle_test", "__pycache__"}
    files = sorted(p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts))
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in files[:max_files]]
    return [t for t in texts if t]


def default_cache() -> Path:
    """``$DATAMODULES_CACHE/examples/train_lm``, else ``~/.cache/datamodules/examples/train_lm``."""
    root = os.environ.get("DATAMODULES_CACHE") or Path.home() / ".cache" / "datamodules"
    return Path(root) / "examples" / "train_lm"


def write_shards(texts: Sequence[str], folder: Path, shards: int = 8) -> str:
    """The corpus as JSONL shards (one file's text a line), written once; returns their glob."""
    if not (folder / "done").exists():
        folder.mkdir(parents=True, exist_ok=True)
        for k in range(shards):
            lines = "".join(json.dumps({"text": t}) + "\n" for t in texts[k::shards])
            (folder / f"part-{k:02d}.jsonl").write_text(lines)
        (folder / "done").touch()
    return str(folder / "part-*.jsonl")


def bpe_tokenizer(texts: Sequence[str], vocab: int, path: Path) -> Any:
    """A byte-level BPE of ``vocab`` ids trained on ``texts`` (``<pad>`` = 0), saved at
    ``path`` and loaded from there by later runs."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if path.exists():
        return Tokenizer.from_file(str(path))
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=[PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return tokenizer


def chunks(texts: Sequence[str], size: int) -> list[str]:
    """Each text cut into pieces of at most ``size`` characters (for the bucketing baseline)."""
    return [t[i : i + size] for t in texts for i in range(0, len(t), size)]


def document_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """Bool (B, 1, L, L): a token sees the earlier tokens of its own document only.

    Padding (document -1) sees earlier padding of its row, so no query row is empty.
    """
    length = document_ids.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=document_ids.device).tril()
    same = document_ids[:, :, None] == document_ids[:, None, :]
    return (same & causal)[:, None]


def lm_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Packed batches pass through; padded ones get the packed keys (one document per row)."""
    if "document_ids" in batch:
        return batch
    mask = batch["attention_mask"].bool()
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    labels = torch.where(mask, batch["input_ids"], -100)
    labels[:, 0] = -100
    return {
        "input_ids": batch["input_ids"],
        "position_ids": positions,
        "document_ids": torch.where(mask, 0, -1),
        "labels": labels,
        "attention_mask": batch["attention_mask"],
    }


def rotate(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of ``x`` (B, H, L, D) at ``positions`` (B, L)."""
    half = x.shape[-1] // 2
    freqs = 10000 ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = positions[:, None, :, None].float() * freqs
    cos, sin = angles.cos(), angles.sin()
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class Block(nn.Module):
    """Pre-norm transformer block: masked self-attention (SDPA) and an MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, length, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, length, 3, self.heads, -1).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        q, k = rotate(q, positions), rotate(k, positions)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.out(y.transpose(1, 2).reshape(b, length, dim))
        return x + self.mlp(self.norm2(x))


class TinyLM(pl.LightningModule):
    """A small causal transformer; attention stays within each document.

    Args:
        vocab: Token ids (the tokenizer's vocabulary size).
        dim: Model width.
        layers: Transformer blocks.
        heads: Attention heads.
        lr: AdamW learning rate.
    """

    def __init__(
        self, vocab: int = 257, dim: int = 128, layers: int = 2, heads: int = 4, lr: float = 2e-3
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        self.real_tokens = 0

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, document_ids: torch.Tensor
    ) -> torch.Tensor:
        """Logits (B, L, vocab) of the next token at every position."""
        mask = document_mask(document_ids)
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x, position_ids, mask)
        return self.head(self.norm(x))

    def _loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
        batch = lm_inputs(batch)
        logits = self(batch["input_ids"], batch["position_ids"], batch["document_ids"])
        targets = batch["labels"][:, 1:]  # the model shifts (Hugging Face's convention)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, self.vocab), targets.reshape(-1))
        return loss, int((targets != -100).sum())

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        loss, count = self._loss(batch)
        self.real_tokens += int(batch["attention_mask"].sum())
        self.log("train_loss", loss, prog_bar=True, batch_size=count)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        loss, count = self._loss(batch)
        self.log("val_loss", loss, batch_size=count)  # averaged over predicted tokens

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.01)


def make_datamodule(
    shards: str, texts: list[str], tokenizer: Any, args: argparse.Namespace
) -> TextDataModule:
    """Packed rows from the token store (``--batching pack``) or padded length buckets of
    chunks (``bucket``)."""
    common: dict[str, Any] = {
        "tokenizer": tokenizer,
        "val_split": 0.1,
        "batch_size": args.batch_size,
        "num_workers": args.workers,
    }
    if args.batching == "pack":
        return TextDataModule(
            train_file=shards,
            token_cache=args.cache / "tokens",
            packing=True,
            seq_length=args.seq_length,
            pack_mode="split",
            **common,
        )
    # The baseline: the same files, split by file the same way, cut into chunks of tokens.
    split = TextDataModule(texts, **common)
    split.setup("fit")
    parts = {s: [texts[i] for i in split.split_indices[s].tolist()] for s in ("train", "val")}
    train, val = (
        chunks(parts["train"], args.seq_length * 3),
        chunks(parts["val"], args.seq_length * 3),
    )
    splits = {"train": list(range(len(train))), "val": list(range(len(train), len(train + val)))}
    common["val_split"] = 0
    return TextDataModule(train + val, splits=splits, max_length=args.seq_length, **common)


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Trains, validates, prints and returns the figures (val_loss, tokens_per_s, steps)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batching", choices=("pack", "bucket"), default="pack")
    parser.add_argument("--seq-length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--max-minutes", type=float, default=3.0)
    parser.add_argument("--max-steps", type=int, default=-1)
    parser.add_argument("--max-files", type=int, default=None)
    parser.add_argument("--val-batches", type=int, default=100)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--cache", type=Path, default=None, help="shards, tokenizer, store")
    args = parser.parse_args(argv)
    pl.seed_everything(0, verbose=False)
    args.cache = (args.cache or default_cache()) / f"files-{args.max_files or 'all'}"
    texts = stdlib_sources(args.max_files)
    shards = write_shards(texts, args.cache / "shards")
    tokenizer = bpe_tokenizer(texts, args.vocab, args.cache / f"bpe-{args.vocab}.json")
    dm = make_datamodule(shards, texts, tokenizer, args)
    start = time.perf_counter()
    dm.setup("fit")
    setup_seconds = time.perf_counter() - start
    where = "in memory"
    if hasattr(dm.dataset, "built"):  # a token store
        done = "tokenized into" if dm.dataset.built else "mapped"
        where = f"{done} the token store {dm.dataset.path}"
    print(
        f"{len(texts)} stdlib files, {sum(map(len, texts)) / 1e6:.1f} M characters, "
        f"{dm.vocab_size}-id BPE; setup {setup_seconds:.2f} s ({where}); "
        f"batching={args.batching}, {len(dm.train_dataloader())} train batches per epoch"
    )
    model = TinyLM(vocab=dm.vocab_size, dim=args.dim, layers=args.layers)
    trainer = pl.Trainer(
        max_time={"seconds": int(args.max_minutes * 60)},
        max_steps=args.max_steps,
        max_epochs=-1 if args.max_steps < 0 else None,
        limit_val_batches=0,  # validation once, after the timed training
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    start = time.perf_counter()
    trainer.fit(model, datamodule=dm)
    seconds = time.perf_counter() - start
    trainer.limit_val_batches = args.val_batches
    (result,) = pl.Trainer(
        limit_val_batches=args.val_batches,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    ).validate(model, datamodule=dm, verbose=False)
    figures = {
        "val_loss": float(result["val_loss"]),
        "tokens_per_s": model.real_tokens / seconds,
        "steps": float(trainer.global_step),
        "seconds": seconds,
        "setup_seconds": setup_seconds,
    }
    print(
        f"val loss {figures['val_loss']:.3f} nats/token ({figures['val_loss'] / math.log(2):.2f} "
        f"bits) after {trainer.global_step} steps in {seconds:.0f} s; "
        f"{figures['tokens_per_s']:,.0f} real tokens/s ({args.batching})"
    )
    return figures


if __name__ == "__main__":
    main()
