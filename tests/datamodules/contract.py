"""The contract every DataModule passes, as a reusable test class.

A DataModule's test file reuses it in a few lines::

    class TestTensorContract(DataModuleContract):
        @pytest.fixture
        def case(self, tmp_path):
            return ContractCase(make=..., batch_ids=..., num_samples=..., ddp_factory=...)

``make(**kwargs)`` builds a fresh DataModule over small fixture data (kwargs are the shared
BaseDataModule arguments), ``batch_ids(batch)`` returns the ids of the samples in a batch,
where a sample's id is its index in the full dataset, and ``ddp_factory`` names a
``module:function`` that ``tests/ddp_runner.py`` calls in each DDP process to build the same
DataModule (``function(**ddp_kwargs) -> (datamodule, batch_ids)``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from datamodules import BaseDataModule
from tests import ddp_runner, forked
from tests.recording import RecordingModel

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ContractCase:
    """What the contract needs to know about one DataModule's fixture data."""

    make: Callable[..., BaseDataModule]
    batch_ids: Callable[[Any], list[int]]
    num_samples: int
    ddp_factory: str | None = None
    ddp_kwargs: dict[str, Any] = field(default_factory=dict)
    resume_workers: tuple[int, ...] = (0, 2)


def quiet_trainer(**kwargs: Any) -> pl.Trainer:
    """A CPU Trainer without logger, progress bar or summary (checkpointing only if asked)."""
    defaults: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
    }
    defaults.update(kwargs)
    return pl.Trainer(**defaults)


def assert_resume_mid_epoch_is_exact(
    make: Callable[[], BaseDataModule],
    batch_ids: Callable[[Any], list[int]],
    tmp_path: Path,
    steps: Callable[[int], tuple[int, ...]] = lambda per_epoch: (2, per_epoch + 1),
    check_checkpoint: Callable[[Path, int, int], None] | None = None,
) -> list[list[Any]]:
    """Trains two epochs saving every step, then resumes from the checkpoints at ``steps``
    (of the batches per epoch; each must be mid-epoch) and asserts that the resumed run's
    batches are exactly the rest of the uninterrupted run's.

    Args:
        make: Builds a fresh DataModule (the same arguments every call).
        batch_ids: The ids of one batch, as :class:`tests.recording.RecordingModel` records.
        tmp_path: Where the checkpoints go.
        steps: The global steps to resume at, from the batches per epoch.
        check_checkpoint: Called with each checkpoint's path, its epoch and the batches done.

    Returns:
        The uninterrupted run's batch ids, epoch by epoch.
    """
    full = RecordingModel(batch_ids)
    checkpoint = ModelCheckpoint(
        dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{epoch}-{step}"
    )
    quiet_trainer(max_epochs=2, enable_checkpointing=True, callbacks=[checkpoint]).fit(
        full, datamodule=make()
    )
    reference = full.train_epochs()
    per_epoch = len(reference[0])
    for step in steps(per_epoch):
        epoch, done = divmod(step, per_epoch)
        assert epoch < 2 and done > 0, f"step {step} is not mid-epoch ({per_epoch} per epoch)"
        path = tmp_path / f"epoch={epoch}-step={step}.ckpt"
        if check_checkpoint is not None:
            check_checkpoint(path, epoch, done)
        resumed = RecordingModel(batch_ids)
        quiet_trainer(max_epochs=2).fit(resumed, datamodule=make(), ckpt_path=path)
        got = resumed.train_epochs()
        assert got[0] == reference[epoch][done:], f"resume at step {step}"
        assert got[1:] == reference[epoch + 1 :], f"epochs after resuming at step {step}"
    return reference


def ids_of_loader(loader: Any, batch_ids: Callable[[Any], list[int]]) -> list[int]:
    """All ids a loader yields in one pass, in order."""
    return [i for batch in loader for i in batch_ids(batch)]


def split_ids(dm: BaseDataModule, split: str) -> list[int]:
    """The ids (indices into the full dataset) of a split."""
    assert dm.split_indices is not None
    return sorted(dm.split_indices[split].tolist())


