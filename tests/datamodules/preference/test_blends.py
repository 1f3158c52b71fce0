"""PreferenceDataModule blends: train_file=[Source(...)] with weights and epoch_size, exact
quotas of pairs, packed rows of one source with pairs whole, a validation loader per source,
and exact mid-epoch resume."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from datamodules import PreferenceDataModule, Source
from tests.datamodules.chat.chat_data import chat_tokenizer
from tests.datamodules.contract import assert_resume_mid_epoch_is_exact
from tests.datamodules.preference.pref_data import messages_pairs
from tests.datamodules.preference.test_datamodule import N, batch_ids
from tests.datamodules.preference.test_packing import packed_ids


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    records = messages_pairs(N, seed=1)
    parts = {"a": records[:30], "b": records[30:46], "va": records[46:50], "vb": records[50:]}
    out = {}
    for name, part in parts.items():
        out[name] = tmp_path / f"{name}.jsonl"
        out[name].write_text("".join(json.dumps(r) + "\n" for r in part))
    return out


def blend(files: dict[str, Path], **kwargs: Any) -> PreferenceDataModule:
    options = {"batch_size": 4, "tokenize_workers": 0, "num_workers": 0}
    return PreferenceDataModule(
        train_file=[
            Source(str(files["a"]), weight=3, name="a"),
            Source(str(files["b"]), weight=1, name="b"),
        ],
        val_file=[Source(str(files["va"]), name="va"), Source(str(files["vb"]), name="vb")],
        tokenizer=chat_tokenizer(), token_cache=files["a"].parent / "cache",
        **{**options, **kwargs},
    )  # fmt: skip


def source_of(i: int) -> str:
    return "a" if i < 30 else "b"


def test_quotas_of_pairs_are_exact_every_epoch_and_eval_per_source(
    files: dict[str, Path],
) -> None:
    dm = blend(files, epoch_size=16, eval_per_source=True)
    dm.setup("fit")
    assert dm.quotas(0) == {"a": 12, "b": 4} and dm.source_names("val") == ["va", "vb"]
    loader = dm.train_dataloader()
    seen = []
    for _ in range(3):
        ids = [i for b in loader for i in batch_ids(b)]
        assert Counter(map(source_of, ids)) == {"a": 12, "b": 4} and len(set(ids)) == 16
        seen.append(ids)
    assert set(seen[0] + seen[1] + seen[2]) >= set(range(30))  # a's pass ends in epoch 2
    val = dm.val_dataloader()
    assert [sorted(i for b in v for i in batch_ids(b)) for v in val] == [
        list(range(46, 50)), list(range(50, 54))
    ]  # fmt: skip


def test_packed_blend_keeps_pairs_whole_rows_of_one_source(files: dict[str, Path]) -> None:
    dm = blend(files, packing=True, seq_length=256, epoch_size=8, batch_size=2)
    dm.setup("fit")
    quotas = dm.quotas(0)
    assert sum(quotas.values()) == 8 and quotas["a"] > quotas["b"] > 0
    rows = Counter()
    for batch in dm.train_dataloader():
        ids = packed_ids(batch)  # every pair's chosen sequence whole, its rejected beside it
        assert len(batch["rejected_index"]) == len(ids)
        cu = batch["cu_seqlens"].tolist()
        width = batch["input_ids"].shape[1]
        for r in range(len(batch["input_ids"])):
            in_row = [
                i
                for i, c in zip(ids, batch["chosen_index"].tolist(), strict=True)
                if r * width <= cu[c] < (r + 1) * width
            ]
            assert len({source_of(i) for i in in_row}) <= 1  # a row never mixes sources
            rows.update(source_of(i) for i in in_row[:1])
    assert rows == Counter(quotas)


def test_a_blend_resumes_mid_epoch_exactly(files: dict[str, Path], tmp_path: Path) -> None:
    assert_resume_mid_epoch_is_exact(
        lambda: blend(files, epoch_size=16), batch_ids, tmp_path / "ckpt"
    )
