"""eos_id= with texts or files: each document that does not already end with the end-of-text
id gets it appended (Megatron's --append-eod), in memory and in the token store alike."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from datamodules import TextDataModule
from tests.datamodules.text.store_data import bpe, corpus

EOS = ord("|")
TEXTS = ["ab", "cd|", "e"]  # the second already ends with the end-of-text id


def char_ids(text: str) -> list[int]:
    """A tokenizer: one id per character, its code point."""
    return [ord(c) for c in text]


def first_batch(**kwargs: Any) -> dict[str, list]:
    options = {"tokenizer": char_ids, "packing": True, "seq_length": 4, "batch_size": 2}
    options.update(val_split=0, shuffle=False, num_workers=0, **kwargs)
    dm = TextDataModule(**options)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    return {k: batch[k].tolist() for k in ("input_ids", "document_ids", "position_ids")}


def stores(cache: Path) -> list[str]:
    return [name for name in os.listdir(cache) if not name.endswith(".lock")]


WITH_EOS = {
    "input_ids": [[97, 98, EOS, 99], [100, EOS, 101, EOS]],
    "document_ids": [[0, 0, 0, 1], [1, 1, 2, 2]],
    "position_ids": [[0, 1, 2, 0], [1, 2, 0, 1]],
}


def test_texts_in_memory_get_one_eos_per_document() -> None:
    assert first_batch(texts=TEXTS, eos_id=EOS) == WITH_EOS
    assert first_batch(texts=TEXTS)["input_ids"] == [[97, 98, 99, 100], [EOS, 101, 0, 0]]


@pytest.mark.parametrize("workers", [0, 1])
def test_files_through_the_token_store_get_it_and_another_store(tmp_path, workers) -> None:
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    cache = tmp_path / "tokens"
    files = {"train_file": path, "token_cache": cache, "tokenize_workers": workers}
    assert first_batch(**files, eos_id=EOS) == WITH_EOS
    assert first_batch(**files)["input_ids"] == [[97, 98, 99, 100], [EOS, 101, 0, 0]]
    assert len(stores(cache)) == 2  # the end-of-text id is part of the store's key
    assert first_batch(**files, eos_id=EOS) == WITH_EOS  # read back from its store
    assert len(stores(cache)) == 2


def test_the_eos_counts_within_max_length() -> None:
    # "abcd|" cut on the right loses its eos (the document does not end there); on the left
    # it keeps it.
    right = first_batch(texts=["abcd", "e"], eos_id=EOS, max_length=3)
    assert right["input_ids"] == [[97, 98, 99, 101], [EOS, 0, 0, 0]]
    left = first_batch(texts=["abcd", "e"], eos_id=EOS, max_length=3, truncation_side="left")
    assert left["input_ids"] == [[99, 100, EOS, 101], [EOS, 0, 0, 0]]


def test_eos_id_needs_a_tokenizer_and_fits_its_vocabulary() -> None:
    with pytest.raises(
        ValueError,
        match=r"^eos_id=5 is not accepted with texts or files and tokenizer='char': use None, "
        r"or a tokenizer of yours \(tokenizer=\)",
    ):
        TextDataModule(TEXTS, eos_id=5)
    tokenizer = bpe(corpus(50), vocab_size=300)
    size = tokenizer.get_vocab_size()
    with pytest.raises(
        ValueError,
        match=rf"^eos_id={size} is not accepted: use an id below the tokenizer's vocabulary "
        rf"size \({size}\)\.$",
    ):
        TextDataModule(TEXTS, tokenizer=tokenizer, eos_id=size)
    with pytest.raises(ValueError, match=r"dtype= describes token_files="):
        TextDataModule(TEXTS, tokenizer=tokenizer, dtype="uint16")
