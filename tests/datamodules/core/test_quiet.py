"""Lightning's "few workers" advice is silenced for our loaders alone, and only while Lightning
checks them: no process-wide warning filter outlives a loader's first iteration."""

from __future__ import annotations

import gc
import warnings

import pytest
import torch
from lightning.pytorch.utilities.warnings import PossibleUserWarning

from datamodules import StreamingDataModule, TensorDataModule
from datamodules.core.quiet import HeldFilters, quiet

ADVICE = (
    "The 'train_dataloader' does not have many workers which may be a bottleneck. Consider "
    "increasing the value of the `num_workers` argument` to `num_workers=7` in the `DataLoader`"
)


def emitted(message: str, category: type[Warning]) -> bool:
    with warnings.catch_warnings(record=True) as seen:  # keeps the current filters
        warnings.warn(message, category, stacklevel=1)
    return bool(seen)


def test_the_advice_is_ignored_until_the_loader_is_iterated_then_shown_again() -> None:
    before = list(warnings.filters)
    loader = TensorDataModule(torch.arange(20.0), batch_size=5).train_dataloader()
    assert len(warnings.filters) == len(before) + 1
    assert not emitted(ADVICE, PossibleUserWarning)  # Lightning checks it now: quiet
    assert sum(1 for _ in loader) == 4  # iterated: Lightning is done checking it
    assert warnings.filters == before
    assert emitted(ADVICE, PossibleUserWarning)  # the user's own loaders still get it


def test_a_loader_with_a_users_worker_count_keeps_the_advice() -> None:
    before = list(warnings.filters)
    TensorDataModule(torch.arange(20.0), num_workers=0).train_dataloader()
    assert warnings.filters == before and emitted(ADVICE, PossibleUserWarning)


def test_a_freed_loader_releases_its_filters(tmp_path) -> None:
    before = list(warnings.filters)
    (tmp_path / "a.jsonl").write_text('{"id": 1}\n{"id": 2}\n')
    dm = StreamingDataModule(tmp_path / "a.jsonl", index_cache=False)
    loader = dm.train_dataloader()
    assert len(warnings.filters) == len(before) + 2  # few workers, IterableDataset length
    del loader
    gc.collect()
    assert warnings.filters == before


def test_quiet_removes_only_its_own_entries() -> None:
    before = list(warnings.filters)
    with quiet([("never shown", UserWarning)]):
        warnings.filterwarnings("error", message="the user's own")
        assert not emitted("never shown here", UserWarning)
    assert warnings.filters[0][1].pattern == "the user's own"  # the user's filter stays
    warnings.filters.remove(warnings.filters[0])
    assert warnings.filters == before
    held = HeldFilters([("held", UserWarning)])
    held.release()
    held.release()
    assert warnings.filters == before


@pytest.mark.filterwarnings("error::UserWarning")
def test_nothing_of_ours_is_left_in_the_filters_after_a_fit(tmp_path) -> None:
    from tests.datamodules.contract import quiet_trainer
    from tests.recording import RecordingModel

    before = list(warnings.filters)
    dm = TensorDataModule(torch.arange(40.0), batch_size=8)
    quiet_trainer(max_epochs=1).fit(RecordingModel(lambda b: b[0].long().tolist()), dm)
    assert [f for f in warnings.filters if f not in before] == []
