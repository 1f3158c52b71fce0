"""Train a tiny vision-language model on conversations about digits, and measure its held-out
exact-match accuracy.

The data is scikit-learn's bundled handwritten digits (1,797 real 8x8 scans: nothing is
downloaded), split by scan into train (70 %), val (10 %) and a held-out test set (20 %), each
digit in the same proportions, so that no test image is ever seen in training. Each split's
scans, upscaled to 32x32 PNG, become conversations written once as tar shards by the library's
``write_shards`` (webdataset's layout: members ``0.png``, ``1.png`` and a ``json`` holding
``{"messages": [...]}``):

* one image: ``"<image>Which digit is this?"`` -> ``"7"``, once for every scan;
* two images of different digits: ``"<image><image>Which is larger?"`` -> ``"the first"`` or
  ``"the second"``, ``--pairs`` of them per scan.

The tokenizer is built here: a byte-level BPE trained on the generated texts with Hugging
Face ``tokenizers`` (the chat example's, with ChatML's template), ``<image>`` added as one
special token. ``ImageTextDataModule(messages_key="json", packing=True)`` renders every
conversation once, with the loss on the assistant's answer only, turns each ``<image>`` into
``--image-tokens`` copies of the image token's id and packs whole conversations into rows of
``--seq-length`` tokens, at most ``--max-images`` images per batch; ``pixel_values`` holds the
batch's images in the order their placeholders appear.

The model: a small CNN encodes each image into a grid of ``--image-tokens`` features, an MLP
projects them to the LM's width, and they replace the token embeddings where ``input_ids ==
dm.image_token_id``, in ``pixel_values`` order (Hugging Face LLaVA's way); a small causal
transformer (the language-model example's blocks: rotary positions from ``position_ids``, a
block-diagonal causal mask from ``document_ids``) predicts the next tokens.

Accuracy: an answer counts as right when the argmax of every one of its trained tokens (the
answer, ``<|im_end|>`` and the newline after it) is the right token, each given the right
tokens before it (teacher forcing). Token by token that is exactly what greedy decoding would
produce, so it equals the exact match of greedily decoded answers, computed in one pass over the
held-out test shards. Chance: 0.1 for the digit, 0.5 for the comparison.

Run: ``python examples/train_vlm.py`` (about 50 s on 2 quiet CPU cores; prints the held-out
exact match: 0.983 on the digit and 0.989 on the comparison here, after the default 16 epochs).
``--fast`` trains 7 epochs (22 s; 0.792 and 0.733), for the test; on one thread, as the suite
runs it, 125 s here on 2026-12-05 (0.494 and 0.756), nearly all of it the model's own work.
"""

from __future__ import annotations

import argparse
import io
import math
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datamodules import ImageTextDataModule  # noqa: E402
from datamodules.streaming import write_shards  # noqa: E402
from examples.finetune_chat import chat_tokenizer  # noqa: E402
from examples.train_lm import Block, default_cache, document_mask  # noqa: E402

__all__ = [
    "ImageEncoder",
    "TinyVLM",
    "answer_matches",
    "conversations",
    "main",
    "split_scans",
    "vlm_tokenizer",
    "write_conversations",
]

# Lightning's _pytree calls a torch API that torch deprecates, with a FutureWarning on every fit
# that a user can do nothing about. It is filtered here, in the example scripts, and nowhere else.
warnings.filterwarnings(
    "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
)

IMAGE = "<image>"
WHICH_DIGIT = "Which digit is this?"
WHICH_LARGER = "Which is larger?"
ORDINALS = ("the first", "the second")
SPLITS = {"train": 0.7, "val": 0.1, "test": 0.2}
SIZE = 16  # the digits' 8x8 scans, upscaled


