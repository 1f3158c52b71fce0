"""Tests for datamodules.stream_engine.stream: exactly once over ranks x workers, equal batch
counts, shuffling, resume and bad records, through real DataLoader worker processes."""

from __future__ import annotations

import json
import math
import os
import random
import types
import warnings
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import datamodules.stream_engine.stream as stream_module
from datamodules.shards.errors import RecordError, ShardError
from datamodules.shards.index import ShardIndex, index_shards
from datamodules.stream_engine.loader import StreamLoader
from datamodules.stream_engine.messages import MESSAGE_BYTES
from datamodules.stream_engine.stream import ShardedStream

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

SIZES = {1: [23], 3: [1, 17, 6], 8: [0, 5, 1, 9, 2, 13, 3, 4]}  # uneven, one shard empty


def batch_ids(samples: list[dict]) -> list[int]:
    """Collate: the ids of a batch (module level, so worker processes can unpickle it)."""
    return [s["id"] for s in samples]


def add_one(record: dict) -> dict:
    return {"id": record["id"], "next": record["id"] + 1}


def write_jsonl(root: Path, name: str, sizes: list[int]) -> list[Path]:
    paths, next_id = [], 0
    for k, n in enumerate(sizes):
        path = root / f"{name}_{k}.jsonl"
        path.write_text("".join(json.dumps({"id": next_id + i}) + "\n" for i in range(n)))
        paths.append(path)
        next_id += n
    return paths


@pytest.fixture(scope="module")
def shard_sets(tmp_path_factory) -> dict[int, list[ShardIndex]]:
    root = tmp_path_factory.mktemp("shards")
    return {
        s: index_shards([str(p) for p in write_jsonl(root, f"s{s}", sizes)], cache_dir=False)
        for s, sizes in SIZES.items()
    }


def make(shards, **kwargs) -> ShardedStream:
    kwargs.setdefault("batch_size", 4)
    kwargs.setdefault("collate", batch_ids)
    return ShardedStream(shards, **kwargs)


def loader(stream: ShardedStream, workers: int, **kwargs) -> StreamLoader:
    if workers:
        kwargs.setdefault("multiprocessing_context", "fork")
    return StreamLoader(stream, num_workers=workers, **kwargs)


def run_epoch(shards, world: int, workers: int, **kwargs) -> list[list[list[int]]]:
    """Batches of ids, per rank, of one epoch through a real DataLoader per rank."""
    return [
        list(loader(make(shards, rank=r, world_size=world, **kwargs), workers))
        for r in range(world)
    ]


def check_exactly_once(per_rank: list[list[list[int]]], total: int, batch_size: int) -> None:
    counts = Counter(i for batches in per_rank for batch in batches for i in batch)
    assert sorted(counts) == list(range(total)) and set(counts.values()) == {1}
    assert len({len(batches) for batches in per_rank}) == 1  # the same number on every rank
    assert all(1 <= len(batch) <= batch_size for batches in per_rank for batch in batches)


@pytest.mark.parametrize("num_shards", [1, 3, 8])
@pytest.mark.parametrize("workers", [0, 1, 2, 3])
@pytest.mark.parametrize("world", [1, 2])
def test_exactly_once_grid(shard_sets, world, workers, num_shards):
    shards = shard_sets[num_shards]
    per_rank = run_epoch(shards, world, workers, shuffle=True, shuffle_buffer=5, seed=1)
    check_exactly_once(per_rank, sum(SIZES[num_shards]), 4)
    total = sum(SIZES[num_shards])
    assert len(per_rank[0]) == math.ceil(math.ceil(total / world) / 4)


# ---------------------------------------------------------------------------- the plan, fast


class IdReader:
    """A reader over virtual shards: shard ``name`` holds ids ``base[name] + [0, count)``."""

    def __init__(self, base: dict[str, int]) -> None:
        self.base = base

    def __call__(self, path: str, start: int, stop: int):
        return iter(range(self.base[path] + start, self.base[path] + stop))


