"""Elastic resume of ShardedStream, exhaustively in-process: a checkpoint taken mid-epoch on
W1 ranks x K1 workers resumed on W2 x K2 (W in 1..3, K in 0..3, every combination, shuffled
through buffers, uneven shards, other batch sizes, resumes of resumes).

Ranks are simulated by one stream per rank, workers by the same round-robin as the DataLoader
(``simulate`` of test_stream.py); K=0 iterates in the main process. Every check is exact:
the multiset of ids delivered over all runs, the batch counts per rank, the next epoch
against a fresh run on the new layout.
"""

from __future__ import annotations

import json
import random
import warnings
from collections import Counter
from typing import Any

import pytest

from datamodules.core.elastic import Segment
from datamodules.stream_engine.elastic import remainder, runs
from datamodules.stream_engine.stream import ShardedStream
from tests.datamodules.streaming.test_stream import IdReader, simulate

LAYOUTS = {
    "one": [41],
    "uneven": [1, 17, 6, 0, 9, 2],  # 35 records, one empty shard
    "many": [0, 5, 1, 9, 2, 13, 3, 4, 7],  # 44 records
}
SEED, BUFFER = 11, 5
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def shards_of(counts: list[int]) -> tuple[list[tuple[str, int]], IdReader]:
    base = {f"s{i}": sum(counts[:i]) for i in range(len(counts))}
    return list(zip(base, counts, strict=True)), IdReader(base)


def epoch_batches(stream: ShardedStream, workers: int, monkeypatch) -> list[list[int]]:
    """One iteration of a rank's stream as a StreamLoader with ``workers`` workers yields it."""
    if workers == 0:
        stream.begin_epoch(1)
        return [list(b) for b in stream]
    return simulate(stream, workers, monkeypatch)


class Run:
    """One run of a job: ``world`` ranks x ``workers`` workers, optionally from a state."""

    def __init__(self, counts, world, workers, batch_size, state=None, **kwargs: Any) -> None:
        shards, reader = shards_of(counts)
        options = dict(shuffle=True, shuffle_buffer=BUFFER, seed=SEED, reader=reader, **kwargs)
        self.workers = workers
        self.streams = []
        for rank in range(world):
            stream = ShardedStream(
                shards, batch_size=batch_size, rank=rank, world_size=world, **options
            )
            stream.attach_loader(workers)  # as StreamLoader does
            if state is not None:
                stream.load_state_dict(json.loads(json.dumps(state)))  # as a checkpoint
            self.streams.append(stream)

    def epoch(self, monkeypatch, stop: int | None = None) -> tuple[list[list[list[int]]], dict]:
        """Each rank's batches of the next epoch (the first ``stop`` of them), and rank 0's
        state after them (what Lightning checkpoints)."""
        lengths = {len(s) for s in self.streams}
        assert len(lengths) == 1, "ranks disagree on the epoch's length"
        per_rank, states = [], []
        for stream in self.streams:
            batches = epoch_batches(stream, self.workers, monkeypatch)
            begin = len(stream) - len(batches)  # batches delivered before this run
            kept = batches if stop is None else batches[:stop]
            per_rank.append(kept)
            states.append(stream.state_dict(batches=begin + len(kept)))
        assert len({len(b) for b in per_rank}) == 1, "ranks got different batch counts"
        assert all(s == states[0] for s in states), "ranks would checkpoint different states"
        return per_rank, states[0]


def ids(per_rank: list[list[list[int]]]) -> Counter:
    return Counter(i for batches in per_rank for batch in batches for i in batch)


