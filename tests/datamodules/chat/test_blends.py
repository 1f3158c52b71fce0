"""ChatDataModule blends: train_file=[Source(...)] with weights and epoch_size, exact quotas,
packed rows of one source, a validation loader per source, and exact mid-epoch resume."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from datamodules import ChatDataModule, Source
from tests.datamodules.chat.chat_data import chat_tokenizer
from tests.datamodules.chat.test_datamodule import _lookup, batch_ids, numbered
from tests.datamodules.chat.test_packing import segments
from tests.datamodules.contract import assert_resume_mid_epoch_is_exact


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    records = numbered()
    parts = {"a": records[:30], "b": records[30:46], "va": records[46:50], "vb": records[50:]}
    out = {}
    for name, part in parts.items():
        out[name] = tmp_path / f"{name}.jsonl"
        out[name].write_text("".join(json.dumps(r) + "\n" for r in part))
    return out


def blend(
    files: dict[str, Path], weights: tuple[int, int] = (3, 1), **kwargs: Any
) -> ChatDataModule:
    options = {"batch_size": 4, "tokenize_workers": 0, "num_workers": 0}
    return ChatDataModule(
        train_file=[
            Source(str(files["a"]), weight=weights[0], name="a"),
            Source(str(files["b"]), weight=weights[1], name="b"),
        ],
        val_file=[Source(str(files["va"]), name="va"), Source(str(files["vb"]), name="vb")],
        tokenizer=chat_tokenizer(), token_cache=files["a"].parent / "cache",
        **{**options, **kwargs},
    )  # fmt: skip


def source_of(i: int) -> str:
    return "a" if i < 30 else "b"


def test_quotas_are_exact_every_epoch_and_eval_per_source(files: dict[str, Path]) -> None:
    dm = blend(files, epoch_size=16, eval_per_source=True)
    dm.setup("fit")
    assert dm.quotas(0) == {"a": 12, "b": 4} and dm.source_names("val") == ["va", "vb"]
    loader = dm.train_dataloader()
    seen = []
    for _ in range(3):
        ids = [i for b in loader for i in batch_ids(b)]
        assert Counter(map(source_of, ids)) == {"a": 12, "b": 4} and len(set(ids)) == 16
        seen.append(ids)
    a_seen = [[i for i in ids if i < 30] for ids in seen]
    assert len(set(a_seen[0] + a_seen[1])) == 24  # without replacement within a pass
    assert set(a_seen[0] + a_seen[1] + a_seen[2]) == set(range(30))  # the pass ends in epoch 2
    val = dm.val_dataloader()
    assert [sorted(i for b in v for i in batch_ids(b)) for v in val] == [
        list(range(46, 50)), list(range(50, 54))
    ]  # fmt: skip
    assert re.search(r"train quotas, epoch \d+: \{'a': 12, 'b': 4\}", dm.summary())


def test_packed_rows_never_mix_sources(files: dict[str, Path]) -> None:
    dm = blend(files, packing=True, seq_length=128, epoch_size=8, batch_size=2)
    dm.setup("fit")
    quotas = dm.quotas(0)
    assert sum(quotas.values()) == 8 and quotas["a"] > quotas["b"] > 0
    lookup, rows = _lookup(), Counter()
    for batch in dm.train_dataloader():
        for r in range(len(batch["input_ids"])):
            row = {
                k: v[r : r + 1] for k, v in batch.items() if k != "cu_seqlens" and k != "max_seqlen"
            }
            sources = {source_of(lookup[tuple(ids)]) for ids, _ in segments(row)}
            assert len(sources) == 1
            rows[sources.pop()] += 1
    assert rows == quotas


def test_a_blend_resumes_mid_epoch_exactly(files: dict[str, Path], tmp_path: Path) -> None:
    reference = assert_resume_mid_epoch_is_exact(
        lambda: blend(files, epoch_size=16, val_split=0), batch_ids, tmp_path / "run"
    )
    assert len(reference[0]) == 4


def test_each_epochs_quotas_are_logged_as_mix_names(files: dict[str, Path], tmp_path: Path) -> None:
    import csv

    from lightning.pytorch.loggers import CSVLogger

    from tests.datamodules.contract import quiet_trainer
    from tests.recording import RecordingModel

    logger = CSVLogger(tmp_path / "logs", name="", version="")
    trainer = quiet_trainer(max_epochs=2, logger=logger, log_every_n_steps=1)
    trainer.fit(RecordingModel(batch_ids), datamodule=blend(files, epoch_size=16, val_split=0))
    with open(tmp_path / "logs" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("mix/a")]
    assert [(float(r["mix/a"]), float(r["mix/b"])) for r in rows] == [(12.0, 4.0)] * 2


def test_other_weights_on_resume_end_the_epoch_as_planned_then_apply(
    files: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As text's blends: the interrupted epoch ends as planned, the new mix applies next."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from tests.datamodules.contract import quiet_trainer
    from tests.recording import RecordingModel

    def epochs(model: RecordingModel) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for epoch, _, ids in model.seen["train"]:
            out.setdefault(epoch, []).extend(ids)
        return out

    planned = RecordingModel(batch_ids)  # epoch 0 of the old mix, uninterrupted
    quiet_trainer(max_epochs=1).fit(planned, datamodule=blend(files, epoch_size=16, val_split=0))
    saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1)
    first = RecordingModel(batch_ids)
    trainer = quiet_trainer(max_steps=2, enable_checkpointing=True, callbacks=[saver])
    trainer.fit(first, datamodule=blend(files, epoch_size=16, val_split=0))
    other = blend(files, (1, 1), epoch_size=16, val_split=0)
    resumed = RecordingModel(batch_ids)
    with caplog.at_level("INFO", logger="datamodules"):
        quiet_trainer(max_epochs=2).fit(
            resumed, datamodule=other, ckpt_path=tmp_path / "epoch=0-step=2.ckpt"
        )
    assert "'a' weight=3 -> weight=1" in caplog.text
    assert "Epoch 0 ends as it was planned, the new mix applies from epoch 1" in caplog.text
    got = epochs(resumed)
    assert epochs(first)[0] + got[0] == epochs(planned)[0]  # each unit once across both runs
    assert Counter(map(source_of, epochs(planned)[0])) == {"a": 12, "b": 4}
    assert Counter(map(source_of, got[1])) == {"a": 8, "b": 8} == other.quotas(1)
    assert len(set(got[1])) == 16


def test_chat_and_text_hold_the_same_blends_component(files: dict[str, Path]) -> None:
    from datamodules import TextDataModule
    from datamodules.tokens.blends import TokenBlends

    chat = blend(files)
    text = TextDataModule(
        train_file=[Source(str(files["a"]), weight=1, name="a")],
        tokenizer=chat_tokenizer(),
        text_key="messages",
    )
    assert type(chat.blends) is type(text.blends) is TokenBlends
    assert chat.blends.owner is chat and text.blends.owner is text
    assert [s.label for s in chat.blends.sources["train"]] == ["a", "b"]
    assert chat.blends.masked and not text.blends.masked


def test_a_checkpoint_from_before_the_shared_component_resumes_exactly(
    files: dict[str, Path], tmp_path: Path
) -> None:
    """Chat checkpoints saved before the blends component name no files in their mix."""
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint

    from tests.datamodules.contract import quiet_trainer
    from tests.recording import RecordingModel

    def ids(model: RecordingModel) -> list[int]:
        return [i for _, _, batch in model.seen["train"] for i in batch]

    planned = RecordingModel(batch_ids)
    quiet_trainer(max_epochs=1).fit(planned, datamodule=blend(files, epoch_size=16, val_split=0))
    saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1)
    first = RecordingModel(batch_ids)
    trainer = quiet_trainer(max_steps=2, enable_checkpointing=True, callbacks=[saver])
    trainer.fit(first, datamodule=blend(files, epoch_size=16, val_split=0))
    checkpoint = torch.load(tmp_path / "epoch=0-step=2.ckpt", weights_only=True)
    mix = checkpoint["ChatDataModule"]["train_sampler"]["mix"]
    assert [s.pop("files") for s in mix["sources"]] == [[str(files["a"])], [str(files["b"])]]
    torch.save(checkpoint, tmp_path / "before.ckpt")
    resumed = RecordingModel(batch_ids)
    quiet_trainer(max_epochs=1).fit(
        resumed,
        datamodule=blend(files, epoch_size=16, val_split=0),
        ckpt_path=tmp_path / "before.ckpt",
    )
    assert ids(first) + ids(resumed) == ids(planned) and len(ids(planned)) == 16
