"""Image-caption pairs: ImageTextDataModule against open_clip's own webdataset pipeline and against
StreamingDataModule with a tokenizing transform, on the same tars and the same tokenizer.

Run: ``python benchmarks/bench_image_text.py`` (a few minutes on 2 cores; writes the shards
under the temp directory on first use).

Data: 2,000 photos (500x375 crops, at random places and mirrored, of scikit-learn's two bundled
sample photos; JPEG quality 90), each with a caption, in 20 tars written by webdataset's
``ShardWriter`` (``jpg`` + ``txt`` + ``json``, img2dataset's layout). One Hugging Face tokenizer
on every side: a BPE trained on the captions, wrapped in ``PreTrainedTokenizerFast``, padded
to 77 tokens. Every loader: batch 64, 2 workers, images/s over whole passes (persistent
workers, after one warm-up pass), medians over ``--repeats``:

* **Evaluation transform, 224** (the bar):

  * open_clip: ``open_clip_train.data.get_wds_dataset(args, preprocess, is_train=False,
    tokenizer=...)`` with ``open_clip.image_transform(224, is_train=False)`` (PIL decode,
    Resize + CenterCrop, ToTensor + Normalize in the workers);
  * ours: ``ImageTextDataModule(val_files=..., tokenizer=tok)``'s validation loader (uint8
    out of the workers; the float conversion and normalisation counted here, on the CPU, as
    ``on_after_batch_transfer`` does it on the device);
  * ``StreamingDataModule(image_key="jpg", label_key=None, transform=tokenize)``: the stream's
    image path with the caption tokenized in a record transform (the user's way before).

* **Training loaders** with each side's own default train transform: open_clip's
  ``get_wds_dataset(is_train=True)`` with ``image_transform(224, is_train=True)``
  (RandomResizedCrop(224, scale 0.9-1.0) + ToTensor + Normalize; its shard and sample
  shuffles; an epoch of 2,000 rounded to whole batches per worker), against
  ``ImageTextDataModule``'s train loader (RandomResizedCrop(224) + flip, shuffle buffer 1,000).
  open_clip's train path reads the tars with its own ``tarfile_to_samples_nothrow``, which
  fails under webdataset 1.0 (``KeyError: 'fname'``); webdataset's ``tarfile_to_samples``
  stands in for it here (the rest is open_clip's pipeline).
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

logging.getLogger("datamodules").setLevel(logging.WARNING)
warnings.filterwarnings("ignore")

from datamodules import ImageTextDataModule, StreamingDataModule  # noqa: E402

SHARDS, PER_SHARD, BATCH, WORKERS = 20, 100, 64, 2
WORDS = ["a", "photo", "of", "the", "temple", "flower", "garden", "red", "old", "close"]


def write_pairs(root: Path, n: int) -> str:
    """``n`` photo crops with captions in ``SHARDS`` tars (once); the brace pattern of them."""
    import webdataset as wds
    from PIL import Image
    from sklearn.datasets import load_sample_images

    pattern = str(root / f"pairs-{{000000..{SHARDS - 1:06d}}}.tar")
    if (root / f"pairs-{SHARDS - 1:06d}.tar").exists():
        return pattern
    root.mkdir(parents=True, exist_ok=True)
    photos = load_sample_images().images  # two 427x640 photos
    rng = np.random.default_rng(0)
    words = WORDS
    per_shard = max(1, n // SHARDS)
    with wds.ShardWriter(str(root / "pairs-%06d.tar"), maxcount=per_shard, verbose=0) as sink:
        for i in range(n):
            photo = photos[i % 2]
            top, left = rng.integers(0, photo.shape[0] - 375 + 1), rng.integers(0, 640 - 500 + 1)
            crop = photo[top : top + 375, left : left + 500]
            crop = crop[:, ::-1] if i % 4 >= 2 else crop
            buffer = io.BytesIO()
            Image.fromarray(np.ascontiguousarray(crop)).save(buffer, format="JPEG", quality=90)
            caption = " ".join(rng.choice(words, size=int(rng.integers(5, 15))))
            sink.write({"__key__": f"{i:06d}", "jpg": buffer.getvalue(), "txt": caption,
                        "json": {"id": i}})  # fmt: skip
    return pattern


def hf_tokenizer() -> Any:
    """A BPE trained on words of the captions, as a transformers tokenizer."""
    import tokenizers
    from transformers import PreTrainedTokenizerFast

    model = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    model.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=200, special_tokens=["<pad>", "<unk>"])
    model.train_from_iterator([" ".join(WORDS[k:] + WORDS[:k]) for k in range(10)], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=model, pad_token="<pad>", unk_token="<unk>")


class PaddedIds:
    """open_clip's tokenizer interface over the HF tokenizer: texts -> (N, 77) ids."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok

    def __call__(self, texts: Any) -> torch.Tensor:
        texts = [texts] if isinstance(texts, str) else list(texts)
        out = self.tok(texts, padding="max_length", truncation=True, max_length=77,
                       return_tensors="pt")  # fmt: skip
        return out["input_ids"]


