"""ResumableDataLoader's batches per message: with workers, a view that asks for it gets k
consecutive batches of the sampler at a time and sends them as one message; the loader still
yields the sampler's batches one by one, in order, with the sampler's length."""

from __future__ import annotations

from typing import Any

import torch

from datamodules.core.loaders import GroupedBatches, ResumableDataLoader
from datamodules.core.samplers import IndexBatchSampler
from datamodules.core.views import TensorBatchView


class MessageView(TensorBatchView):
    """Tensor batches that also say how many batches shared their worker message."""

    batches_per_message = 3

    def __getitem__(self, batch: Any) -> Any:
        if isinstance(batch, list):
            return [{**self[b], "message": torch.tensor(len(batch))} for b in batch]
        return {**super().__getitem__(batch), "message": torch.tensor(1)}


def loader(workers: int, grouped: bool) -> ResumableDataLoader:
    data = {"x": torch.arange(50).float()[:, None]}
    view = MessageView(data, torch.arange(50))
    sampler = IndexBatchSampler(50, 4, shuffle=True, seed=3)
    return ResumableDataLoader(
        view,
        sampler=sampler,
        num_workers=workers,
        batches_per_message=view.batches_per_message if grouped else 1,
        persistent_workers=workers > 0,
    )


def ids(batches: Any) -> list[list[float]]:
    return [b["x"][:, 0].tolist() for b in batches]


def test_grouped_messages_yield_the_samplers_batches_in_order() -> None:
    in_process = loader(0, grouped=True)  # no workers: no messages, no groups
    plain = [ids(in_process), ids(in_process)]  # two epochs, reshuffled
    assert plain[0] != plain[1]
    grouped = loader(2, grouped=True)
    assert len(grouped) == len(plain[0]) == 13
    for epoch in range(2):  # two epochs through persistent workers
        batches = list(grouped)
        assert ids(batches) == plain[epoch]
        assert [int(b["message"]) for b in batches] == [3] * 12 + [1]  # 13 = 3+3+3+3+1
    ungrouped = loader(2, grouped=False)
    batches = list(ungrouped)
    assert ids(batches) == plain[0] and [int(b["message"]) for b in batches] == [1] * 13


def test_grouped_batches_cut_the_sampler_k_at_a_time() -> None:
    groups = list(GroupedBatches([1, 2, 3, 4, 5, 6, 7], 3))
    assert groups == [[1, 2, 3], [4, 5, 6], [7]] and len(GroupedBatches(range(7), 3)) == 3