def simulate(stream: ShardedStream, workers: int, monkeypatch) -> list[list[int]]:
    """One rank's epoch with ``workers`` simulated workers taken round-robin, in-process
    (the stream begins its epoch as a StreamLoader would make it). The simulated workers hand
    their batches over one by one, as a StreamLoader's workers deal them out of messages."""
    stream._send_messages = False  # attach_loader(workers > 0) turns messages on
    stream.begin_epoch(workers)
    gens = []
    for w in range(workers):
        info = types.SimpleNamespace(id=w, num_workers=workers)
        monkeypatch.setattr(stream_module, "get_worker_info", lambda info=info: info)
        gens.append(iter(stream))
    monkeypatch.undo()
    out, active = [], list(range(workers))
    while active:
        for w in list(active):
            try:
                out.append(list(next(gens[w])))
            except StopIteration:
                active.remove(w)
    return out


def test_plan_random_configs(monkeypatch):
    """Exactly once, equal batch counts and exact resume at every k for many random layouts
    (degenerate ones included), with workers simulated in-process."""
    rng = random.Random(0)
    warnings.simplefilter("ignore")
    for _ in range(250):
        counts = [rng.choice([0, 1, 2, 5, 13]) for _ in range(rng.randint(1, 6))]
        counts[0] = counts[0] or 1
        base = {f"s{i}": sum(counts[:i]) for i in range(len(counts))}
        world, workers, size = rng.randint(1, 4), rng.randint(1, 4), rng.randint(1, 5)
        kwargs = dict(
            batch_size=size,
            world_size=world,
            reader=IdReader(base),
            drop_last=rng.random() < 0.3,
            shuffle=rng.random() < 0.6,
            shuffle_buffer=rng.choice([0, 2, 3, 10]),
            seed=3,
            epoch=1,
        )
        shards = [(name, c) for name, c in zip(base, counts, strict=True)]
        seen, lengths = Counter(), set()
        for rank in range(world):
            stream = ShardedStream(shards, rank=rank, **kwargs)
            batches = simulate(stream, workers, monkeypatch)
            lengths.add(len(batches))
            assert len(batches) == len(stream)
            assert all(1 <= len(b) <= size for b in batches)
            seen.update(i for b in batches for i in b)
            for k in range(len(batches)):  # (k == len saves as the next epoch)
                resumed = ShardedStream(shards, rank=rank, **kwargs)
                state = {**stream.state_dict(batches=k), "num_workers": workers}
                resumed.load_state_dict(state)
                assert simulate(resumed, workers, monkeypatch) == batches[k:], (kwargs, k)
        assert len(lengths) == 1
        total = sum(counts)
        if kwargs["drop_last"]:
            assert set(seen.values()) <= {1} and len(seen) == total - stream.num_dropped
        else:
            assert sorted(seen) == list(range(total))
            assert sum(seen.values()) == total + stream.num_padded
            if not stream.num_padded:
                assert set(seen.values()) == {1}


def test_degenerate_splits_pad_and_warn():
    shards = [("a", 3)]
    with pytest.warns(UserWarning, match="1 record"):
        streams = [
            ShardedStream(shards, batch_size=1, rank=r, world_size=2, reader=IdReader({"a": 0}))
            for r in range(2)
        ]
    got = [list(s) for s in streams]
    assert [len(g) for g in got] == [2, 2] and streams[0].num_padded == 1
    assert sorted(i for g in got for b in g for i in b) == [0, 0, 1, 2]
    with pytest.warns(UserWarning):
        tiny = [
            ShardedStream([("a", 1)], batch_size=4, rank=r, world_size=3, reader=IdReader({"a": 0}))
            for r in range(3)
        ]
    assert [list(s) for s in tiny] == [[[0]], [[0]], [[0]]]
    summary = ShardedStream(
        shards, batch_size=2, world_size=2, drop_last=True, reader=IdReader({"a": 0})
    ).summary()
    assert summary["batches_per_rank"] == 0 and summary["dropped"] == 3


def test_drop_last_and_last_two_batches(shard_sets):
    per_rank = run_epoch(shard_sets[8], 2, 2, batch_size=5, drop_last=True)
    assert all(len(b) == 5 for batches in per_rank for b in batches)
    assert [len(b) for b in per_rank[0]] == [5, 5, 5]  # floor(floor(37 / 2) / 5)
    # 37 records on 2 ranks with batch 6: 19 and 18; the second rank's last two share 6.
    per_rank = run_epoch(shard_sets[8], 2, 0, batch_size=6)
    assert [len(b) for b in per_rank[0]] == [6, 6, 6, 1]
    assert [len(b) for b in per_rank[1]] == [6, 6, 3, 3]