def split_scans(targets: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    """The scans' indices split into train, val and test, each digit in the same proportions."""
    rng = np.random.default_rng(seed)
    parts: dict[str, list[int]] = {name: [] for name in SPLITS}
    for digit in range(10):
        scans = rng.permutation(np.flatnonzero(targets == digit))
        train = int(round(SPLITS["train"] * len(scans)))
        val = int(round(SPLITS["val"] * len(scans)))
        parts["train"] += scans[:train].tolist()
        parts["val"] += scans[train : train + val].tolist()
        parts["test"] += scans[train + val :].tolist()
    return {name: np.array(sorted(p)) for name, p in parts.items()}


def conversations(
    scans: np.ndarray, targets: np.ndarray, pairs: int, seed: int
) -> list[dict[str, Any]]:
    """One ``Which digit is this?`` record per scan and ``pairs`` ``Which is larger?`` records
    per scan (two scans of different digits); each record names its scans (``"scans"``)."""
    rng = np.random.default_rng(seed)
    records = [
        {"scans": [int(i)], "question": WHICH_DIGIT, "answer": str(int(targets[i]))} for i in scans
    ]
    for _ in range(pairs * len(scans)):
        first, second = rng.choice(scans, 2, replace=False)
        while targets[first] == targets[second]:
            second = rng.choice(scans)
        answer = ORDINALS[int(targets[second] > targets[first])]
        records.append(
            {"scans": [int(first), int(second)], "question": WHICH_LARGER, "answer": answer}
        )
    order = rng.permutation(len(records))  # every shard mixes both kinds
    return [records[i] for i in order]


def png(pixels: np.ndarray) -> bytes:
    """A 8x8 scan (values 0-16) as a ``SIZE`` x ``SIZE`` RGB PNG."""
    from PIL import Image

    image = Image.fromarray((pixels * (255 / 16)).astype(np.uint8)).convert("RGB")
    buffer = io.BytesIO()
    image.resize((SIZE, SIZE), Image.Resampling.BILINEAR).save(buffer, format="PNG")
    return buffer.getvalue()


def write_conversations(out: Path, pairs: int) -> dict[str, list[str]]:
    """The digits' conversations as tar shards per split (written once); their paths."""
    from sklearn.datasets import load_digits

    done = out / "done"
    if not done.exists():
        digits = load_digits()
        for k, (split, scans) in enumerate(split_scans(digits.target).items()):
            records = []
            for n, record in enumerate(conversations(scans, digits.target, pairs, seed=k + 1)):
                user = IMAGE * len(record["scans"]) + record["question"]
                shard_record: dict[str, Any] = {
                    "__key__": f"{split}-{n:06d}",
                    "json": {
                        "messages": [
                            {"role": "user", "content": user},
                            {"role": "assistant", "content": record["answer"]},
                        ]
                    },
                }
                for j, scan in enumerate(record["scans"]):
                    shard_record[f"{j}.png"] = png(digits.images[scan])
                records.append(shard_record)
            write_shards(records, out, fmt="tar", max_records=2000, prefix=split)
        done.touch()
    return {split: sorted(str(p) for p in out.glob(f"{split}-*.tar")) for split in SPLITS}


def vlm_tokenizer() -> Any:
    """The chat example's byte-level BPE (ChatML) trained on these texts, ``<image>`` added as
    one special token."""
    texts = [WHICH_DIGIT, WHICH_LARGER, *ORDINALS, *map(str, range(10)), "system user assistant"]
    tokenizer = chat_tokenizer(texts * 10)
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE]})
    return tokenizer


