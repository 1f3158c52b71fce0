"""Reused shared-memory batch buffers: exact contents through real DataLoader workers."""

from __future__ import annotations

import pytest
import torch

from datamodules.core.loaders import ResumableDataLoader
from datamodules.core.samplers import IndexBatchSampler
from datamodules.core.shared_batches import SharedBatchPool, empty_batch

N, BATCH, SIDE = 48, 8, 96  # one batch of images: 8 x 3 x 96 x 96 floats = 884 KB


class Images:
    """Batch ``i`` holds image ``k`` filled with ``k`` (so any overwrite shows)."""

    def __init__(self, direct: bool = False, fail_on: int | None = None) -> None:
        self.direct = direct
        self.fail_on = fail_on

    def __len__(self) -> int:
        return N

    def __getitem__(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.direct:
            images = empty_batch((len(rows), 3, SIDE, SIDE), torch.float32, channels_last=True)
        else:
            images = torch.empty(len(rows), 3, SIDE, SIDE)
        for i, row in enumerate(rows.tolist()):
            if row == self.fail_on:
                raise ValueError(f"sample {row} is broken")
            images[i] = float(row)
        return images, rows.clone()


def loader(dataset, workers: int = 2, **kwargs) -> ResumableDataLoader:
    sampler = IndexBatchSampler(N, BATCH, shuffle=True, seed=3)
    return ResumableDataLoader(dataset, sampler=sampler, num_workers=workers, **kwargs)


def check(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    images, rows = batch
    expected = rows.to(torch.float32).view(-1, 1, 1, 1).expand(-1, 3, SIDE, SIDE)
    assert torch.equal(images, expected)


def test_batches_are_exact_and_slots_are_reused_across_epochs():
    dl = loader(Images(), persistent_workers=True)
    seen = []
    for epoch in range(3):
        dl.sampler.set_epoch(epoch)
        rows = []
        for batch in dl:
            check(batch)
            rows.extend(batch[1].tolist())
        assert sorted(rows) == list(range(N))
        seen.append(rows)
    assert seen[0] != seen[1]  # reshuffled, so the slots carried different batches
    stats = dl.batch_pool.stats()
    batches = 3 * N // BATCH
    assert stats["pooled"] == batches and stats["fallback"] == 0
    assert 2 <= stats["slots"] <= 2 * dl.batch_pool.slots_per_worker < batches


def test_direct_writes_keep_layout_and_values():
    dl = loader(Images(direct=True), persistent_workers=True)
    batches = list(dl)
    for batch in batches:
        check(batch)
        assert batch[0].is_contiguous(memory_format=torch.channels_last)
    assert dl.batch_pool.stats()["pooled"] == N // BATCH


def test_kept_batches_are_never_overwritten():
    dl = loader(Images(), persistent_workers=True)
    kept = []
    for epoch in range(3):  # 18 batches held at once: far more than the slots
        dl.sampler.set_epoch(epoch)
        kept.extend(dl)
    for batch in kept:
        check(batch)
    stats = dl.batch_pool.stats()
    assert stats["pooled"] + stats["fallback"] == len(kept) == 3 * N // BATCH
    assert stats["fallback"] > 0  # every slot stayed taken, so the rest went the usual way


def test_non_persistent_workers_release_the_mappings_after_each_epoch():
    dl = loader(Images(), persistent_workers=False)
    for epoch in range(2):
        dl.sampler.set_epoch(epoch)
        for batch in dl:
            check(batch)
            assert dl.batch_pool.mapped_bytes > 0
        assert dl.batch_pool.mapped_bytes == 0
    assert dl.batch_pool.stats()["pooled"] == 2 * N // BATCH


def test_a_failed_batch_frees_its_slot_and_the_loader_recovers():
    dataset = Images(direct=True, fail_on=5)
    dl = loader(dataset, persistent_workers=True)
    with pytest.raises(ValueError, match="sample 5 is broken"):
        list(dl)
    dataset.fail_on = None  # workers restart after the error, with the fixed dataset
    for epoch in range(2):
        dl.sampler.set_epoch(epoch)
        assert sum(len(check(b) or b[1]) for b in dl) == N


def test_spawned_workers_share_the_pool():
    dl = loader(Images(), workers=1, multiprocessing_context="spawn", persistent_workers=True)
    for epoch in range(2):
        dl.sampler.set_epoch(epoch)
        for batch in dl:
            check(batch)
    stats = dl.batch_pool.stats()
    assert stats["pooled"] == 2 * N // BATCH and stats["fallback"] == 0
    assert 1 <= stats["slots"] <= dl.batch_pool.slots_per_worker


class Planes:
    """Batch ``i``: five large int64 tensors (as a packed text batch has), plane ``p`` of
    sample ``k`` filled with ``100 * k + p``, plus a small one and an int."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, rows: torch.Tensor) -> dict[str, object]:
        base = (rows * 100).view(-1, 1).expand(-1, 4096)  # 8 x 4096 int64 = 256 KB a plane
        out: dict[str, object] = {f"plane{p}": base + p for p in range(5)}
        out["rows"] = rows.clone()
        out["count"] = len(rows)
        return out


def test_a_batch_of_several_large_tensors_takes_one_slot():
    dl = loader(Planes(), persistent_workers=True)
    for epoch in range(3):
        dl.sampler.set_epoch(epoch)
        rows = []
        for batch in dl:
            for p in range(5):
                expected = (batch["rows"] * 100 + p).view(-1, 1).expand(-1, 4096)
                assert torch.equal(batch[f"plane{p}"], expected)
            assert batch["count"] == len(batch["rows"])
            rows.extend(batch["rows"].tolist())
        assert sorted(rows) == list(range(N))
    stats = dl.batch_pool.stats()
    assert stats["pooled"] == 3 * N // BATCH and stats["fallback"] == 0
    assert stats["slots"] <= 2 * dl.batch_pool.slots_per_worker


def test_kept_multi_tensor_batches_are_never_overwritten():
    dl = loader(Planes(), persistent_workers=True)
    kept = []
    for epoch in range(3):
        dl.sampler.set_epoch(epoch)
        kept.extend(dl)
    for batch in kept:
        for p in range(5):
            assert torch.equal(batch[f"plane{p}"][:, 0], batch["rows"] * 100 + p)
    stats = dl.batch_pool.stats()
    assert stats["pooled"] + stats["fallback"] // 5 == len(kept)
    assert stats["fallback"] > 0


class Mixed:
    """Small tensors of assorted dtypes and layouts, sent by value."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, rows: torch.Tensor) -> dict[str, object]:
        base = torch.arange(60, dtype=torch.float32).view(3, 4, 5) + rows.sum()
        return {
            "transposed": base.transpose(0, 2),
            "bf16": base.to(torch.bfloat16),
            "mask": base > 30,
            "channels_last": base.view(1, 3, 4, 5).contiguous(memory_format=torch.channels_last),
            "empty": torch.empty(0, 7, dtype=torch.int16),
            "offset": base.flatten()[7:19],
            "nested": [rows, (rows * 2,)],
            "name": "batch",
        }


def test_small_tensors_arrive_with_dtype_shape_layout_and_values():
    expected = Mixed()[torch.tensor([0, 1])]
    sampler = IndexBatchSampler(4, 2, shuffle=False)
    dl = ResumableDataLoader(Mixed(), sampler=sampler, num_workers=1)
    got = next(iter(dl))
    assert got["name"] == "batch"
    for key in ("transposed", "bf16", "mask", "channels_last", "empty", "offset"):
        assert got[key].dtype == expected[key].dtype, key
        assert torch.equal(got[key], expected[key]), key
    assert got["transposed"].stride() == expected["transposed"].stride()
    assert got["channels_last"].is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(got["nested"][0], expected["nested"][0])
    assert torch.equal(got["nested"][1][0], expected["nested"][1][0])


def test_in_process_buffers_are_reused_only_once_released():
    first = empty_batch((4, 1000), torch.float32)
    second = empty_batch((4, 1000), torch.float32)
    assert first.data_ptr() != second.data_ptr()
    view = first[1:]
    address = first.data_ptr()
    del first
    third = empty_batch((4, 1000), torch.float32)
    assert third.data_ptr() != address  # a view still holds it
    del view
    assert empty_batch((4, 1000), torch.float32).data_ptr() == address


def test_reuse_can_be_turned_off():
    dl = loader(Images(), reuse_batch_memory=False)
    assert dl.batch_pool is None
    for batch in dl:
        check(batch)


def test_pool_arguments_are_checked():
    with pytest.raises(ValueError, match="num_workers must be >= 1"):
        SharedBatchPool(0, 4)
    with pytest.raises(ValueError, match="slots_per_worker must be >= 1"):
        SharedBatchPool(2, 0)


class Subclassed:
    """torchvision's tensor subclasses: small boxes (by value) and a large mask (a slot)."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, rows: torch.Tensor) -> dict[str, object]:
        from torchvision import tv_tensors

        k = float(rows.sum())
        boxes = torch.tensor([[1.0, 2.0, 30.0, 40.0]]) + k
        return {
            "boxes": tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=(64, 80)),
            "masks": tv_tensors.Mask(torch.full((2, 256, 256), int(k), dtype=torch.uint8)),
        }


def test_tensor_subclasses_arrive_as_themselves_without_a_descriptor_each():
    from torchvision import tv_tensors

    sampler = IndexBatchSampler(4, 2, shuffle=False)
    dl = ResumableDataLoader(Subclassed(), sampler=sampler, num_workers=1)
    for rows, got in zip(([0, 1], [2, 3]), dl, strict=True):
        expected = Subclassed()[torch.tensor(rows)]
        assert type(got["boxes"]) is tv_tensors.BoundingBoxes
        assert got["boxes"].canvas_size == (64, 80) and got["boxes"].format.name == "XYXY"
        assert torch.equal(got["boxes"], expected["boxes"])
        assert type(got["masks"]) is tv_tensors.Mask
        assert torch.equal(got["masks"], expected["masks"])
    stats = dl.batch_pool.stats()
    assert stats["pooled"] == 2 and stats["fallback"] == 0  # the masks in a slot, each time
