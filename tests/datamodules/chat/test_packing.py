"""ChatDataModule with packing=True: whole conversations in rows, labels masked, every
conversation once an epoch; overlong conversations dropped, cut or refused, never silently."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from datamodules import ChatDataModule
from tests.datamodules.chat.chat_data import chat_tokenizer
from tests.datamodules.chat.test_datamodule import _lookup, expected_labels, numbered

KEYS = {"input_ids", "position_ids", "document_ids", "labels", "attention_mask", "cu_seqlens"}


def segments(batch: dict[str, Any]) -> list[tuple[list[int], list[int]]]:
    """Each packed conversation of a batch as ``(ids, labels)``: rows cut where the
    position ids restart, padding left out."""
    out = []
    for ids, labels, positions, mask in zip(
        batch["input_ids"], batch["labels"], batch["position_ids"], batch["attention_mask"],
        strict=True,
    ):  # fmt: skip
        real = mask.bool()
        ids, labels, positions = ids[real], labels[real], positions[real]
        starts = torch.nonzero(positions == 0).flatten().tolist() + [len(ids)]
        for a, b in zip(starts, starts[1:], strict=False):
            assert positions[a:b].tolist() == list(range(b - a))  # restarting at each one
            out.append((ids[a:b].tolist(), labels[a:b].tolist()))
    return out


def packed(**kwargs: Any) -> ChatDataModule:
    options = {"val_split": 0, "batch_size": 3, "tokenize_workers": 0, "seq_length": 128}
    return ChatDataModule(
        numbered(), tokenizer=chat_tokenizer(), packing=True, **{**options, **kwargs}
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_every_conversation_whole_once_an_epoch_with_its_labels(workers: int) -> None:
    tokenizer, lookup, records = chat_tokenizer(), _lookup(), numbered()
    dm = packed(num_workers=workers)
    loader = dm.train_dataloader()
    epochs = []
    for _ in range(2):
        seen = []
        for batch in loader:
            assert set(batch) >= KEYS and batch["input_ids"].shape[1] == 128
            for ids, labels in segments(batch):
                i = lookup[tuple(ids)]  # whole: exactly one conversation's rendering
                want = expected_labels(tokenizer, records[i])
                assert labels == [-100] + want[1:]  # -100 at its first token
                seen.append(i)
        assert sorted(seen) == list(range(len(records)))
        epochs.append(seen)
    assert epochs[0] != epochs[1]  # reshuffled
    reference = [
        [lookup[tuple(ids)] for ids, _ in segments(b)]
        for b in packed(num_workers=0).train_dataloader()
    ]
    assert [i for b in reference for i in b] == epochs[0]  # the same batches with 0 or 2 workers
    fill = dm.planner("train").fill()
    assert 0.8 < fill <= 1.0 and f"real tokens {fill:.4f}" in dm.summary()


def test_overlong_conversations_are_dropped_and_counted_with_one_warning() -> None:
    lengths = [len(ids) for ids in _lookup()]
    limit = sorted(lengths)[len(lengths) // 2]  # about half are over it
    over = sum(n > limit for n in lengths)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dm = packed(seq_length=limit)
        dm.setup("fit")
        dm.setup("fit")
    said = [str(w.message) for w in caught if "over seq_length" in str(w.message)]
    assert said == [
        f"ChatDataModule: {over} conversations over seq_length={limit} dropped (overlong='drop')"
    ]
    assert len(dm.split_indices["train"]) == len(lengths) - over
    assert f"overlong: {over} conversations over seq_length={limit} dropped" in dm.summary()
    seen = [lookup for b in dm.train_dataloader() for lookup in segments(b)]
    assert all(len(ids) <= limit for ids, _ in seen) and len(seen) == len(lengths) - over


def test_overlong_truncate_cuts_to_the_limit_and_error_names_the_record() -> None:
    lengths = [len(ids) for ids in _lookup()]
    limit = sorted(lengths)[len(lengths) // 2]
    over = [i for i, n in enumerate(lengths) if n > limit]
    cut = sum(lengths[i] - limit for i in over)
    dm = ChatDataModule(
        numbered(), tokenizer=chat_tokenizer(), max_length=limit, overlong="truncate",
        val_split=0, batch_size=4, shuffle=False, bucket=False, tokenize_workers=0, num_workers=0,
    )  # fmt: skip
    with pytest.warns(UserWarning, match=f"{len(over)} conversations over max_length={limit}"):
        dm.setup("fit")
    assert f"cut to the limit ({cut:,} tokens cut)" in dm.summary()
    batches = list(dm.train_dataloader())
    got = torch.cat([b["attention_mask"].sum(1) for b in batches]).tolist()
    assert got == [min(n, limit) for n in lengths]
    first = over[0]
    said = rf"<conversations>, row {first + 1}: the conversation has {lengths[first]} tokens, "
    with pytest.raises(ValueError, match=said + rf"over max_length={limit}, and overlong='error'"):
        ChatDataModule(
            numbered(), tokenizer=chat_tokenizer(), max_length=limit, overlong="error",
            tokenize_workers=0,
        ).setup("fit")  # fmt: skip