def check_resume(counts, plan, monkeypatch, drop_last: bool = False) -> None:
    """Runs ``plan`` = [(world, workers, batch_size, stop), ...]: each run resumes the
    previous one's checkpoint and stops after ``stop`` batches per rank (None: the end of
    the epoch; then the next epoch is compared with a fresh run on that layout)."""
    total = sum(counts)
    seen: Counter = Counter()
    state = None
    repeats = 0
    for world, workers, batch_size, stop in plan:
        run = Run(counts, world, workers, batch_size, state, drop_last=drop_last)
        per_rank, state = run.epoch(monkeypatch, stop)
        repeats += run.streams[0].resume_repeats
        assert all(1 <= len(b) <= batch_size for r in per_rank for b in r)
        if drop_last:
            assert all(len(b) == batch_size for r in per_rank for b in r)
        seen.update(ids(per_rank))
    assert stop is None and state["epoch"] == 1 and state["batches"] == 0
    if drop_last:
        assert set(seen.values()) <= {1} and set(seen) <= set(range(total))
    else:
        assert sorted(seen) == list(range(total)), plan
        first = Run(counts, plan[0][0], plan[0][1], plan[0][2], drop_last=drop_last).streams[0]
        assert sum(seen.values()) - total <= repeats + first.num_padded, plan
        if not repeats and not first.num_padded:
            assert set(seen.values()) == {1}, plan
    # The epoch after it is exactly a fresh run's on the last layout.
    world, workers, batch_size, _ = plan[-1]
    after, _ = run.epoch(monkeypatch)
    fresh = Run(counts, world, workers, batch_size, drop_last=drop_last)
    for stream in fresh.streams:
        stream.set_epoch(1)
    assert after == fresh.epoch(monkeypatch)[0], plan