# ---------------------------------------------------------------------------- shuffling


def test_deterministic_and_reshuffled_each_epoch(shard_sets):
    shards = shard_sets[8]
    kwargs = dict(shuffle=True, shuffle_buffer=6, seed=7)
    first = loader(make(shards, **kwargs), 2)
    epoch0, epoch1 = list(first), list(first)  # a StreamLoader starts a new epoch each time
    again = loader(make(shards, **kwargs), 2)
    assert list(again) == epoch0 and list(again) == epoch1  # same seed, same workers
    assert epoch0 != epoch1
    check_exactly_once([epoch1], 37, 4)
    stream = make(shards, **kwargs)
    stream.set_epoch(1)
    assert list(loader(stream, 2)) == epoch1
    assert list(loader(make(shards, shuffle=True, shuffle_buffer=6, seed=8), 2)) != epoch0
    plain = list(loader(make(shards), 2))  # no shuffle: each batch is a run of the sequence
    assert all(b == list(range(b[0], b[0] + len(b))) for b in plain)
    check_exactly_once([plain], 37, 4)


def test_transform_applied_in_workers(shard_sets):
    stream = make(shard_sets[3], transform=add_one, collate=None)  # default: a list of samples
    batches = list(loader(stream, 2))
    assert all(s["next"] == s["id"] + 1 for b in batches for s in b)


# ---------------------------------------------------------------------------- resume


@pytest.mark.parametrize("workers", [0, 2, 3])
def test_resume_mid_epoch_is_exact(shard_sets, workers):
    shards = shard_sets[8]
    kwargs = dict(shuffle=True, shuffle_buffer=8, seed=5, batch_size=3, rank=1, world_size=2)
    reference = loader(make(shards, **kwargs), workers)
    list(reference)  # epoch 0
    full = list(reference)  # epoch 1
    next_epoch = list(reference)

    original = loader(make(shards, **kwargs), workers, persistent_workers=bool(workers))
    list(original)
    it = iter(original)
    head = [next(it) for _ in range(2)]
    state = json.loads(json.dumps(original.state_dict()))  # as a checkpoint stores it
    del it
    assert state["epoch"] == 1 and state["batches"] == 2

    resumed = loader(make(shards, **kwargs), workers)
    resumed.load_state_dict(state)
    it = iter(resumed)
    middle = [next(it) for _ in range(2)]
    state2 = resumed.state_dict()
    assert state2["batches"] == 4
    del it
    again = loader(make(shards, **kwargs), workers)  # a second resume in the same epoch
    again.load_state_dict(state2)
    tail = list(again)
    assert head + middle + tail == full  # the same batches, in the same order
    assert list(again) == next_epoch  # and then the next epoch
    assert again.state_dict()["epoch"] == 3 and again.state_dict()["batches"] == 0


def test_resume_refuses_what_cannot_be_exact(shard_sets):
    """Other shards, seed, shuffle settings or drop_last refuse, naming what to keep; another
    world size, worker count or batch size is accepted (the rest of the epoch is re-split)."""
    stream = make(shard_sets[8], world_size=2, shuffle=True, shuffle_buffer=6)
    state = {**stream.state_dict(batches=3), "num_workers": 2}
    for kwargs, match in [
        (dict(seed=9), "seed=0, this stream has seed=9.*keep shuffle_seed=0"),
        (dict(shuffle_buffer=4), "shuffle_buffer=6, this stream has shuffle_buffer=4"),
        (dict(shuffle=False), "shuffle=True, this stream has shuffle=False"),
        (dict(drop_last=True), "drop_last=False, this stream has drop_last=True"),
    ]:
        other = make(
            shard_sets[8], **{"world_size": 2, "shuffle": True, "shuffle_buffer": 6, **kwargs}
        )
        with pytest.raises(ValueError, match=match):
            other.load_state_dict(state)
    with pytest.raises(ValueError, match="num_records=37, this stream has num_records=24"):
        make(shard_sets[3], world_size=2, shuffle=True, shuffle_buffer=6).load_state_dict(state)
    reordered = list(reversed(shard_sets[8]))
    with pytest.raises(ValueError, match="other shards"):
        make(reordered, world_size=2, shuffle=True, shuffle_buffer=6).load_state_dict(state)
    for kwargs in (dict(world_size=3, rank=2), dict(batch_size=5), dict()):
        elastic = make(shard_sets[8], shuffle=True, shuffle_buffer=6, **kwargs)
        elastic.load_state_dict(state)  # accepted
        assert len(elastic) >= 1


