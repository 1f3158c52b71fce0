"""The token store under real DDP: 2 processes on one machine build it once, packed batches
cover every token exactly once and evenly, and a checkpoint resumes on 3 ranks (elastic),
mapping the store without tokenizing anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from datamodules import TextDataModule
from tests.datamodules.contract import ContractCase, run_ddp
from tests.datamodules.text.store_data import CountingTokenizer, bpe, corpus, write_jsonl
from tests.datamodules.text.test_packing import assert_resumed_once, assert_two_ranks_cover_once


def token_ids(batch: dict[str, Any]) -> list[int]:
    real = batch["document_ids"] >= 0
    return (batch["document_ids"][real] * 1000 + batch["position_ids"][real]).tolist()


def ddp_store(root: str) -> tuple[TextDataModule, Any]:
    """Factory for tests/ddp_runner.py: JSONL shards through one token store in ``root``; every
    ``encode_batch`` call of every process is logged to ``root/calls.log``."""
    base = Path(root)
    tokenizer = CountingTokenizer(
        Tokenizer.from_file(str(base / "tokenizer.json")), str(base / "calls.log")
    )
    dm = TextDataModule(
        train_file=str(base / "data" / "*.jsonl"),
        tokenizer=tokenizer,
        token_cache=str(base / "cache"),
        tokenize_workers=0,
        packing=True,
        seq_length=48,
        batch_size=2,
        val_split=0.2,
        num_workers=0,
    )
    return dm, token_ids


def expected(dm: TextDataModule, split: str) -> list[int]:
    lengths = dm.dataset.encoded.lengths_np[dm.split_indices[split].numpy()].tolist()
    return sorted(d * 1000 + p for d, n in enumerate(lengths) for p in range(n))


def logged_documents(root: Path) -> int:
    log = root / "calls.log"
    return sum(int(n) for n in log.read_text().split()) if log.exists() else 0


def test_two_ranks_build_once_cover_evenly_and_resume_on_three(tmp_path: Path) -> None:
    texts = corpus(90)
    (tmp_path / "data").mkdir()
    for k in range(3):
        write_jsonl(tmp_path / "data" / f"part-{k}.jsonl", texts[k::3])
    bpe(corpus(400)).save(str(tmp_path / "tokenizer.json"))
    case = ContractCase(
        make=lambda **_: ddp_store(str(tmp_path))[0],
        batch_ids=token_ids,
        num_samples=len(texts),
        ddp_factory="tests.datamodules.text.test_store_ddp:ddp_store",
        ddp_kwargs={"root": str(tmp_path)},
    )
    ckpts = tmp_path / "ckpts"
    first = run_ddp(case, tmp_path / "two", epochs=1, extra=("--ckpt-dir", str(ckpts)))
    # Built once: one store, written by one of the two ranks, every document tokenized once.
    (store,) = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    meta = json.loads((store / "meta.json").read_text())
    assert meta["built_by"]["pid"] in {r["pid"] for r in first}
    assert logged_documents(tmp_path) == len(texts)
    dm, _ = ddp_store(str(tmp_path))
    dm.setup("fit")
    assert logged_documents(tmp_path) == len(texts)  # this process maps it too
    train = expected(dm, "train")
    per_rank = assert_two_ranks_cover_once(first, train, expected(dm, "val"))
    # Elastic: the checkpoint after 2 steps on 2 ranks resumes on 3, on the same store.
    step = 2
    seen = [i for batches in per_rank for b in batches[:step] for i in b]
    resumed = run_ddp(
        case,
        tmp_path / "three",
        epochs=2,
        devices=3,
        extra=("--resume", str(ckpts / f"epoch=0-step={step}.ckpt")),
    )
    assert_resumed_once(seen, resumed, train)
    assert logged_documents(tmp_path) == len(texts)  # the resumed run tokenized nothing
