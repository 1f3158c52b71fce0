"""Blends in TextDataModule: a Megatron prefix and a flat token file as weighted Sources, with a
schedule: exact quotas per epoch (packed rows, or documents) with 0 and 2 workers, rows that
never mix sources, a source's pass completed before any of its tokens repeats, DDP-even shares,
exact and elastic resume through the Trainer, per-source validation loaders, quotas() and the
summary (a changed mix on resume: test_blend_resume.py)."""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from datamodules import Source, TextDataModule
from tests.datamodules.contract import assert_resume_mid_epoch_is_exact, quiet_trainer
from tests.recording import RecordingModel

WEB, CODE = 1000, 3000  # web tokens are 1000..1999, code tokens 3000..3999


def docs_of(base: int, n: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [
        (base + rng.integers(0, 1000, size=int(rng.integers(3, 40)))).tolist() for _ in range(n)
    ]


def write_megatron(prefix: Path, docs: list[list[int]]) -> None:
    """A Megatron-LM indexed dataset (uint16), as megatron-core's builder writes it."""
    lengths = np.array([len(d) for d in docs], dtype=np.int32)
    pointers = np.concatenate([[0], np.cumsum(lengths[:-1]) * 2]).astype(np.int64)
    Path(f"{prefix}.bin").write_bytes(np.concatenate(docs).astype(np.uint16).tobytes())
    header = b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8)
    header += struct.pack("<Q", len(docs)) + struct.pack("<Q", len(docs) + 1)
    body = (
        lengths.tobytes() + pointers.tobytes() + np.arange(len(docs) + 1, dtype=np.int64).tobytes()
    )
    Path(f"{prefix}.idx").write_bytes(header + body)


def write_flat(path: Path, docs: list[list[int]]) -> None:
    """A nanoGPT-style flat token file: documents ended by eos 0."""
    flat = [t for d in docs for t in [*d, 0]]
    path.write_bytes(np.array(flat, dtype=np.uint16).tobytes())


@pytest.fixture
def corpora(tmp_path: Path) -> dict[str, Any]:
    web, code = docs_of(WEB, 60, 1), docs_of(CODE, 30, 2)
    write_megatron(tmp_path / "web", web)
    write_flat(tmp_path / "code.bin", code)
    # a flat file's documents keep their eos
    return {"web": str(tmp_path / "web"), "code": str(tmp_path / "code.bin"),
            "docs": {"web": web, "code": [[*d, 0] for d in code]}}  # fmt: skip


def blend(corpora: dict[str, Any], web_weight: Any = 3, **kwargs: Any) -> TextDataModule:
    options = {"eos_id": 0, "vocab_size": 4000, "val_split": 0, "num_workers": 0,
               "packing": True, "seq_length": 32, "batch_size": 4, **kwargs}  # fmt: skip
    return TextDataModule(
        token_files=[
            Source(corpora["web"], weight=web_weight, name="web"),
            Source(corpora["code"], weight=1, name="code"),
        ],
        **options,
    )


def source_of_row(row: torch.Tensor, mask: torch.Tensor) -> str:
    real = row[mask.bool()]
    kinds = {"web" if int(t) < 2000 else "code" for t in real if int(t)}  # 0: code's eos
    assert len(kinds) == 1, f"a row mixes sources: {kinds}"  # each source packs its own rows
    return kinds.pop()


def rows_by_source(batches: list[dict[str, torch.Tensor]]) -> Counter[str]:
    return Counter(
        source_of_row(r, m)
        for b in batches
        for r, m in zip(b["input_ids"], b["attention_mask"], strict=True)
    )


def tokens_of(batches: list[dict[str, torch.Tensor]], name: str) -> Counter[tuple[int, int]]:
    """(document, position) of every real token of source ``name``."""
    out: Counter[tuple[int, int]] = Counter()
    for b in batches:
        for ids, docs, pos, mask in zip(b["input_ids"], b["document_ids"], b["position_ids"],
                                        b["attention_mask"], strict=True):  # fmt: skip
            if source_of_row(ids, mask) == name:
                out.update(zip(docs[mask.bool()].tolist(), pos[mask.bool()].tolist(), strict=True))
    return out


def assert_balanced(seen: Counter[tuple[int, int]], docs: list[list[int]], first: int) -> None:
    """Every token of a source drawn ``k`` or ``k + 1`` times: none twice before all once."""
    counts = {seen[(first + d, p)] for d, doc in enumerate(docs) for p in range(len(doc))}
    assert max(counts) - min(counts) <= 1, counts


@pytest.mark.parametrize("workers", [0, 2])
def test_packed_quotas_follow_the_schedule_and_passes_complete(corpora, workers) -> None:
    dm = blend(corpora, web_weight=[[0, 3], [1, 1]], num_workers=workers, epoch_size=48)
    assert [dm.quotas(e) for e in range(3)] == [
        {"web": 36, "code": 12}, {"web": 24, "code": 24}, {"web": 24, "code": 24},
    ]  # fmt: skip
    loader = dm.train_dataloader()
    web: Counter[tuple[int, int]] = Counter()
    code: Counter[tuple[int, int]] = Counter()
    for epoch in range(3):
        loader.sampler.set_epoch(epoch)
        batches = list(loader)
        assert rows_by_source(batches) == dm.quotas(epoch)
        web += tokens_of(batches, "web")
        code += tokens_of(batches, "code")
        assert_balanced(web, corpora["docs"]["web"], 0)
        assert_balanced(code, corpora["docs"]["code"], 60)


