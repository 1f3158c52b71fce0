"""ChatDataModule's inputs: bad records named or skipped, bad arguments refused early, a
datasets.Dataset, and plain-data checkpoints without the tokenizer."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from lightning.pytorch.callbacks import ModelCheckpoint

from datamodules import ChatDataModule
from tests import subprocesses
from tests.datamodules.chat.chat_data import chat_tokenizer
from tests.datamodules.chat.test_datamodule import batch_ids, numbered
from tests.datamodules.contract import quiet_trainer
from tests.recording import RecordingModel

GOOD = numbered(6)
BAD = [
    ({"text": "hi", "id": 1}, "record has no 'messages' key"),
    ({"messages": [{"role": "bot", "content": "x"}]}, "unknown role 'bot' in message 1"),
    (
        {"messages": [{"role": "user"}, {"role": "assistant", "content": "4."}]},
        "message 1 has no 'content'",
    ),
    ({"messages": [{"role": "user", "content": "What is 2 plus 2?"}]}, "nothing to train on"),
]


def write_jsonl(path: Path, records: list[Any]) -> Path:
    with open(path, "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
    return path


@pytest.mark.parametrize(("record", "reason"), BAD)
def test_a_bad_record_is_named_with_its_file_line_and_fault(
    tmp_path: Path, record: dict, reason: str
) -> None:
    path = write_jsonl(tmp_path / "chat.jsonl", [*GOOD[:3], record, *GOOD[3:]])
    dm = ChatDataModule(train_file=path, tokenizer=chat_tokenizer(), token_cache=tmp_path / "c")
    with pytest.raises(ValueError, match=rf"chat.jsonl, line 4: .*{reason}") as raised:
        dm.setup("fit")
    assert str(path) in str(raised.value)


def test_on_error_skip_counts_the_bad_records_and_a_later_setup_still_says_so(
    tmp_path: Path,
) -> None:
    records = [GOOD[0], BAD[0][0], GOOD[1], BAD[1][0], BAD[3][0], *GOOD[2:]]
    path = write_jsonl(tmp_path / "chat.jsonl", records)
    for _ in range(2):  # the second maps the store and renders nothing
        dm = ChatDataModule(
            train_file=path, tokenizer=chat_tokenizer(), on_error="skip", val_split=0,
            token_cache=tmp_path / "c", tokenize_workers=0, num_workers=0, batch_size=8,
        )  # fmt: skip
        dm.setup("fit")
        assert dm.skipped.records == 3 and dm.skipped.counts == {str(path): 3}
        assert [w for w, _ in dm.skipped] == [f"{path}, line {n}" for n in (2, 4, 5)]
        assert "skipped 3 bad record(s) in 1 file(s)" in dm.summary()
        assert sorted(batch_ids(next(iter(dm.train_dataloader())))) == list(range(6))


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"tokenizer": None}, ValueError, "tokenizer=None"),
        ({"tokenizer": "char"}, TypeError, "tokenizer"),
        ({"tokenizer": chat_tokenizer(template=None)}, ValueError, "chat_template"),
        ({"train_on": "user"}, ValueError, "train_on"),
        ({"overlong": "cut"}, ValueError, "overlong"),
        ({"on_error": "ignore"}, ValueError, "on_error"),
        ({"packing": True}, ValueError, "seq_length"),
        ({"seq_length": 64}, ValueError, "seq_length=64"),
        ({"packing": True, "seq_length": 64, "max_length": 32}, ValueError, "max_length=32"),
        ({"max_length": 0}, ValueError, "max_length"),
        ({"train_file": "chat.jsonl"}, ValueError, "conversations or train_file"),
        ({"token_cache": 3}, TypeError, "token_cache=3"),
        ({"tokenize_workers": -1}, ValueError, "tokenize_workers"),
    ],
)
def test_bad_arguments_raise_early_naming_the_argument(
    kwargs: dict[str, Any], error: type[Exception], named: str
) -> None:
    arguments = {"tokenizer": chat_tokenizer(), **kwargs}
    with pytest.raises(error, match=named):
        ChatDataModule(GOOD, **arguments)


def test_a_text_file_is_refused_naming_the_argument(tmp_path: Path) -> None:
    (tmp_path / "chat.txt").write_text("hello\n")
    dm = ChatDataModule(train_file=tmp_path / "chat.txt", tokenizer=chat_tokenizer())
    with pytest.raises(ValueError, match=r"train_file: .*chat.txt' is not accepted: .*JSONL"):
        dm.setup("fit")


def test_a_datasets_dataset(tmp_path: Path) -> None:
    import datasets

    rows = datasets.Dataset.from_list(numbered(10))
    dm = ChatDataModule(
        rows, tokenizer=chat_tokenizer(), val_split=0, batch_size=10, token_cache=tmp_path,
        tokenize_workers=0, num_workers=0,
    )  # fmt: skip
    assert sorted(batch_ids(next(iter(dm.train_dataloader())))) == list(range(10))
    assert dm.documents("train").where(3) == "<datasets.Dataset>, row 4"


def test_a_save_to_disk_folder_is_read_as_its_arrow_files(tmp_path: Path) -> None:
    import datasets

    folder = tmp_path / "saved"
    datasets.Dataset.from_list(numbered(10)).save_to_disk(str(folder), num_shards=2)
    dm = ChatDataModule(
        train_file=folder, tokenizer=chat_tokenizer(), val_split=0, batch_size=10,
        token_cache=tmp_path / "store", tokenize_workers=0, num_workers=0,
    )  # fmt: skip
    assert sorted(batch_ids(next(iter(dm.train_dataloader())))) == list(range(10))
    assert dm.documents("train").where(6).endswith("data-00001-of-00002.arrow, row 2")


CHECK = """
import json, sys, torch
checkpoint = torch.load(sys.argv[1], weights_only=True)
assert not any(m.split(".")[0] in ("datamodules", "collates") for m in sys.modules)
print(json.dumps({"hparams": checkpoint["datamodule_hyper_parameters"],
                  "state": sorted(checkpoint["ChatDataModule"])}))