@pytest.mark.parametrize("w1", [1, 2, 3])
@pytest.mark.parametrize("w2", [1, 2, 3])
def test_every_world_and_worker_combination(w1, w2, monkeypatch):
    warnings.simplefilter("ignore")
    for k1 in range(4):
        for k2 in range(4):
            for counts in LAYOUTS.values():
                nb = Run(counts, w1, k1, 4).streams[0]._nb
                for stop in {1, nb // 2, nb - 1} - {0}:
                    batch_size = 4 if (k1 + k2) % 2 else 3  # the batch size may change too
                    plan = [(w1, k1, 4, stop), (w2, k2, batch_size, None)]
                    check_resume(counts, plan, monkeypatch)


def test_resumes_of_resumes_random(monkeypatch):
    """Chains of up to three resumes in one epoch, random layouts, drop_last included."""
    warnings.simplefilter("ignore")
    rng = random.Random(5)
    for _ in range(150):
        counts = [rng.choice([0, 1, 3, 8, 13]) for _ in range(rng.randint(1, 6))]
        counts[0] = counts[0] or 2
        drop_last = rng.random() < 0.2
        plan = []
        for _ in range(rng.randint(1, 3)):
            world, workers, size = rng.randint(1, 3), rng.randint(0, 3), rng.randint(1, 5)
            plan.append([world, workers, size, 1])
        plan.append([rng.randint(1, 3), rng.randint(0, 3), rng.randint(1, 5), None])
        if not len(Run(counts, *plan[0][:3], drop_last=drop_last).streams[0]):
            continue  # drop_last leaves no batch at all
        # Stop each run early enough that records are left for the next one.
        state = None
        feasible = []
        for world, workers, size, stop in plan:
            run = Run(counts, world, workers, size, state, drop_last=drop_last)
            length = len(run.streams[0])
            begun = 0 if state is None else state["batches"]
            left = length - begun
            if stop is None or left <= 1:
                feasible.append((world, workers, size, None))
                break
            stop = rng.randint(1, left - 1)
            feasible.append((world, workers, size, stop))
            _, state = run.epoch(monkeypatch, stop)
        check_resume(counts, feasible, monkeypatch, drop_last=drop_last)


def test_same_layout_resume_is_the_same_batches(monkeypatch):
    """On the same layout a resume continues the very same batches (resumed segment too)."""
    counts = LAYOUTS["many"]
    reference, _ = Run(counts, 2, 3, 3, state=None).epoch(monkeypatch)
    _, state = Run(counts, 2, 3, 3).epoch(monkeypatch, stop=2)
    again, _ = Run(counts, 2, 3, 3, state).epoch(monkeypatch)
    assert [r[:2] + a for r, a in zip(reference, again, strict=True)] == reference
    # In a segment resumed on another layout, a second resume on that layout continues it.
    _, state = Run(counts, 3, 1, 2, state).epoch(monkeypatch, stop=1)  # now 3 x 1
    whole, _ = Run(counts, 3, 1, 2, state).epoch(monkeypatch)
    _, mid = Run(counts, 3, 1, 2, state).epoch(monkeypatch, stop=2)
    assert mid["segments"] == state["segments"] == [[2, 3, 3, 2]]
    rest, _ = Run(counts, 3, 1, 2, mid).epoch(monkeypatch)
    assert [w[2:] for w in whole] == rest


def test_remainder_smaller_than_the_ranks_repeats_a_counted_few(monkeypatch):
    counts = [7]
    _, state = Run(counts, 1, 0, 2).epoch(monkeypatch, stop=3)  # 6 delivered, 1 left
    run = Run(counts, 3, 2, 2, state)
    per_rank, _ = run.epoch(monkeypatch)
    assert [len(r) for r in per_rank] == [1, 1, 1]
    assert run.streams[0].resume_repeats == 2
    assert run.streams[0].summary()["resume_repeats"] == 2
    assert sum(ids(per_rank).values()) == 3 and len(ids(per_rank)) == 1


def test_state_does_not_grow_with_records(monkeypatch):
    sizes = []
    for per_shard in (100, 10_000):  # 1,000 vs 100,000 records in 10 shards
        counts = [per_shard] * 10
        _, state = Run(counts, 2, 2, 8).epoch(monkeypatch, stop=3)
        run = Run(counts, 3, 1, 8, state)  # a resumed segment: the state has segments
        _, state = run.epoch(monkeypatch, stop=2)
        assert len(state["segments"]) == 1
        sizes.append(len(json.dumps(state)))
    assert abs(sizes[0] - sizes[1]) <= 4  # the digits of num_records


def test_runs_and_remainder_in_index_space():
    assert runs(__import__("numpy").array([3, 4, 5, 9, 10, 2000, 2001, 0])) == [
        (0, 5, 3, 11),  # a gap of 3 records is read through
        (5, 7, 2000, 2002),
        (7, 8, 0, 1),  # a wrap starts a new run
    ]
    left = remainder(20, 0, 0, 0, False, [Segment(2, 1, 3, 2)])  # 2 ranks delivered 6 records each
    assert left.tolist() == list(range(6, 10)) + list(range(16, 20))


def test_datamodule_counts_repeats_in_its_summary(tmp_path):
    from datamodules import StreamingDataModule
    from tests.datamodules.streaming.test_datamodule import write_jsonl

    files = write_jsonl(tmp_path, "t", [20, 17], 0)
    options = dict(batch_size=4, shuffle_buffer=8, num_workers=0, index_cache=False)
    first = StreamingDataModule(files, **options)
    it = iter(first.train_dataloader())
    head = [i for _ in range(9) for i in next(it)["id"].tolist()]  # 36 of 37 records
    state = json.loads(json.dumps(first.state_dict()))
    per_rank = []
    for rank in range(3):  # on 3 ranks, the one record left repeats on two of them
        dm = StreamingDataModule(files, **options)
        dm._rank_world = lambda rank=rank: (rank, 3)  # as on rank `rank` of 3
        dm.load_state_dict(state)
        loader = dm.train_dataloader()
        assert len(loader) == 9 + 1
        with pytest.warns(UserWarning, match="2 record\\(s\\) are repeated"):
            per_rank.append([i for b in loader for i in b["id"].tolist()])
        assert "2 record(s) repeated to keep ranks even" in dm.summary()
    assert per_rank[0] == per_rank[1] == per_rank[2] and len(per_rank[0]) == 1
    assert sorted(head + per_rank[0]) == list(range(37))


def test_real_persistent_workers_resume_then_run_fresh_epochs(tmp_path):
    """Through a real StreamLoader: 2 x 2 workers checkpointed, resumed on 1 rank x 3
    persistent worker processes; the epoch after is the fresh one (told via shared memory)."""
    from datamodules.shards.index import index_shards
    from datamodules.stream_engine.loader import StreamLoader
    from tests.datamodules.streaming.test_stream import batch_ids, write_jsonl

    shards = index_shards(
        [str(p) for p in write_jsonl(tmp_path, "r", [9, 0, 14, 5])], cache_dir=False
    )
    options = dict(batch_size=3, shuffle=True, shuffle_buffer=4, seed=2, collate=batch_ids)

    def loader(rank, world, workers, **kwargs):
        stream = ShardedStream(shards, rank=rank, world_size=world, **options)
        return StreamLoader(stream, num_workers=workers, multiprocessing_context="fork", **kwargs)

    head, state = [], None
    for rank in range(2):
        first = loader(rank, 2, 2)
        it = iter(first)
        head += [i for _ in range(2) for i in next(it)]
        state = json.loads(json.dumps(first.state_dict()))
        del it
    resumed = loader(0, 1, 3, persistent_workers=True)
    resumed.load_state_dict(state)
    assert len(resumed) == 2 + 6  # ceil(16 / 3) batches left
    rest = [i for b in resumed for i in b]
    assert sorted(head + rest) == list(range(28))
    fresh = loader(0, 1, 3)
    fresh.set_epoch(1)
    assert list(resumed) == list(fresh) and len(resumed) == 10  # epoch 1, fresh on 1 x 3


def test_trainer_resume_of_a_resume(tmp_path):
    """Through the Trainer: checkpointed on 2 workers, resumed on 0 workers with batch 3 and
    checkpointed again inside the resumed epoch, resumed on 1 worker with batch 5; and from
    the checkpoint at the resumed epoch's last batch."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from datamodules import StreamingDataModule
    from tests.datamodules.contract import quiet_trainer
    from tests.datamodules.streaming.test_datamodule import batch_ids, write_jsonl
    from tests.recording import RecordingModel

    files = write_jsonl(tmp_path, "t", [20, 3, 14], 0)

    def fit(workers, batch_size, ckpt_path=None, every=None, max_epochs=1):
        dm = StreamingDataModule(
            files, batch_size=batch_size, num_workers=workers, shuffle_buffer=6, index_cache=False
        )
        model = RecordingModel(batch_ids)
        callbacks = []
        if every is not None:
            callbacks.append(
                ModelCheckpoint(
                    dirpath=tmp_path / str(every), every_n_train_steps=1, save_top_k=-1,
                    filename="{step}",
                )
            )  # fmt: skip
        trainer = quiet_trainer(
            max_epochs=max_epochs, enable_checkpointing=bool(callbacks), callbacks=callbacks
        )
        trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
        return [i for _, _, batch in model.seen["train"] for i in batch], model

    first, _ = fit(2, 4, every=1)  # 10 batches of <= 4
    head = first[: 3 * 4]  # the checkpoint after step 3
    second, model = fit(0, 3, ckpt_path=tmp_path / "1" / "step=3.ckpt", every=2)
    assert len(model.seen["train"]) == 9 and sorted(head + second) == list(range(37))
    middle = [i for _, _, b in model.seen["train"][:4] for i in b]  # steps 4..7
    third, model = fit(1, 5, ckpt_path=tmp_path / "2" / "step=7.ckpt")
    assert sorted(head + middle + third) == list(range(37))  # exactly once over three runs
    assert len(model.seen["train"]) == 3  # ceil(13 / 5)
    # A checkpoint at the last batch of the resumed epoch (12 batches; a fresh one has 13):
    # the next epoch is a fresh run's, complete.
    _, after = fit(0, 3, ckpt_path=tmp_path / "2" / "step=12.ckpt", max_epochs=2)
    _, fresh = fit(0, 3, max_epochs=2)
    assert after.train_epochs() == fresh.train_epochs()[1:]
    assert len(fresh.train_epochs()[1]) == 13