@pytest.mark.parametrize("packing", [True, False])
def test_sources_of_other_widths_share_a_batch(tmp_path, packing) -> None:
    """A uint16 and a uint32 token file (ids above 65,535) in one blend: the batches that hold
    rows of both read each row's ids from its own file, every token once an epoch."""
    narrow = [(1 + np.arange(5) + 10 * d).tolist() for d in range(24)]  # 9 rows of 16
    wide = [(70_000 + np.arange(7) + 10 * d).tolist() for d in range(18)]  # 9 rows of 16
    np.save(tmp_path / "narrow.npy", np.array([t for d in narrow for t in [*d, 0]], np.uint16))
    np.save(tmp_path / "wide.npy", np.array([t for d in wide for t in [*d, 0]], np.uint32))
    # Weights that give each source all its units: 9 rows each, or 24 and 18 documents.
    options = {"packing": True, "seq_length": 16} if packing else {"bucket": False}
    weights = (1, 1) if packing else (4, 3)
    dm = TextDataModule(
        token_files=[Source(str(tmp_path / "narrow.npy"), weight=weights[0], name="narrow"),
                     Source(str(tmp_path / "wide.npy"), weight=weights[1], name="wide")],
        eos_id=0, vocab_size=80_000, val_split=0, num_workers=0, batch_size=4, **options,
    )  # fmt: skip
    mixed = 0
    seen: Counter[int] = Counter()
    for b in dm.train_dataloader():
        ids = b["input_ids"][b["attention_mask"].bool()]
        mixed += bool((ids >= 70_000).any() and ((ids > 0) & (ids < 70_000)).any())
        seen.update(ids.tolist())
    assert mixed > 0  # some batch holds rows of both files
    assert seen == Counter(t for d in narrow + wide for t in [*d, 0])


def test_document_quotas_without_packing_ddp_even(corpora) -> None:
    dm = blend(corpora, packing=False, seq_length=None, bucket=False, epoch_size=30)
    assert dm.quotas(0) == {"web": 23, "code": 7} and dm.quotas(1) == dm.quotas(0)
    view = dm.view("train")
    shares = []
    for rank in range(2):
        sampler = dm.make_sampler("train", view, rank, 2)
        shares.append([view[b] for b in sampler])
    assert len(shares[0]) == len(shares[1])
    kinds = Counter(
        "web" if int(ids[0]) < 2000 else "code"
        for share in shares
        for b in share
        for ids in b["input_ids"]
    )
    assert kinds == {"web": 23, "code": 7}


def row_ids(batch: dict[str, torch.Tensor]) -> list[int]:
    real = batch["attention_mask"].bool()
    return (batch["document_ids"][real] * 1000 + batch["position_ids"][real]).tolist()


def test_exact_and_elastic_resume_through_the_trainer(corpora, tmp_path) -> None:
    make = lambda: blend(corpora, web_weight=[[0, 3], [1, 1]], epoch_size=40)  # noqa: E731
    assert_resume_mid_epoch_is_exact(make, row_ids, tmp_path / "ckpt", steps=lambda n: (3, n + 2))
    dm = make()
    dm.setup("fit")
    sampler = dm.make_sampler("train", dm.view("train"), 0, 2)
    head = [b for _, b in zip(range(3), sampler, strict=False)]
    state = sampler.state_dict()
    rest = []
    for rank in range(3):  # another world size: the rest, re-split evenly
        other = dm.make_sampler("train", dm.view("train"), rank, 3)
        other.load_state_dict(state)
        rest.append(list(other))
    assert len({len(r) for r in rest}) == 1
    theirs = dm.make_sampler("train", dm.view("train"), 1, 2).batches(0)[:3]
    delivered = sorted(int(i) for b in head + theirs + [b for r in rest for b in r] for i in b)
    whole = dm.make_sampler("train", dm.view("train"), 0, 1).batches(0)
    assert delivered == sorted(int(i) for b in whole for i in b)


class PerSource(RecordingModel):
    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.seen.setdefault(f"val{dataloader_idx}", []).append((0, batch_idx, row_ids(batch)))
        self.log("val_loss", float(batch["attention_mask"].sum()), batch_size=1)


def test_per_source_validation_and_the_summary(corpora) -> None:
    dm = blend(corpora, val_split=0.25, eval_per_source=True)
    assert dm.source_names("val") == ["web", "code"]
    model = PerSource(row_ids)
    results = quiet_trainer().validate(model, datamodule=dm, verbose=False)
    assert len(results) == 2
    val = dm.split_indices["val"].numpy()
    for k, (name, lo) in enumerate((("web", 0), ("code", 60))):
        mine = val[(val >= lo) & (val < lo + len(corpora["docs"][name]))]
        got = [i for _, _, ids in model.seen[f"val{k}"] for i in ids]
        assert len(got) == sum(len(corpora["docs"][name][i - lo]) for i in mine)
    text = dm.summary()
    assert "train blend:" in text and "source 'web':" in text and "weight=3" in text