class Tokenize:
    """StreamingDataModule's record transform: the caption to padded ids."""

    def __init__(self, tok: Any) -> None:
        self.ids = PaddedIds(tok)

    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        return {"jpg": record["jpg"], "input_ids": self.ids(record["txt"])[0]}


def images_per_second(loader: Any, repeats: int, convert: Any = None) -> float:
    """Median images/s of whole passes, after one warm-up pass."""
    rates = []
    for k in range(repeats + 1):
        start, count = time.perf_counter(), 0
        for batch in loader:
            images = batch["image"] if isinstance(batch, dict) else batch[0]
            if convert is not None:
                images = convert(batch)["image"]
            count += len(images)
        if k:
            rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates)


def open_clip_loader(pattern: str, n: int, tok: Any, train: bool) -> Any:
    import open_clip_train.data as open_clip_data
    import webdataset as wds
    from open_clip import image_transform
    from open_clip_train.data import get_wds_dataset

    # open_clip's train path reads tars with its own tarfile_to_samples_nothrow, written for
    # webdataset < 1.0 (its samples lack "fname" under 1.0: KeyError); webdataset's own
    # tarfile_to_samples takes its place, the rest of the pipeline is open_clip's.
    open_clip_data.tarfile_to_samples_nothrow = wds.tarfile_to_samples(
        handler=wds.warn_and_continue
    )

    args = types.SimpleNamespace(
        train_data=pattern, val_data=pattern, train_num_samples=n, val_num_samples=n,
        batch_size=BATCH, workers=WORKERS, world_size=1, seed=0, dataset_resampled=False,
        train_data_upsampling_factors=None,
    )  # fmt: skip
    preprocess = image_transform(224, is_train=train)
    return get_wds_dataset(args, preprocess, is_train=train, tokenizer=PaddedIds(tok)).dataloader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "bench-pairs")
    parser.add_argument("--n", type=int, default=SHARDS * PER_SHARD)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    pattern = write_pairs(args.root / f"n{args.n}", args.n)
    tok = hf_tokenizer()
    common = {"batch_size": BATCH, "num_workers": WORKERS}
    ours = ImageTextDataModule(pattern, val_files=pattern, tokenizer=tok, **common)
    stream = StreamingDataModule(pattern, val_files=pattern, image_key="jpg", label_key=None,
                                 transform=Tokenize(tok), **common)  # fmt: skip
    eval_rates = {
        "open_clip get_wds_dataset": images_per_second(
            open_clip_loader(pattern, args.n, tok, train=False), args.repeats
        ),
        "ImageTextDataModule": images_per_second(
            ours.val_dataloader(), args.repeats, lambda b: ours.on_after_batch_transfer(b, 0)
        ),
        "StreamingDataModule + transform": images_per_second(
            stream.val_dataloader(), args.repeats, lambda b: stream.on_after_batch_transfer(b, 0)
        ),
    }
    train_rates = {
        "open_clip get_wds_dataset": images_per_second(
            open_clip_loader(pattern, args.n, tok, train=True), args.repeats
        ),
        "ImageTextDataModule": images_per_second(
            ours.train_dataloader(), args.repeats, lambda b: ours.on_after_batch_transfer(b, 0)
        ),
    }
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"{args.n} pairs in {SHARDS} tars, batch {BATCH}, {WORKERS} workers, median of "
        f"{args.repeats}; machine: {platform.machine()}, {cpus} CPUs, Python "
        f"{platform.python_version()}, torch {torch.__version__}"
    )
    titles = ("evaluation transform, 224", "training loaders, each side's default train transform")
    for title, rates in zip(titles, (eval_rates, train_rates), strict=True):
        base = rates["open_clip get_wds_dataset"]
        print(f"\n{title}\n{'loader':<34}{'images/s':>10}{'vs open_clip':>14}")
        for name, rate in rates.items():
            print(f"{name:<34}{rate:>10,.0f}{rate / base:>13.2f}x")


if __name__ == "__main__":
    main()
