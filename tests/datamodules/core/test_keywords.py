"""The shared arguments are in every DataModule's own signature, and a mistyped keyword fails
naming the DataModule and the nearest accepted name."""

from __future__ import annotations

import abc
import inspect
import pydoc
from typing import Any

import pytest
import torch

from datamodules import (
    BaseDataModule,
    ImageFolderDataModule,
    Source,
    StreamingDataModule,
    TensorDataModule,
    TextDataModule,
)
from datamodules.core.keywords import SHARED_ARGUMENTS

MODULES = [TensorDataModule, ImageFolderDataModule, TextDataModule, StreamingDataModule]
#: Where a DataModule's default differs from BaseDataModule's, on purpose.
#: Defaults a DataModule sets to what its kind does: image folders stratify; a stream is never
#: split at random (its validation records come from val_files), so its val_split is 0.
OWN_DEFAULTS = {(ImageFolderDataModule, "stratify"): True, (StreamingDataModule, "val_split"): 0}


def test_the_shared_names_are_base_datamodules_arguments() -> None:
    names = list(inspect.signature(BaseDataModule.__init__).parameters)[1:]
    assert tuple(names) == SHARED_ARGUMENTS


@pytest.mark.parametrize("cls", MODULES, ids=lambda c: c.__name__)
def test_every_shared_argument_is_in_the_signature_with_its_default(cls: type) -> None:
    base = inspect.signature(BaseDataModule.__init__).parameters
    own = inspect.signature(cls).parameters
    assert not [p for p in own.values() if p.kind is p.VAR_KEYWORD]
    for name in SHARED_ARGUMENTS:
        assert name in own, f"{cls.__name__} hides {name}"
        assert own[name].kind is inspect.Parameter.KEYWORD_ONLY
        expected = OWN_DEFAULTS.get((cls, name), base[name].default)
        assert own[name].default == expected, (cls.__name__, name)
        assert own[name].annotation == base[name].annotation, (cls.__name__, name)


@pytest.mark.parametrize("cls", MODULES, ids=lambda c: c.__name__)
def test_help_shows_the_shared_arguments(cls: type) -> None:
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    call = next(line for line in text.splitlines() if line.startswith(f" |  {cls.__name__}("))
    for name in ("batch_size", "num_workers", "val_split", "shuffle"):
        assert f" {name}: " in call, (cls.__name__, name)
    assert "*args" not in call and "**kwargs" not in call


@pytest.mark.parametrize(
    ("make", "typo", "suggestion"),
    [
        (lambda **kw: TensorDataModule(torch.zeros(4, 2), **kw), "batchsize", "batch_size"),
        (lambda **kw: TextDataModule(["ab", "ba"], **kw), "num_worker", "num_workers"),
        (lambda **kw: TextDataModule(["ab", "ba"], **kw), "seq_len", "seq_length"),
        (lambda **kw: ImageFolderDataModule("imgs", **kw), "imagesize", "image_size"),
        (lambda **kw: StreamingDataModule("a.jsonl", **kw), "shufle_buffer", "shuffle_buffer"),
    ],
)
def test_a_mistyped_keyword_names_the_module_and_the_nearest_name(make, typo, suggestion) -> None:
    with pytest.raises(TypeError) as error:
        make(**{typo: 3})
    message = str(error.value)
    assert f"got an unexpected keyword argument {typo!r}" in message
    assert f"did you mean {suggestion!r}?" in message
    assert message.split("(")[0] in {c.__name__ for c in MODULES}


def test_an_unknown_keyword_far_from_any_name_points_to_help() -> None:
    with pytest.raises(TypeError, match=r"TensorDataModule\(\) .* 'zzz': see help\("):
        TensorDataModule(torch.zeros(4), zzz=1)


class Squares(BaseDataModule):
    """A user's subclass that passes ``**kwargs`` on to ours, as the custom guide shows."""

    def __init__(self, n: int = 10, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n = n

    def build_dataset(self) -> list[int]:
        return [i * i for i in range(self.n)]


def test_a_users_subclass_with_kwargs_gets_the_same_check() -> None:
    assert Squares(n=4, batch_size=2).batch_size == 2
    with pytest.raises(TypeError, match=r"Squares\(\) .* 'batchsize': did you mean 'batch_size'"):
        Squares(n=4, batchsize=2)


def test_a_datamodule_may_also_be_an_abc() -> None:
    class Abstract(BaseDataModule, abc.ABC):
        @abc.abstractmethod
        def build_dataset(self) -> Any: ...

    class Concrete(Abstract):
        def build_dataset(self) -> list[int]:
            return [1, 2, 3]

    with pytest.raises(TypeError, match="abstract"):
        Abstract()
    assert Concrete(val_split=0).setup() is None


def test_a_mistyped_source_keyword_names_the_nearest_name() -> None:
    with pytest.raises(
        TypeError,
        match=r"^Source\(\) got an unexpected keyword argument 'wieght': did you mean 'weight'\?$",
    ):
        Source("a.bin", wieght=2)
    with pytest.raises(TypeError, match=r"'nmae': did you mean 'name'\?$"):
        Source(files="a.bin", nmae="x")
    source = Source("a.bin", weight=2, name="a")  # the accepted names still pass
    assert (source.files, source.weight, source.repeat, source.name) == ("a.bin", 2, None, "a")
    assert list(inspect.signature(Source).parameters) == ["files", "weight", "repeat", "name"]