def test_state_counts_consumed_batches(shard_sets):
    stream_loader = loader(make(shard_sets[8]), 2)
    it = iter(stream_loader)
    next(it)
    assert stream_loader.state_dict()["batches"] == 1
    stream_loader.consumed_batches = lambda: 0  # e.g. the Trainer's count
    assert stream_loader.state_dict()["batches"] == 0
    list(it)
    stream_loader.consumed_batches = None
    assert stream_loader.state_dict()["epoch"] == 1  # a finished epoch saves as the next


def test_stateful_dataloader_worker_states(shard_sets):
    import torchdata.stateful_dataloader as stateful  # a project dependency

    shards = shard_sets[8]
    kwargs = dict(shuffle=True, shuffle_buffer=4, seed=2, batch_size=3)

    def build():
        return stateful.StatefulDataLoader(
            make(shards, **kwargs), batch_size=None, num_workers=2, multiprocessing_context="fork"
        )

    full = list(build())
    first = build()
    it = iter(first)
    head = [next(it) for _ in range(3)]
    state = first.state_dict()
    del it
    second = build()
    second.load_state_dict(state)
    assert head + list(second) == full


# ---------------------------------------------------------------------------- formats, errors


def test_parquet_shards_by_row_group(tmp_path):
    paths, next_id = [], 0
    for k, n in enumerate([7, 0, 20, 4]):
        path = tmp_path / f"p{k}.parquet"
        pq.write_table(pa.table({"id": list(range(next_id, next_id + n))}), path, row_group_size=3)
        paths.append(str(path))
        next_id += n
    shards = index_shards(paths, cache_dir=False)
    check_exactly_once(run_epoch(shards, 2, 2, shuffle=True, shuffle_buffer=4), 31, 4)


def write_bad(root: Path) -> list[str]:
    a, b = root / "bad_a.jsonl", root / "bad_b.jsonl"
    a.write_text('{"id": 0}\n{"id": 1}\n{oops\n{"id": 2}\n')
    b.write_text('{"id": 3}\n[1, \n{"id": 4}\n{"id": 5}\n')
    return [str(a), str(b)]


def test_bad_records_skip_is_exact(tmp_path):
    shards = index_shards(write_bad(tmp_path), on_error="skip", cache_dir=False)
    assert [s.count for s in shards] == [3, 3] and [s.skipped for s in shards] == [1, 1]
    per_rank = run_epoch(shards, 2, 2, batch_size=2, on_error="skip")
    check_exactly_once(per_rank, 6, 2)
    with pytest.raises(ValueError, match="indexed with on_error='skip'"):
        make(shards, on_error="raise")


def test_bad_records_raise_from_worker(tmp_path):
    shards = index_shards(write_bad(tmp_path), cache_dir=False)
    with pytest.raises(RecordError, match="bad_a.jsonl: line 3: invalid JSON"):
        list(loader(make(shards, batch_size=2), 1))


def test_changed_shard_is_detected(tmp_path):
    """A shard whose size changed since setup indexed it is refused when it is opened."""
    (path,) = write_jsonl(tmp_path, "c", [10])
    size = path.stat().st_size
    shards = index_shards([str(path)], cache_dir=False)
    path.write_text('{"id": 0}\n')
    with pytest.raises(ShardError, match=rf"c_0\.jsonl: the shard changed .*size {size} -> 10\)"):
        list(make(shards))


