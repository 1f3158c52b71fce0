"""Hyperparameters as plain data: what ``to_plain`` keeps, converts and refuses, and what a
DataModule reports as not saved."""

from __future__ import annotations

import enum
from pathlib import Path

import numpy as np
import pytest
import torch

from datamodules import Source, StreamingDataModule, TensorDataModule, TextDataModule
from datamodules.core.hparams import NotPlain, to_plain
from datamodules.remote.credentials import NOT_SAVED, checkpoint_storage_options


class Colour(enum.StrEnum):
    RED = "red"


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        (None, None),
        (3, 3),
        (2.5, 2.5),
        ("auto", "auto"),
        (True, True),
        (np.int64(7), 7),
        (np.float32(0.5), 0.5),
        (np.bool_(False), False),
        (Colour.RED, "red"),
        (Path("/data/train.jsonl"), "/data/train.jsonl"),
        ((0.5, 0.25, (1, Path("x"))), [0.5, 0.25, [1, "x"]]),
        ({"a": (1, 2), "b": {"c": Path("d")}}, {"a": [1, 2], "b": {"c": "d"}}),
        (Source(Path("a.jsonl"), weight=3), {"files": "a.jsonl", "weight": 3, "repeat": None,
                                              "name": None}),
    ],
)  # fmt: skip
def test_to_plain_keeps_and_converts(value, plain) -> None:
    out = to_plain(value)
    assert out == plain
    assert type(out) is type(plain)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (lambda s: s, "a callable (<lambda>)"),
        (torch.zeros(2), "a Tensor"),
        ({1: "a"}, "the key 1"),
        ([object()], "an object"),
    ],
)
def test_to_plain_refuses_what_has_no_plain_form(value, reason) -> None:
    with pytest.raises(NotPlain, match=reason.replace("(", r"\(").replace(")", r"\)")):
        to_plain(value)


def test_every_saved_hyperparameter_is_plain_and_the_rest_is_reported() -> None:
    x = torch.arange(12.0).view(6, 2)
    dm = TensorDataModule(x, val_split=np.float64(0.25), split_seed=np.int64(3),
                          train_transforms=lambda b: b)  # fmt: skip
    assert dm.hparams["val_split"] == 0.25 and type(dm.hparams["val_split"]) is float
    assert dm.hparams["split_seed"] == 3 and type(dm.hparams["split_seed"]) is int
    assert "tensors" not in dm.hparams and "train_transforms" not in dm.hparams
    assert dm.unsaved_arguments == {"train_transforms": "a callable (<lambda>)",
                                    "tensors": "data"}  # fmt: skip
    dm.setup()
    line = next(x for x in dm.summary().splitlines() if "not saved in checkpoints" in x)
    assert "train_transforms (a callable (<lambda>))" in line and "tensors (data)" in line
    assert "TensorDataModule.load_from_checkpoint(path, ...)" in line
    assert dm.hparams_initial == dm.hparams


def test_a_string_tokenizer_is_saved_an_object_is_not() -> None:
    texts = ["ab", "ba", "abab", "b"]
    assert TextDataModule(texts, tokenizer="word").hparams["tokenizer"] == "word"
    dm = TextDataModule(texts, tokenizer=lambda s: [ord(c) for c in s])
    assert "tokenizer" not in dm.hparams
    assert dm.unsaved_arguments["tokenizer"] == "a callable (<lambda>)"
    assert dm.unsaved_arguments["texts"] == "data"


def test_nothing_is_reported_when_everything_is_saved(tmp_path: Path) -> None:
    path = tmp_path / "t.pt"
    torch.save({"x": torch.arange(10.0)}, path)
    dm = TensorDataModule(path=path)
    assert dm.hparams["path"] == str(path)
    assert dm.unsaved_arguments == {}
    dm.setup()
    assert "not saved" not in dm.summary()


def test_sources_are_saved_as_dicts_and_dicts_rebuild_them(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / f"{name}.jsonl").write_text('{"id": 1}\n')
    sources = [Source(tmp_path / "a.jsonl", weight=3, name="web"),
               Source([tmp_path / "b.jsonl"], weight=1)]  # fmt: skip
    dm = StreamingDataModule(sources, epoch_size=4)
    saved = dm.hparams["train_files"]
    assert saved == [
        {"files": str(tmp_path / "a.jsonl"), "weight": 3, "repeat": None, "name": "web"},
        {"files": [str(tmp_path / "b.jsonl")], "weight": 1, "repeat": None, "name": None},
    ]
    again = StreamingDataModule(saved, epoch_size=4)
    assert again.files["train"] == dm.files["train"] == sources
    assert again.hparams == dm.hparams


def test_a_source_dict_with_unknown_keys_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"train_files\[0\]: .* unknown keys \['wieght'\]"):
        StreamingDataModule([{"files": "a.jsonl", "wieght": 2}])
    with pytest.raises(ValueError, match=r"train_files\[1\]: .* no 'files' key"):
        StreamingDataModule([{"files": "a.jsonl"}, {"weight": 2}])


def test_source_files_must_be_paths() -> None:
    with pytest.raises(TypeError, match=r"Source files=3 is not accepted"):
        Source(3)
    with pytest.raises(TypeError, match=r"Source files=\[\] is not accepted"):
        Source([])


def test_credentials_never_reach_the_hyperparameters() -> None:
    options = {
        "endpoint_url": "http://127.0.0.1:9",
        "key": "AKIA-example",
        "secret": "s3cr3t",
        "client_kwargs": {"region_name": "eu", "aws_session_token": "tok"},
        "headers": {"Authorization": "Bearer abc", "Accept": "text/plain"},
    }
    saved, dropped = checkpoint_storage_options(options)
    assert dropped == ["key", "secret", "client_kwargs.aws_session_token",
                       "headers.Authorization"]  # fmt: skip
    assert saved == {
        "endpoint_url": "http://127.0.0.1:9",
        "client_kwargs": {"region_name": "eu"},
        "headers": {"Accept": "text/plain"},
        NOT_SAVED: dropped,
    }
    dm = StreamingDataModule("s3://bucket/train.jsonl", storage_options=options)
    assert dm.hparams["storage_options"] == saved
    assert dm.remote.storage_options == options  # the live module keeps them
    assert dm.unsaved_arguments["storage_options.secret"] == "a credential"
    with pytest.warns(UserWarning, match=r"does not hold the credentials \['key', 'secret'"):
        rebuilt = StreamingDataModule("s3://bucket/train.jsonl", storage_options=saved)
    assert NOT_SAVED not in rebuilt.remote.storage_options