def run_ddp(
    case: ContractCase, out: Path, epochs: int = 2, devices: int = 2, extra: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """Runs ``tests/ddp_runner.py`` forked from this process (``devices`` CPU processes,
    ``ddp_fork``, gloo); each rank's record."""
    argv = [
        "--factory",
        str(case.ddp_factory),
        "--kwargs",
        json.dumps(case.ddp_kwargs),
        "--out",
        str(out),
        "--epochs",
        str(epochs),
        "--devices",
        str(devices),
        "--launch",
        "fork",
        *extra,
    ]
    code, log = forked.run_main(ddp_runner.main, argv, out.with_name(out.name + ".log"))
    assert code == 0, log[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(devices)]


class DataModuleContract:
    """Behaviour shared by every DataModule (DESIGN.md, "Behaviour every DataModule shares")."""

    # ---------------------------------------------------------------- splits
    def test_splits_are_disjoint_and_complete(self, case: ContractCase) -> None:
        dm = case.make(val_split=0.2, test_split=0.1)
        dm.setup("fit")
        parts = {name: split_ids(dm, name) for name in ("train", "val", "test")}
        n = case.num_samples
        assert len(parts["val"]) == int(0.2 * n + 0.5)
        assert len(parts["test"]) == int(0.1 * n + 0.5)
        assert sorted(parts["train"] + parts["val"] + parts["test"]) == list(range(n))

    def test_split_counts_are_exact(self, case: ContractCase) -> None:
        dm = case.make(val_split=3, test_split=2)
        dm.setup("fit")
        assert [dm.split_size(s) for s in ("train", "val", "test")] == [
            case.num_samples - 5,
            3,
            2,
        ]

    def test_same_seed_same_split_other_seed_other_split(self, case: ContractCase) -> None:
        first, again, other = (case.make(val_split=0.3, split_seed=s) for s in (7, 7, 8))
        for dm in (first, again, other):
            dm.setup("fit")
        assert split_ids(first, "val") == split_ids(again, "val")
        assert first.fingerprint == again.fingerprint
        assert split_ids(first, "val") != split_ids(other, "val")
        assert first.fingerprint != other.fingerprint

    def test_setup_is_idempotent(self, case: ContractCase) -> None:
        dm = case.make(val_split=0.2)
        calls: list[int] = []
        build = dm.build_dataset

        def counting_build() -> Any:
            calls.append(1)
            return build()

        dm.build_dataset = counting_build  # type: ignore[method-assign]
        dm.setup("fit")
        indices = dm.split_indices
        dm.setup("validate")
        dm.setup("test")
        assert dm.split_indices is indices
        assert calls == [1]

    def test_explicit_splits_are_used_as_given(self, case: ContractCase) -> None:
        n = case.num_samples
        splits = {"train": list(range(0, n - 4)), "val": [n - 4, n - 3], "test": [n - 2, n - 1]}
        dm = case.make(splits=splits)
        dm.setup("fit")
        for name, idx in splits.items():
            assert dm.split_indices[name].tolist() == idx
        assert sorted(ids_of_loader(dm.val_dataloader(), case.batch_ids)) == [n - 4, n - 3]

    # ---------------------------------------------------------------- loaders
    def test_every_loader_yields_its_split_exactly_once(self, case: ContractCase) -> None:
        dm = case.make(val_split=0.2, test_split=0.1, batch_size=4)
        dm.setup("fit")
        for split, loader in (
            ("train", dm.train_dataloader()),
            ("val", dm.val_dataloader()),
            ("test", dm.test_dataloader()),
            ("test", dm.predict_dataloader()),
        ):
            seen = ids_of_loader(loader, case.batch_ids)
            assert sorted(seen) == split_ids(dm, split), split
            assert len(loader) == -(-dm.split_size(split) // 4)

    def test_train_order_changes_between_epochs(self, case: ContractCase) -> None:
        dm = case.make(val_split=0.0, batch_size=4)
        dm.setup("fit")
        loader = dm.train_dataloader()
        orders = []
        for epoch in (0, 1, 0):
            loader.sampler.set_epoch(epoch)
            orders.append(ids_of_loader(loader, case.batch_ids))
        assert sorted(orders[0]) == sorted(orders[1]) == list(range(case.num_samples))
        assert orders[0] != orders[1]
        assert orders[0] == orders[2]

    def test_a_hand_written_loop_reshuffles_every_epoch(self, case: ContractCase) -> None:
        # for epoch in range(3): for batch in dm.train_dataloader(): ... (a new loader each time)
        dm = case.make(val_split=0, batch_size=4)
        orders = [ids_of_loader(dm.train_dataloader(), case.batch_ids) for _ in range(3)]
        assert all(sorted(order) == list(range(case.num_samples)) for order in orders)
        assert len({tuple(order) for order in orders}) == 3
        # The same loader object iterated again goes on the same way: epochs 0, 1, 2.
        loader = case.make(val_split=0, batch_size=4).train_dataloader()
        assert [ids_of_loader(loader, case.batch_ids) for _ in range(3)] == orders

    def test_set_epoch_decides_the_epoch(self, case: ContractCase) -> None:
        dm = case.make(val_split=0, batch_size=4)
        loader = dm.train_dataloader()
        first = ids_of_loader(loader, case.batch_ids)
        loader.sampler.set_epoch(0)
        assert ids_of_loader(loader, case.batch_ids) == first  # epoch 0 again, as Lightning asks
        loader.sampler.set_epoch(5)
        fifth = ids_of_loader(loader, case.batch_ids)
        assert fifth != first and sorted(fifth) == list(range(case.num_samples))
        assert ids_of_loader(loader, case.batch_ids) != fifth  # then epoch 6 by itself

    @pytest.mark.parametrize("workers", [0, 2])
    def test_overfit_batches_repeats_the_first_batches(
        self, case: ContractCase, workers: int
    ) -> None:
        model = RecordingModel(case.batch_ids)
        trainer = quiet_trainer(max_epochs=3, overfit_batches=2)
        trainer.fit(model, datamodule=case.make(batch_size=4, num_workers=workers))
        epochs = model.train_epochs()
        assert len(epochs) == 3 and [len(batches) for batches in epochs] == [2, 2, 2]
        assert epochs[0] == epochs[1] == epochs[2]
        ids = [i for batch in epochs[0] for i in batch]
        assert len(ids) == 8 and len(set(ids)) == 8

    def test_reuse_batch_memory_reaches_the_loader(self, case: ContractCase) -> None:
        for reuse in (True, False):
            dm = case.make(val_split=0.0, batch_size=4, num_workers=1, reuse_batch_memory=reuse)
            dm.setup("fit")
            loader = dm.train_dataloader()
            assert (loader.batch_pool is not None) is reuse
            kept = []
            for epoch in range(2):  # every batch of two epochs held at once
                loader.sampler.set_epoch(epoch)
                kept.extend(loader)
            ids = [i for batch in kept for i in case.batch_ids(batch)]
            assert sorted(ids) == sorted(2 * list(range(case.num_samples)))

    def test_eval_loaders_keep_order_and_drop_nothing(self, case: ContractCase) -> None:
        dm = case.make(val_split=0.3, batch_size=4, drop_last=True)
        dm.setup("fit")
        seen = ids_of_loader(dm.val_dataloader(), case.batch_ids)
        assert seen == dm.split_indices["val"].tolist()

    # ---------------------------------------------------------------- Trainer
    def test_trainer_fit_sees_train_and_val_splits(self, case: ContractCase) -> None:
        dm = case.make(val_split=0.2, batch_size=4)
        model = RecordingModel(case.batch_ids)
        quiet_trainer(max_epochs=2).fit(model, datamodule=dm)
        train_epochs = model.train_epochs()
        assert len(train_epochs) == 2
        for batches in train_epochs:
            assert sorted(i for b in batches for i in b) == split_ids(dm, "train")
        assert train_epochs[0] != train_epochs[1]
        for batches in model.val_epochs():
            assert sorted(i for b in batches for i in b) == split_ids(dm, "val")

    def test_trainer_test_and_predict_cover_the_test_split(self, case: ContractCase) -> None:
        dm = case.make(val_split=0.1, test_split=0.2, batch_size=4)
        model = RecordingModel(case.batch_ids)
        trainer = quiet_trainer()
        trainer.test(model, datamodule=dm)
        predictions = trainer.predict(model, datamodule=dm)
        assert sorted(i for _, _, ids in model.seen["test"] for i in ids) == split_ids(dm, "test")
        assert sorted(i for p in predictions for i in p) == split_ids(dm, "test")

    def test_ddp_two_processes_disjoint_complete_even_and_resume_on_3_and_1(
        self, case: ContractCase, tmp_path: Path
    ) -> None:
        if case.ddp_factory is None:
            pytest.fail("the contract needs a ddp_factory for this DataModule")
        checkpoints = tmp_path / "checkpoints"
        ranks = run_ddp(case, tmp_path / "two", extra=("--ckpt-dir", str(checkpoints)))
        dm, batch_ids = _factory(case)(**case.ddp_kwargs)
        dm.setup("fit")
        assert [r["world"] for r in ranks] == [2, 2]
        for stage in ("train", "val"):
            expected = split_ids(dm, stage)
            if not expected:
                continue
            for epoch in range(2):
                per_rank = [r[stage][epoch] for r in ranks]
                assert len(per_rank[0]) == len(per_rank[1]), f"{stage}: uneven batch counts"
                ids = [Counter(i for b in batches for i in b) for batches in per_rank]
                assert not (set(ids[0]) & set(ids[1])), f"{stage}: ranks overlap"
                union = ids[0] + ids[1]
                assert sorted(union.elements()) == expected, f"{stage}: incomplete or repeated"
        # Elastic resume: the checkpoint taken after 2 batches on 2 ranks resumes on 3 ranks
        # (DDP) and on 1 (in this process). Across both runs every train sample of that
        # epoch once, the same batch count on every rank, then whole, validated epochs.
        train = split_ids(dm, "train")
        step = 2
        seen = [i for r in ranks for batch in r["train"][0][:step] for i in batch]
        ckpt = checkpoints / f"epoch=0-step={step}.ckpt"
        three = run_ddp(case, tmp_path / "three", devices=3, extra=("--resume", str(ckpt)))
        model = RecordingModel(batch_ids)
        quiet_trainer(max_epochs=2).fit(model, datamodule=dm, ckpt_path=ckpt)
        one = [{"train": model.train_epochs(), "val": model.val_epochs()}]
        for resumed in (three, one):
            world = len(resumed)
            rest = [i for r in resumed for batch in r["train"][0] for i in batch]
            assert sorted(seen + rest) == train, world
            assert len({len(r["train"][0]) for r in resumed}) == 1, world  # even
            nxt = [i for r in resumed for batch in r["train"][1] for i in batch]
            assert sorted(nxt) == train and len({len(r["train"][1]) for r in resumed}) == 1
            assert all(len(r["val"]) == 2 for r in resumed), world  # validated after both

    @pytest.mark.parametrize("workers_index", [0, 1])
    def test_resume_mid_epoch_is_exact(
        self, case: ContractCase, tmp_path: Path, workers_index: int
    ) -> None:
        if workers_index >= len(case.resume_workers):
            pytest.fail("resume_workers needs two worker counts")
        workers = case.resume_workers[workers_index]
        batch_size = 4

        def make() -> BaseDataModule:
            return case.make(val_split=0.2, batch_size=batch_size, num_workers=workers)

        reference = assert_resume_mid_epoch_is_exact(make, case.batch_ids, tmp_path)
        assert len(reference[0]) >= 3

    def test_resume_with_another_batch_size_keeps_the_trainer_length_right(
        self, case: ContractCase, tmp_path: Path
    ) -> None:
        # 4 -> 3 -> 5 samples per batch: the second resume starts from a checkpoint taken at
        # the last batch of the first resumed epoch; every epoch stays complete and validated.
        def make(batch_size: int) -> BaseDataModule:
            return case.make(val_split=0.2, batch_size=batch_size)

        def fit(batch_size: int, out: Path, ckpt: Path | None) -> RecordingModel:
            model = RecordingModel(case.batch_ids)
            saver = ModelCheckpoint(dirpath=out, every_n_train_steps=1, save_top_k=-1)
            trainer = quiet_trainer(max_epochs=2, enable_checkpointing=True, callbacks=[saver])
            trainer.fit(model, datamodule=make(batch_size), ckpt_path=ckpt)
            return model

        first = fit(4, tmp_path / "a", None)
        train = sorted(i for batch in first.train_epochs()[0] for i in batch)
        seen = [i for batch in first.train_epochs()[0][:2] for i in batch]
        second = fit(3, tmp_path / "b", tmp_path / "a" / "epoch=0-step=2.ckpt")
        rest = second.train_epochs()[0]
        assert sorted(seen + [i for batch in rest for i in batch]) == train
        assert [len(e) for e in second.val_epochs()] == [len(second.val_epochs()[0])] * 2
        assert sorted(i for b in second.train_epochs()[1] for i in b) == train
        ended = tmp_path / "b" / f"epoch=0-step={2 + len(rest)}.ckpt"
        third = fit(5, tmp_path / "c", ended)
        epochs = third.train_epochs()
        assert len(epochs) == 1  # epoch 0 had ended: only epoch 1 is left
        assert sorted(i for batch in epochs[0] for i in batch) == train
        assert len(epochs[0]) == -(-len(train) // 5)  # a whole fresh epoch of batches of 5
        assert len(third.val_epochs()) == 1

    # ---------------------------------------------------------------- bad input
    @pytest.mark.parametrize(
        ("kwargs", "error", "named"),
        [
            ({"batch_size": 0}, ValueError, "batch_size"),
            ({"batch_size": 2.5}, TypeError, "batch_size"),
            ({"val_split": 1.5}, ValueError, "val_split"),
            ({"val_split": 1.0}, ValueError, r"val_split=1.0 .* a fraction must be in \[0, 1\)"),
            ({"test_split": 5.0}, ValueError, "test_split=5.0"),
            ({"val_split": -1}, ValueError, "val_split"),
            ({"test_split": "10%"}, TypeError, "test_split"),
            ({"val_split": 0.6, "test_split": 0.4}, ValueError, "val_split"),
            ({"num_workers": "fast"}, ValueError, "num_workers"),
            ({"num_workers": -1}, ValueError, "num_workers"),
            ({"pin_memory": "yes"}, ValueError, "pin_memory"),
            ({"persistent_workers": 1}, TypeError, "persistent_workers"),
            ({"prefetch_factor": 0}, ValueError, "prefetch_factor"),
            ({"shuffle": "no"}, TypeError, "shuffle"),
            ({"reuse_batch_memory": "yes"}, TypeError, "reuse_batch_memory"),
        ],
    )
    def test_bad_arguments_raise_early_naming_the_argument(
        self, case: ContractCase, kwargs: dict[str, Any], error: type[Exception], named: str
    ) -> None:
        with pytest.raises(error, match=named):
            case.make(**kwargs)

    def test_splits_leaving_no_training_data_raise_at_setup(self, case: ContractCase) -> None:
        dm = case.make(val_split=case.num_samples, test_split=0)
        with pytest.raises(ValueError, match="val_split"):
            dm.setup("fit")

    def test_state_dict_round_trip_and_fingerprint_check(self, case: ContractCase) -> None:
        dm = case.make(val_split=0.2, batch_size=4)
        dm.setup("fit")
        loader = dm.train_dataloader()
        iterator = iter(loader)
        consumed = [case.batch_ids(next(iterator)) for _ in range(2)]
        rest = [case.batch_ids(b) for b in iterator]
        assert len(consumed) + len(rest) == len(loader)
        again = case.make(val_split=0.2, batch_size=4)
        again.setup("fit")
        fresh = dm_state_after(case, 2)
        again.load_state_dict(fresh)
        assert [case.batch_ids(b) for b in again.train_dataloader()] == rest
        other = case.make(val_split=0.3, batch_size=4)
        other.setup("fit")
        with pytest.raises(ValueError, match="fingerprint"):
            other.load_state_dict(fresh)


def dm_state_after(case: ContractCase, batches: int) -> dict[str, Any]:
    """The state of a fresh DataModule whose train loader has yielded ``batches`` batches."""
    dm = case.make(val_split=0.2, batch_size=4)
    dm.setup("fit")
    iterator = iter(dm.train_dataloader())
    for _ in range(batches):
        next(iterator)
    return dm.state_dict()


def _factory(case: ContractCase) -> Callable[..., Any]:
    import importlib

    module_name, fn_name = str(case.ddp_factory).split(":")
    return getattr(importlib.import_module(module_name), fn_name)


def label_fraction(labels: torch.Tensor, indices: torch.Tensor) -> dict[int, float]:
    """Share of each label among ``labels[indices]``."""
    counts = Counter(labels[indices].tolist())
    return {k: v / len(indices) for k, v in counts.items()}
