"""StreamingDataModule epochs: a hand-written loop reshuffles every epoch (the same loader or a
new one), an explicit ``set_epoch`` decides, eval loaders keep their order, and
``Trainer(overfit_batches=n)`` trains on the same first n batches every epoch."""

from __future__ import annotations

from typing import Any

import pytest

from tests.datamodules.contract import quiet_trainer
from tests.datamodules.streaming.test_datamodule import (
    TRAIN,
    VAL,
    batch_ids,
    loader_ids,
    make,
    write_splits,
)
from tests.recording import RecordingModel


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return write_splits(tmp_path_factory.mktemp("epochs"))


@pytest.mark.parametrize("workers", [0, 2])
def test_hand_written_loop_reshuffles_every_epoch(data, workers):
    dm = make(data, num_workers=workers)
    orders = []
    for _epoch in range(3):  # a new loader each epoch, as a hand-written loop does
        orders.append([i for batch in dm.train_dataloader() for i in batch_ids(batch)])
    for order in orders:
        assert sorted(order) == TRAIN  # every record exactly once per epoch
    assert len({tuple(order) for order in orders}) == 3  # three different orders

    one = make(data, num_workers=workers).train_dataloader()
    assert [loader_ids(one) for _ in range(3)] == orders  # one loader, three iterations

    one.set_epoch(1)  # an explicit set_epoch decides
    assert loader_ids(one) == orders[1]
    assert loader_ids(one) == orders[2]  # and the next iteration continues from it
    again = make(data, num_workers=workers)
    again.train_dataloader().set_epoch(2)  # on a loader never iterated: the next loader's
    assert loader_ids(again.train_dataloader()) == orders[2]

    # Eval loaders keep their fixed order, iteration after iteration, loader after loader.
    val = dm.val_dataloader()
    first = loader_ids(val)
    assert sorted(first) == VAL
    assert loader_ids(val) == first and loader_ids(dm.val_dataloader()) == first


def test_trainer_epochs_follow_current_epoch(data):
    """Under a Trainer the epochs are the Trainer's: the same orders as the loop above."""
    loop = make(data, num_workers=0)
    orders = [loader_ids(loop.train_dataloader()) for _ in range(2)]
    model = RecordingModel(batch_ids)
    quiet_trainer(max_epochs=2).fit(model, datamodule=make(data, num_workers=0))
    assert [[i for b in e for i in b] for e in model.train_epochs()] == orders


@pytest.mark.parametrize("workers", [0, 2])
def test_overfit_batches_repeats_the_same_batches(data, workers):
    dm = make(data, num_workers=workers)
    model = RecordingModel(batch_ids)
    with pytest.warns(UserWarning, match="overfit"):
        quiet_trainer(max_epochs=3, overfit_batches=2).fit(model, datamodule=dm)
    epochs = model.train_epochs()
    assert len(epochs) == 3
    assert epochs[0] == epochs[1] == epochs[2]
    assert len(epochs[0]) == 2 and all(len(b) == 4 for b in epochs[0])
    ids = [i for b in epochs[0] for i in b]
    assert len(set(ids)) == 8 and set(ids) <= set(TRAIN)
    assert all(len(e) == 2 for e in model.val_epochs())  # validation is limited too
