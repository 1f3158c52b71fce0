"""The same idea behaves the same in every DataModule: ``dm.skipped`` is one type,
``num_classes`` exists wherever there are labels, summaries say what the loaders do."""

from __future__ import annotations

import json
import re
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

from datamodules import (
    BaseDataModule,
    ImageFolderDataModule,
    StreamingDataModule,
    TensorDataModule,
    TextDataModule,
)
from datamodules.core.skipped import Skipped
from datamodules.images.index import IMG_EXTENSIONS


class Squares(BaseDataModule):
    """The custom-DataModule guide's example: samples from a plain list, fetched one by one."""

    def build_dataset(self) -> list:
        return [(torch.tensor([float(i)]), i * i) for i in range(100)]


def image_folder(root: Path, extra: dict[str, bytes] | None = None) -> Path:
    for c, name in enumerate(("cat", "dog")):
        (root / name).mkdir(parents=True)
        for j in range(4):
            Image.new("RGB", (16, 12), (40 * c + j, 0, 0)).save(root / name / f"{j}.png")
    for name, data in (extra or {}).items():
        (root / "cat" / name).write_bytes(data)
    return root


def test_skipped_is_the_same_type_everywhere(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"id": 1}\n{oops\n{"id": 2}\n')
    modules = [
        TensorDataModule(torch.arange(10.0)),
        TextDataModule(["ab", "cd", "ef"]),
        Squares(),
        ImageFolderDataModule(
            image_folder(tmp_path / "img", {"bad.png": b"not a png"}),
            on_error="skip",
            image_size=8,
            num_workers=0,
        ),  # fmt: skip
        StreamingDataModule(
            tmp_path / "a.jsonl", on_error="skip", index_cache=False, num_workers=0
        ),  # fmt: skip
    ]
    for dm in modules:
        stream = isinstance(dm, StreamingDataModule)  # warns that it skipped at indexing
        with pytest.warns(UserWarning, match="skipped") if stream else nullcontext():
            dm.setup("fit")
        for _ in dm.train_dataloader():
            pass
        assert isinstance(dm.skipped, Skipped), type(dm).__name__
    image, stream = modules[3].skipped, modules[4].skipped
    assert [where for where, _ in image] == [str(tmp_path / "img" / "cat" / "bad.png")]
    assert [where for where, _ in stream] == [f"{tmp_path / 'a.jsonl'}: line 2"]
    assert "invalid JSON" in stream[0][1]
    assert repr(stream).startswith(f"Skipped(1: '{tmp_path / 'a.jsonl'}: line 2' (invalid JSON")
    assert repr(modules[0].skipped) == "Skipped(0)" and modules[0].skipped.total == 0


def test_num_classes_wherever_there_are_labels(tmp_path: Path) -> None:
    assert TensorDataModule(torch.randn(12, 2), torch.arange(12) % 3).num_classes == 3
    assert TensorDataModule({"x": torch.randn(12, 2), "y": torch.arange(12) % 5}).num_classes == 5
    assert TensorDataModule(torch.randn(12, 2)).num_classes is None
    assert TensorDataModule(torch.randn(12, 2), torch.randn(12)).num_classes is None  # targets
    assert ImageFolderDataModule(image_folder(tmp_path / "img"), image_size=8).num_classes == 2
    assert TextDataModule(["a", "b", "c"], ["x", "y", "x"]).num_classes == 2
    assert TextDataModule(["a", "b", "c"]).num_classes is None


def test_a_list_datamodule_says_its_samples_are_fetched_one_by_one() -> None:
    summary = Squares(batch_size=10, val_split=0.2).summary()
    assert "num_workers=0: auto: samples are fetched one by one from memory and collated" in summary
    assert "one indexing call" not in summary
    tensor = TensorDataModule(torch.arange(10.0)).summary()
    assert "batches are gathered from tensors in memory with one indexing call" in tensor


def test_a_stream_without_shuffle_says_so(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(5)))
    ordered = StreamingDataModule(tmp_path / "a.jsonl", shuffle=False, batch_size=8,
                                  index_cache=False)  # fmt: skip
    ordered.setup()
    line = next(x for x in ordered.summary().splitlines() if x.startswith("  train:"))
    assert "shuffle=False (shards and records in file order)" in line
    assert "buffer" not in line and "1 shard (jsonl), 5 records; 1 batch of <= 8" in line
    shuffled = StreamingDataModule(tmp_path / "a.jsonl", batch_size=2, index_cache=False)
    shuffled.setup()
    assert "shuffle=True (shard order + a buffer of 10000 records per worker, seed 42)" in (
        shuffled.summary()
    )


def test_gif_files_left_out_by_extensions_are_counted_and_reported(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "img")
    Image.new("RGB", (16, 12), (1, 2, 3)).save(root / "cat" / "anim.gif")
    (root / "dog" / "notes.txt").write_text("not an image")
    with pytest.warns(UserWarning, match=r"holds images that extensions= leaves out \(\.gif: 1"):
        dm = ImageFolderDataModule(root, image_size=8)
        dm.setup()
    assert len(dm.samples) == 8
    assert "ignored: 2 file(s) whose extension is not in extensions= (.gif: 1, .txt: 1)" in (
        dm.summary()
    )
    with_gif = ImageFolderDataModule(root, image_size=8, extensions=(*IMG_EXTENSIONS, ".gif"))
    with_gif.setup()
    assert len(with_gif.samples) == 9
    assert any(path.endswith("anim.gif") for path, _ in with_gif.samples)