"""


def test_the_checkpoint_is_plain_data_without_the_tokenizer(tmp_path: Path) -> None:
    dm = ChatDataModule(
        numbered(24), tokenizer=chat_tokenizer(), packing=True, seq_length=96, batch_size=2,
        token_cache=tmp_path / "c", tokenize_workers=0, num_workers=0,
    )  # fmt: skip
    saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1)
    trainer = quiet_trainer(max_steps=2, enable_checkpointing=True, callbacks=[saver])
    trainer.fit(RecordingModel(lambda b: b["document_ids"].flatten().tolist()), datamodule=dm)
    out = subprocesses.run(
        [sys.executable, "-c", CHECK, str(tmp_path / "epoch=0-step=2.ckpt")],
        text=True, check=True,
    )  # fmt: skip
    loaded = json.loads(out.stdout)
    hparams = loaded["hparams"]
    assert "tokenizer" not in hparams and "conversations" not in hparams
    assert hparams["packing"] is True and hparams["seq_length"] == 96
    assert hparams["train_on"] == "assistant" and hparams["chat_template"] is None
    assert "train_sampler" in loaded["state"]
    again = ChatDataModule.load_from_checkpoint(
        tmp_path / "epoch=0-step=2.ckpt", conversations=numbered(24), tokenizer=chat_tokenizer()
    )
    assert again.packing and again.seq_length == 96 and again.token_cache == str(tmp_path / "c")


class _Model(RecordingModel):
    def __init__(self) -> None:
        super().__init__(lambda batch: batch["document_ids"].flatten().tolist())


def test_lightning_cli_builds_it_with_a_tokenizer_from_its_file(tmp_path: Path) -> None:
    from lightning.pytorch.cli import LightningCLI

    from tests.datamodules.chat.chat_data import CHATML, raw_tokenizer, tokenizer_config

    tokenizer = tokenizer_config(raw_tokenizer(), tmp_path / "tokenizer.json")
    path = write_jsonl(tmp_path / "chat.jsonl", numbered(12))
    args = {
        "--data.train_file": str(path), "--data.tokenizer": tokenizer,
        "--data.chat_template": CHATML, "--data.packing": "true", "--data.seq_length": "128",
        "--data.token_cache": str(tmp_path / "c"), "--data.val_split": "0",
        "--data.tokenize_workers": "0", "--data.num_workers": "0", "--trainer.max_steps": "2",
        "--trainer.accelerator": "cpu", "--trainer.logger": "false",
        "--trainer.enable_checkpointing": "false", "--trainer.enable_progress_bar": "false",
    }  # fmt: skip
    flat = [x for kv in args.items() for x in kv]
    cli = LightningCLI(_Model, ChatDataModule, run=False, args=flat, save_config_callback=None)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert cli.trainer.global_step == 2 and cli.datamodule.seq_length == 128
    assert cli.datamodule.hparams["chat_template"] == CHATML