class ImageEncoder(nn.Module):
    """A small CNN: an image -> a ``side`` x ``side`` grid of features, projected by an MLP to
    ``dim`` (``side * side`` image tokens, in row-major order).

    Args:
        dim: The LM's width.
        image_tokens: The tokens per image, a square (1, 4, 9, 16).
    """

    def __init__(self, dim: int, image_tokens: int) -> None:
        super().__init__()
        side = math.isqrt(image_tokens)
        if side * side != image_tokens:
            raise ValueError(f"image_tokens={image_tokens!r}: a square (1, 4, 9, 16) is needed")
        self.cnn = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
            nn.AdaptiveAvgPool2d(side),
        )  # fmt: skip
        # The features enter at the scale of the token embeddings (LayerNorm), or the LM
        # learns to ignore them before they carry anything.
        self.project = nn.Sequential(
            nn.Linear(128, dim), nn.GELU(), nn.Linear(dim, dim), nn.LayerNorm(dim)
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``(N, 3, H, W)`` float -> ``(N, image_tokens, dim)``."""
        return self.project(self.cnn(images).flatten(2).transpose(1, 2))


def packed_keys(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Packed batches pass through; padded ones get ``position_ids`` and ``document_ids``
    (one conversation per row)."""
    if "document_ids" in batch:
        return batch
    mask = batch["attention_mask"].bool()
    rows = torch.arange(mask.shape[0], device=mask.device)[:, None].expand_as(mask)
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    return {**batch, "position_ids": positions, "document_ids": torch.where(mask, rows, -1)}


def answer_matches(
    logits: torch.Tensor, batch: dict[str, torch.Tensor], image_token_id: int, image_tokens: int
) -> list[tuple[int, bool]]:
    """``(images, right)`` for each conversation of a batch that has trained tokens: right when
    the argmax at every trained position is its label (teacher forcing)."""
    predicted = logits[:, :-1].argmax(-1)
    targets, documents = batch["labels"][:, 1:], batch["document_ids"][:, 1:]
    trained = targets != -100
    wrong = trained & (predicted != targets)
    is_image = batch["input_ids"] == image_token_id
    out = []
    for row in range(len(targets)):
        for document in torch.unique(documents[row][trained[row]]).tolist():
            here = documents[row] == document
            images = int(is_image[row][batch["document_ids"][row] == document].sum())
            out.append((images // image_tokens, not bool(wrong[row][here].any())))
    return out


class TinyVLM(pl.LightningModule):
    """A CNN image encoder whose projected features replace the image tokens' embeddings, and a
    small causal transformer over the result.

    Args:
        vocab: The tokenizer's vocabulary size (``dm.vocab_size``).
        image_token_id: The id of the image tokens (``dm.image_token_id``).
        image_tokens: Image tokens per image (a square).
        dim: Model width.
        layers: Transformer blocks.
        heads: Attention heads.
        lr: AdamW learning rate.
    """

    def __init__(
        self,
        vocab: int,
        image_token_id: int,
        image_tokens: int = 4,
        dim: int = 128,
        layers: int = 2,
        heads: int = 4,
        lr: float = 3e-3,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.vocab, self.image_token_id, self.image_tokens = vocab, image_token_id, image_tokens
        self.encoder = ImageEncoder(dim, image_tokens)
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        self.counts: dict[str, dict[int, list[int]]] = {}

    def embed_inputs(self, input_ids: torch.Tensor, pixel_values: torch.Tensor) -> torch.Tensor:
        """The token embeddings, with the image features scattered into the positions where
        ``input_ids == image_token_id``, in ``pixel_values`` order (row by row)."""
        x = self.embed(input_ids)
        where = input_ids == self.image_token_id
        features = self.encoder(pixel_values).reshape(-1, x.shape[-1])
        if int(where.sum()) != len(features):
            raise ValueError(
                f"{int(where.sum())} image-token positions in input_ids, but {len(pixel_values)}"
                f" images x {self.image_tokens} tokens = {len(features)} image features"
            )
        return x.masked_scatter(where[..., None], features.to(x.dtype))

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits ``(B, L, vocab)`` of the next token at every position."""
        batch = packed_keys(batch)
        x = self.embed_inputs(batch["input_ids"], batch["pixel_values"])
        mask = document_mask(batch["document_ids"])
        for block in self.blocks:
            x = block(x, batch["position_ids"], mask)
        return self.head(self.norm(x))

    def _step(self, batch: dict[str, torch.Tensor], split: str) -> torch.Tensor:
        logits = self(batch)
        targets = batch["labels"][:, 1:]  # the model shifts (Hugging Face's convention)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, self.vocab), targets.reshape(-1))
        count = int((targets != -100).sum())
        self.log(f"{split}_loss", loss, batch_size=count, prog_bar=split == "train")
        if split != "train":
            tally = self.counts.setdefault(split, {})
            for images, right in answer_matches(
                logits, packed_keys(batch), self.image_token_id, self.image_tokens
            ):
                seen = tally.setdefault(images, [0, 0])
                seen[0] += right
                seen[1] += 1
        return loss

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        self._step(batch, "test" if self.trainer.testing else "val")

    test_step = validation_step

    def on_validation_epoch_start(self) -> None:
        self.counts["val"] = {}

    def on_test_epoch_start(self) -> None:
        self.counts["test"] = {}

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.01)
        steps = self.trainer.estimated_stepping_batches
        schedule = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=self.hparams.lr, total_steps=max(int(steps), 1), pct_start=0.1
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def exact_match(counts: dict[int, list[int]]) -> dict[str, float]:
    """Accuracy and count per question (one image: the digit; two: the comparison), and overall."""
    digit, larger = counts.get(1, [0, 0]), counts.get(2, [0, 0])
    right, seen = digit[0] + larger[0], digit[1] + larger[1]
    return {
        "digit_acc": digit[0] / max(digit[1], 1),
        "digit_records": digit[1],
        "larger_acc": larger[0] / max(larger[1], 1),
        "larger_records": larger[1],
        "exact_match": right / max(seen, 1),
        "records": seen,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Writes the shards, trains, measures the held-out exact match; prints the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=None, help="shards and the token store")
    parser.add_argument("--pairs", type=int, default=1, help="'Which is larger?' per scan")
    parser.add_argument("--epochs", type=int, default=16)
    parser.add_argument("--image-tokens", type=int, default=4)
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--max-images", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=8, help="rows per batch")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--fast", action="store_true", help="a short run (the test's): 7 epochs")
    args = parser.parse_args(argv)
    if args.fast:
        args.epochs = 7
    pl.seed_everything(0, verbose=False)
    start = time.perf_counter()
    cache = args.cache or default_cache().parent / "train_vlm"
    shards = write_conversations(cache / f"digit-conversations-{args.pairs}-{SIZE}px", args.pairs)
    tokenizer = vlm_tokenizer()
    dm = ImageTextDataModule(
        shards["train"],
        val_files=shards["val"],
        test_files=shards["test"],
        messages_key="json",
        image_key="0.png;1.png",
        tokenizer=tokenizer,
        image_token=IMAGE,
        image_tokens=args.image_tokens,
        packing=True,
        seq_length=args.seq_length,
        max_images=args.max_images,
        overlong="error",  # every conversation fits: none may be lost
        image_size=SIZE,
        # Digits are small and centred: no crops, no flips, the image as it is.
        train_transforms=nn.Identity(),
        eval_transforms=nn.Identity(),
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
        batch_size=args.batch_size,
        num_workers=args.workers,
        token_cache=cache / "tokens",
    )
    dm.setup("fit")  # (its summary is logged once, on rank 0, as training starts)
    model = TinyVLM(
        vocab=dm.vocab_size, image_token_id=dm.image_token_id, image_tokens=args.image_tokens,
        dim=args.dim, layers=args.layers, lr=args.lr,
    )  # fmt: skip
    trainer = pl.Trainer(
        max_epochs=args.epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, datamodule=dm)
    val = exact_match(model.counts["val"])
    trainer.test(model, datamodule=dm, verbose=False)
    figures = {**exact_match(model.counts["test"]), "val_exact_match": val["exact_match"]}
    figures["steps"] = float(trainer.global_step)
    figures["seconds"] = time.perf_counter() - start
    print(
        f"held-out exact match: {figures['exact_match']:.3f} on {figures['records']} "
        f"conversations about {figures['digit_records']} never-seen scans; "
        f"'{WHICH_DIGIT}' {figures['digit_acc']:.3f} of {figures['digit_records']} (chance 0.1), "
        f"'{WHICH_LARGER}' {figures['larger_acc']:.3f} of {figures['larger_records']} "
        f"(chance 0.5); val {val['exact_match']:.3f}; {trainer.global_step} steps, "
        f"{figures['seconds']:.0f} s in all"
    )
    return figures


if __name__ == "__main__":
    main()