def test_a_shard_rewritten_to_its_old_size_and_time_is_caught_by_its_record_count(tmp_path):
    """Same bytes and modification time, fewer records: the count the index promised is named."""
    (path,) = write_jsonl(tmp_path, "c", [10])
    before = path.stat()
    shards = index_shards([str(path)], cache_dir=False)
    one = '{"id": 0, "pad": "'
    path.write_text(one + "x" * (before.st_size - len(one) - 3) + '"}\n')
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    with pytest.raises(RuntimeError, match="changed after indexing"):
        list(make(shards))


def test_bad_arguments(shard_sets):
    shards = shard_sets[3]
    for kwargs, match in [
        (dict(batch_size=0), "batch_size=0"),
        (dict(rank=2, world_size=2), "rank=2"),
        (dict(shuffle_buffer=-1), "shuffle_buffer=-1"),
        (dict(on_error="ignore"), "on_error='ignore'"),
    ]:
        with pytest.raises(ValueError, match=match):
            make(shards, **kwargs)
    with pytest.raises(ValueError, match="shards=\\[\\]"):
        make([])
    with pytest.raises(ValueError, match="batch_size is set on the ShardedStream"):
        StreamLoader(make(shards), batch_size=4)


# ---------------------------------------------------------------------------- Lightning


def id_tensor(samples: list[dict]):
    import torch

    return torch.tensor([s["id"] for s in samples])


def test_lightning_checkpoint_resume_is_exact(shard_sets, tmp_path):
    """A checkpoint taken mid-epoch and resumed yields exactly the batches not yet seen."""
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint

    class Recorder(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.seen: list[tuple[int, list[int]]] = []

        def training_step(self, batch, batch_idx):
            self.seen.append((self.current_epoch, batch.tolist()))
            return self.layer(batch.float()[:, None]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    def fit(model, ckpt_path=None, **kwargs):
        stream = make(
            shard_sets[8], batch_size=5, shuffle=True, shuffle_buffer=4, collate=id_tensor
        )
        trainer = pl.Trainer(
            accelerator="cpu",
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            max_epochs=2,
            **kwargs,
        )
        trainer.fit(model, loader(stream, 2, persistent_workers=True), ckpt_path=ckpt_path)
        return model.seen

    reference = fit(Recorder(), enable_checkpointing=False)
    assert len(reference) == 16  # 8 batches of 37 records, 2 epochs
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=11, save_top_k=-1)
    first = fit(Recorder(), max_steps=11, callbacks=[ckpt])  # stops in epoch 1 at batch 3
    (path,) = tmp_path.glob("*.ckpt")
    resumed = fit(Recorder(), ckpt_path=path, enable_checkpointing=False)
    assert first + resumed == reference


BIG = MESSAGE_BYTES // 8 + 1  # int64 elements: a batch too large to share a message


def mixed_batch(samples: list[dict]):
    import torch

    ids = torch.tensor([s["id"] for s in samples])
    return {
        "ids": ids,
        "pair": (ids * 2, [ids[:1].to(torch.float32)]),
        "big": torch.ones(BIG, dtype=torch.int64) * ids[0],  # past MESSAGE_BYTES: one a message
        "bf16": ids.to(torch.bfloat16),
        "names": [str(s["id"]) for s in samples],
    }


def test_stream_loader_batches_keep_their_types(shard_sets):
    import torch

    stream_loader = loader(make(shard_sets[3], collate=mixed_batch), 2)
    batches = list(stream_loader)  # all kept: the reused buffers must not be overwritten
    assert sorted(i for b in batches for i in b["ids"].tolist()) == list(range(24))
    stats = stream_loader.batch_pool.stats()
    assert stats["pooled"] + stats["fallback"] == len(batches) and stats["pooled"] >= 2
    for b in batches:
        assert torch.equal(b["big"], torch.full((BIG,), int(b["ids"][0])))
        assert isinstance(b["ids"], torch.Tensor) and b["ids"].dtype == torch.int64
        doubled, (first,) = b["pair"]
        assert torch.equal(doubled, b["ids"] * 2) and first.dtype == torch.float32
        assert isinstance(b["pair"], tuple) and b["big"].shape == (BIG,)
        assert b["bf16"].dtype == torch.bfloat16 and b["names"] == [
            str(i) for i in b["ids"].tolist()
        ]
        b["ids"] += 1  # writable, like any DataLoader batch