def test_image_size_takes_height_and_width(tmp_path: Path) -> None:
    dm = ImageFolderDataModule(image_folder(tmp_path / "img"), image_size=(6, 10), val_split=2,
                               batch_size=4, num_workers=0)  # fmt: skip
    train = next(iter(dm.train_dataloader()))[0]
    val = next(iter(dm.val_dataloader()))[0]
    assert tuple(train.shape[1:]) == tuple(val.shape[1:]) == (3, 6, 10)
    assert dm.hparams["image_size"] == [6, 10]  # plain data in checkpoints
    assert "uint8 6x10 out of the loader" in dm.summary()
    again = ImageFolderDataModule(tmp_path / "img", image_size=[6, 10])  # as YAML gives it
    assert again.image_size == (6, 10)
    with pytest.raises(ValueError, match=r"image_size=\(6, 0\) is not accepted: use an int >= 1"):
        ImageFolderDataModule(tmp_path / "img", image_size=(6, 0))


#: The same mistake, given to every DataModule that takes the argument, and the one exception
#: type it must raise everywhere (a wrong type: TypeError; a wrong value: ValueError).
SHARED_MISTAKES = [
    ({"batch_size": True}, TypeError),
    ({"batch_size": 2.0}, TypeError),
    ({"batch_size": "32"}, TypeError),
    ({"batch_size": 0}, ValueError),
    ({"num_workers": 1.5}, TypeError),
    ({"num_workers": -1}, ValueError),
    ({"num_workers": "many"}, ValueError),
    ({"prefetch_factor": True}, TypeError),
    ({"prefetch_factor": 0}, ValueError),
    ({"shuffle": "yes"}, TypeError),
    ({"pin_memory": 1}, TypeError),
    ({"shuffle_seed": 1.5}, TypeError),
]
#: Mistakes in the arguments only some DataModules take: each is given to all of those.
OWN_MISTAKES = [
    ({"on_error": "ignore"}, ValueError, ("images", "stream")),
    ({"on_error": True}, TypeError, ("images", "stream")),
    ({"mean": (0.5,)}, ValueError, ("images", "image stream")),
    ({"std": (0, 0, 0)}, ValueError, ("images", "image stream")),
    ({"mean": "0.5"}, TypeError, ("images", "image stream")),
    ({"image_size": 2.5}, TypeError, ("images", "image stream")),
    ({"image_size": 0}, ValueError, ("images", "image stream")),
    ({"retries": 1.5}, TypeError, ("text file", "stream")),
    ({"retries": -1}, ValueError, ("text file", "stream")),
    ({"timeout": "60"}, TypeError, ("text file", "stream")),
    ({"timeout": 0}, ValueError, ("text file", "stream")),
]


@pytest.fixture(scope="module")
def makers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("mistakes")
    images = image_folder(root / "img")
    (root / "a.jsonl").write_text('{"id": 1, "text": "ab"}\n')
    stream = {"train_files": str(root / "a.jsonl"), "index_cache": False}
    return {
        "tensor": lambda **kw: TensorDataModule(torch.arange(10.0), **kw),
        "text": lambda **kw: TextDataModule(["ab", "cd", "ef"], **kw),
        "text file": lambda **kw: TextDataModule(train_file=root / "a.jsonl", **kw),
        "images": lambda **kw: ImageFolderDataModule(images, **{"image_size": 8, **kw}),
        "stream": lambda **kw: StreamingDataModule(**stream, **kw),
        "image stream": lambda **kw: StreamingDataModule(**stream, image_key="png", **kw),
        "list": lambda **kw: Squares(**kw),
    }


@pytest.mark.parametrize(("kwargs", "error"), SHARED_MISTAKES, ids=lambda v: repr(v))
def test_the_same_mistake_raises_the_same_type_in_every_datamodule(
    makers: dict[str, Any], kwargs: dict[str, Any], error: type[Exception]
) -> None:
    ((name, value),) = kwargs.items()
    raised = {}
    for kind, make in makers.items():
        with pytest.raises((TypeError, ValueError), match=re.escape(f"{name}={value!r}")) as info:
            make(**kwargs)
        raised[kind] = type(info.value)
    assert raised == dict.fromkeys(makers, error)


@pytest.mark.parametrize(("kwargs", "error", "kinds"), OWN_MISTAKES, ids=lambda v: repr(v))
def test_the_same_mistake_in_an_argument_of_some_datamodules_raises_the_same_type(
    makers: dict[str, Any], kwargs: dict[str, Any], error: type[Exception], kinds: tuple[str, ...]
) -> None:
    ((name, value),) = kwargs.items()
    raised = {}
    for kind in kinds:
        with pytest.raises((TypeError, ValueError), match=re.escape(f"{name}={value!r}")) as info:
            makers[kind](**kwargs)
        raised[kind] = type(info.value)
    assert raised == dict.fromkeys(kinds, error)
