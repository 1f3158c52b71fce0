"""TensorDataModule: the shared contract plus tensor-specific behaviour."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from datamodules import TensorDataModule
from datamodules.core.views import TensorBatchView
from tests.datamodules.contract import ContractCase, DataModuleContract, quiet_trainer
from tests.recording import RecordingModel

N = 54  # 43 train samples with val_split=0.2: odd, so DDP shares differ by one


def make_tensors(n: int = N) -> tuple[torch.Tensor, torch.Tensor]:
    """Features whose first column is the sample id, and labels id % 3."""
    ids = torch.arange(n)
    x = torch.stack([ids.float(), ids.float() * 2, -ids.float()], dim=1)
    return x, ids % 3


def batch_ids(batch: Any) -> list[int]:
    x = batch["x"] if isinstance(batch, dict) else batch[0]
    return x[:, 0].long().tolist()


def ddp_datamodule(**kwargs: Any) -> tuple[TensorDataModule, Any]:
    """Factory for tests/ddp_runner.py: the same data in every process."""
    return TensorDataModule(*make_tensors(), val_split=0.2, batch_size=4, **kwargs), batch_ids


class TestTensorContract(DataModuleContract):
    @pytest.fixture
    def case(self) -> ContractCase:
        x, y = make_tensors()
        return ContractCase(
            make=lambda **kw: TensorDataModule(x, y, **kw),
            batch_ids=batch_ids,
            num_samples=N,
            ddp_factory="tests.datamodules.test_tensor:ddp_datamodule",
        )


class TestInputs:
    def test_positional_tensors_give_tuple_batches(self) -> None:
        x, y = make_tensors()
        dm = TensorDataModule(x, y, val_split=0, batch_size=8, shuffle=False)
        xb, yb = next(iter(dm.train_dataloader()))
        assert torch.equal(xb, x[:8]) and torch.equal(yb, y[:8])

    def test_dict_gives_dict_batches(self) -> None:
        x, y = make_tensors()
        dm = TensorDataModule({"x": x, "y": y}, val_split=0, batch_size=8, shuffle=False)
        batch = next(iter(dm.train_dataloader()))
        assert set(batch) == {"x", "y"}
        assert torch.equal(batch["x"], x[:8]) and torch.equal(batch["y"], y[:8])

    def test_numpy_arrays_are_shared_not_copied(self) -> None:
        arr = np.arange(20, dtype=np.float32).reshape(10, 2)
        dm = TensorDataModule(arr, val_split=0)
        dm.setup("fit")
        assert dm.tensors[0].data_ptr() == arr.__array_interface__["data"][0]

    def test_split_views_share_storage(self) -> None:
        x, y = make_tensors()
        dm = TensorDataModule(x, y, val_split=0.2, train_transforms=lambda b: b)
        dm.setup("fit")
        train, val = dm.view("train"), dm.view("val")
        assert isinstance(train, TensorBatchView)
        assert train.tensors[0] is val.tensors[0] is x

    def test_train_and_eval_transforms_differ_without_copying(self) -> None:
        x, y = make_tensors()

        def negate(batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
            return (-batch[0], batch[1])

        dm = TensorDataModule(x, y, val_split=0.5, batch_size=100, train_transforms=negate)
        dm.setup("fit")
        train_x, _ = next(iter(dm.train_dataloader()))
        val_x, _ = next(iter(dm.val_dataloader()))
        assert bool((train_x[:, 0] <= 0).all()) and bool((val_x[:, 0] >= 0).all())
        assert torch.equal(x, make_tensors()[0])  # the data itself is untouched

    @pytest.mark.parametrize("suffix", [".pt", ".npz", ".npy"])
    def test_path_loads_safely(self, tmp_path: Path, suffix: str) -> None:
        x, y = make_tensors()
        file = tmp_path / f"data{suffix}"
        if suffix == ".pt":
            torch.save({"x": x, "y": y}, file)
        elif suffix == ".npz":
            np.savez(file, x=x.numpy(), y=y.numpy())
        else:
            np.save(file, x.numpy())
        dm = TensorDataModule(path=str(file), val_split=0, batch_size=N, shuffle=False)
        batch = next(iter(dm.train_dataloader()))
        got = batch["x"] if isinstance(batch, dict) else batch[0]
        assert torch.equal(got, x)

    def test_pickled_code_in_pt_file_is_refused(self, tmp_path: Path) -> None:
        file = tmp_path / "evil.pt"
        torch.save({"x": torch.zeros(3), "obj": Path("x")}, file)
        dm = TensorDataModule(path=str(file))
        with pytest.raises(ValueError, match=re.escape(str(file))):
            dm.setup("fit")

    def test_stratify_keeps_class_proportions(self) -> None:
        x = torch.arange(300).float().unsqueeze(1)
        y = torch.cat([torch.zeros(200), torch.ones(70), torch.full((30,), 2)]).long()
        dm = TensorDataModule(x, y, val_split=0.2, test_split=0.1, stratify=True)
        dm.setup("fit")
        for split, share in (("train", 0.7), ("val", 0.2), ("test", 0.1)):
            counts = torch.bincount(y[dm.split_indices[split]], minlength=3)
            expected = torch.tensor([200, 70, 30]) * share
            assert bool(((counts - expected).abs() <= 1).all()), (split, counts)

    def test_summary_shows_sizes_settings_and_reasons(self) -> None:
        x, y = make_tensors()
        dm = TensorDataModule(x, y, val_split=0.2)
        dm.setup("fit")
        text = repr(dm)
        assert "train=43, val=11, test=0" in text
        assert "num_workers=0: auto: batches are gathered from tensors in memory" in text
        assert "pin_memory=False: auto" in text
        assert str(dm) == text

    def test_save_hyperparameters_keeps_arguments_not_tensors(self) -> None:
        x, y = make_tensors()
        dm = TensorDataModule(x, y, batch_size=7, val_split=3)
        assert dm.hparams["batch_size"] == 7 and dm.hparams["val_split"] == 3
        assert "tensors" not in dm.hparams
        assert all(not isinstance(v, torch.Tensor) for v in dm.hparams.values())

    def test_batches_come_from_one_index_per_tensor(self) -> None:
        """A whole batch is gathered by one __getitem__ call with an index tensor."""
        x, y = make_tensors()
        dm = TensorDataModule(x, y, val_split=0, batch_size=5, shuffle=False)
        loader = dm.train_dataloader()
        assert loader.batch_size is None and isinstance(loader, DataLoader)
        index = next(iter(loader.sampler))
        assert index.dtype == torch.int64 and index.tolist() == [0, 1, 2, 3, 4]

    def test_trainer_fit_with_dict_batches(self) -> None:
        x, y = make_tensors()
        dm = TensorDataModule({"x": x, "y": y}, val_split=0.2, batch_size=8)
        model = RecordingModel(batch_ids)
        quiet_trainer(max_epochs=1).fit(model, datamodule=dm)
        assert sorted(i for b in model.train_epochs()[0] for i in b) == sorted(
            dm.split_indices["train"].tolist()
        )


class TestBadInput:
    def test_mismatched_lengths(self) -> None:
        with pytest.raises(ValueError, match=r"different lengths.*0.*10.*1.*9"):
            TensorDataModule(torch.zeros(10, 2), torch.zeros(9))

    def test_no_data(self) -> None:
        with pytest.raises(ValueError, match="needs data"):
            TensorDataModule()

    def test_tensors_and_path(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="not both"):
            TensorDataModule(torch.zeros(3), path=str(tmp_path / "x.pt"))

    def test_unknown_suffix(self) -> None:
        with pytest.raises(ValueError, match=r"path='data.csv'.*\.pt"):
            TensorDataModule(path="data.csv")

    def test_missing_file_names_it(self, tmp_path: Path) -> None:
        dm = TensorDataModule(path=str(tmp_path / "missing.pt"))
        with pytest.raises(FileNotFoundError, match="missing.pt"):
            dm.setup("fit")

    def test_not_a_tensor(self) -> None:
        with pytest.raises(TypeError, match="list"):
            TensorDataModule([1, 2, 3])

    def test_bad_label_key(self) -> None:
        with pytest.raises(ValueError, match="label_key='z'"):
            TensorDataModule({"x": torch.zeros(4), "y": torch.zeros(4)}, label_key="z")

    def test_stratify_without_labels(self) -> None:
        with pytest.raises(ValueError, match="stratify=True needs labels"):
            TensorDataModule(torch.zeros(4, 2), stratify=True)

    def test_stratify_with_explicit_splits(self) -> None:
        with pytest.raises(ValueError, match="stratify"):
            TensorDataModule(torch.zeros(4), torch.zeros(4), stratify=True, splits={"train": [0]})

    @pytest.mark.parametrize(
        ("splits", "match"),
        [
            ({"train": [0, 1], "val": [1]}, "shares index 1"),
            ({"train": [0, 10]}, "index 10, outside"),
            ({"train": [0, 0]}, "repeats"),
            ({"val": [0]}, "must contain 'train'"),
            ({"train": [0], "holdout": [1]}, "unknown keys"),
            ({"train": [0.5]}, "integers"),
        ],
    )
    def test_bad_explicit_splits(self, splits: dict[str, Any], match: str) -> None:
        dm = TensorDataModule(torch.zeros(10), splits=splits)
        with pytest.raises((ValueError, TypeError), match=match):
            dm.setup("fit")

    def test_empty_test_split(self) -> None:
        dm = TensorDataModule(torch.zeros(10), val_split=0.2)
        dm.setup("test")
        with pytest.raises(ValueError, match="empty test split"):
            dm.test_dataloader()


class PlainModel(RecordingModel):
    """RecordingModel with its batch_ids fixed, so LightningCLI can build it without arguments."""

    def __init__(self) -> None:
        super().__init__(batch_ids)


class TestLightningIntegration:
    def test_lightning_cli_builds_it_from_a_path(self, tmp_path: Path) -> None:
        from lightning.pytorch.cli import LightningCLI

        from datamodules import BaseDataModule

        x, y = make_tensors()
        file = tmp_path / "data.npz"
        np.savez(file, x=x.numpy(), y=y.numpy())
        args = [
            "--data", "TensorDataModule", "--data.path", str(file), "--data.batch_size", "8",
            "--data.val_split", "5", "--trainer.logger", "false",
        ]  # fmt: skip
        cli = LightningCLI(
            PlainModel, BaseDataModule, subclass_mode_data=True, run=False, args=args
        )
        dm = cli.datamodule
        assert isinstance(dm, TensorDataModule)
        assert dm.batch_size == 8 and dm.path == str(file)
        dm.setup("fit")
        assert dm.split_size("val") == 5 and dm.split_size("train") == N - 5
        batch = next(iter(dm.train_dataloader()))
        assert set(batch) == {"x", "y"} and batch["x"].shape == (8, 3)

    @pytest.mark.parametrize(("num_workers", "warned"), [("auto", False), (0, True)])
    def test_auto_few_workers_is_not_second_guessed_by_lightning(
        self, monkeypatch: pytest.MonkeyPatch, num_workers: Any, warned: bool
    ) -> None:
        import os
        import warnings

        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))  # 16 CPUs
        dm = TensorDataModule(*make_tensors(), batch_size=8, num_workers=num_workers)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            quiet_trainer(max_epochs=1).fit(RecordingModel(batch_ids), datamodule=dm)
        messages = [str(w.message) for w in caught]
        assert any("does not have many workers" in m for m in messages) == warned
