"""StreamingDataModule: the contract's checks as they apply to streams, through real loaders,
real worker processes, a real Trainer and a real HTTP server.

The shared contract (tests/datamodules/contract.py) assumes random splits of one dataset; a
stream's splits come from their own files, so the equivalent checks are written here: every
loader covers its split exactly once, Trainer.fit/test/predict run, a mid-epoch Lightning
checkpoint resumes exactly (also with another worker count and batch size), another seed
refuses, bad arguments raise naming the argument. DDP (disjoint, complete and even for train
and val) and other world sizes: test_elastic_ddp.py and test_elastic.py.
"""

from __future__ import annotations

import http.server
import inspect
import json
import pickle
import threading
import warnings
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torch.utils.data import IterableDataset, get_worker_info

from datamodules import StreamingDataModule
from tests.datamodules.contract import assert_resume_mid_epoch_is_exact, quiet_trainer
from tests.recording import RecordingModel

TRAIN_SIZES = [11, 1, 17, 0, 8]  # 37 records: uneven shards, one empty, odd total
VAL_SIZES = [6, 5]  # ids 100..110
TEST_SIZES = [9]  # ids 200..208


def batch_ids(batch: Any) -> list[int]:
    return batch["id"].tolist()


def write_jsonl(root: Path, name: str, sizes: list[int], first_id: int) -> list[str]:
    """Shards ``{name}_k.jsonl`` of records ``{"id", "tokens", "text"}`` with consecutive ids."""
    paths, next_id = [], first_id
    for k, n in enumerate(sizes):
        path = root / f"{name}_{k}.jsonl"
        lines = [
            json.dumps({"id": i, "tokens": list(range(1, i % 5 + 2)), "text": f"r{i}"})
            for i in range(next_id, next_id + n)
        ]
        path.write_text("".join(line + "\n" for line in lines))
        paths.append(str(path))
        next_id += n
    return paths


def write_splits(root: Path) -> dict[str, Any]:
    """The train, val and test shards of these tests under ``root``, and an index cache."""
    return {
        "train_files": write_jsonl(root, "train", TRAIN_SIZES, 0),
        "val_files": write_jsonl(root, "val", VAL_SIZES, 100),
        "test_files": write_jsonl(root, "test", TEST_SIZES, 200),
        "index_cache": str(root / "index"),
        "root": root,
    }


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return write_splits(tmp_path_factory.mktemp("streams"))


def make(data: dict[str, Any], **kwargs: Any) -> StreamingDataModule:
    files = {k: data[k] for k in ("train_files", "val_files", "test_files", "index_cache")}
    return StreamingDataModule(**{**files, "batch_size": 4, "shuffle_buffer": 8, **kwargs})


def loader_ids(loader: Any) -> list[int]:
    return [i for batch in loader for i in batch_ids(batch)]


TRAIN, VAL, TEST = list(range(37)), list(range(100, 111)), list(range(200, 209))


# ---------------------------------------------------------------------------- loaders


@pytest.mark.parametrize("workers", [0, 2])
def test_every_loader_yields_its_split_exactly_once(data, workers):
    dm = make(data, num_workers=workers)
    dm.setup("fit")
    for expected, loader in (
        (TRAIN, dm.train_dataloader()),
        (VAL, dm.val_dataloader()),
        (TEST, dm.test_dataloader()),
        (TEST, dm.predict_dataloader()),
    ):
        seen = loader_ids(loader)
        assert sorted(seen) == expected
        assert len(loader) == -(-len(expected) // 4)
    assert [dm.split_size(s) for s in ("train", "val", "test")] == [37, 11, 9]


def test_batches_are_padded_dicts(data):
    dm = make(data, shuffle=False, val_files=None, test_files=None)
    batch = next(iter(dm.train_dataloader()))
    assert list(batch) == ["id", "tokens", "text"]
    assert batch["id"].tolist() == [0, 1, 2, 3]
    assert batch["tokens"].tolist() == [[1, 0, 0, 0], [1, 2, 0, 0], [1, 2, 3, 0], [1, 2, 3, 4]]
    assert batch["text"] == ["r0", "r1", "r2", "r3"]


def test_train_order_changes_between_epochs_and_is_deterministic(data):
    loader = make(data, num_workers=2).train_dataloader()
    first, second = loader_ids(loader), loader_ids(loader)  # each pass is the next epoch
    again = make(data, num_workers=2).train_dataloader()
    assert loader_ids(again) == first and loader_ids(again) == second
    assert sorted(first) == sorted(second) == TRAIN and first != second
    other = make(data, num_workers=2, shuffle_seed=7).train_dataloader()
    assert loader_ids(other) != first


def test_eval_loaders_keep_order_and_drop_nothing(data):
    dm = make(data, drop_last=True, num_workers=0)
    assert loader_ids(dm.val_dataloader()) == VAL  # one process: file order
    assert [len(batch_ids(b)) for b in dm.train_dataloader()] == [4] * 9  # 37 // 4
    # Two workers read a contiguous block of batches each; the loader alternates between them.
    batches = [batch_ids(b) for b in make(data, drop_last=True, num_workers=2).val_dataloader()]
    assert batches == [VAL[0:4], VAL[8:11], VAL[4:8]]


def test_setup_indexes_once(data, monkeypatch):
    import datamodules.stream_parts.splits as streaming

    calls: list[int] = []
    real = streaming.index_shards
    monkeypatch.setattr(streaming, "index_shards", lambda *a, **k: calls.append(1) or real(*a, **k))
    dm = make(data)
    for stage in ("fit", "validate", "fit", "test", "predict"):
        dm.setup(stage)
    dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()
    assert len(calls) == 3  # train, val, test: once each
    assert dm.fingerprint is not None


def test_text_records_and_transforms(tmp_path):
    lines = [f"line {i}" for i in range(10)]
    (tmp_path / "a.txt").write_text("\n".join(lines[:7]) + "\n")
    (tmp_path / "b.txt").write_text("\n".join(lines[7:]) + "\n")
    dm = StreamingDataModule(
        str(tmp_path / "*.txt"), batch_size=3, shuffle=False, index_cache=False, num_workers=0
    )  # in file order (with workers, their blocks of batches interleave)
    assert [b for b in dm.train_dataloader()] == [lines[0:3], lines[3:6], lines[6:9], lines[9:]]
    dm = StreamingDataModule(
        str(tmp_path / "*.txt"),
        str(tmp_path / "b.txt"),
        transform=len_and_number,
        train_transforms=double_first,
        batch_size=4,
        shuffle=False,
        index_cache=False,
        num_workers=1,
    )
    lengths, numbers = next(iter(dm.train_dataloader()))
    assert lengths.tolist() == [12] * 4 and numbers.tolist() == [0, 1, 2, 3]
    lengths, numbers = next(iter(dm.val_dataloader()))  # eval: transform only
    assert lengths.tolist() == [6] * 3 and numbers.tolist() == [7, 8, 9]


def len_and_number(line: str) -> tuple[int, int]:
    return len(line), int(line.split()[1])


def double_first(sample: tuple[int, int]) -> tuple[int, int]:
    return sample[0] * 2, sample[1]


def test_parquet_and_csv_shards(tmp_path):
    for k, ids in enumerate([range(0, 7), range(7, 20)]):
        table = pa.table(
            {"id": list(ids), "x": [float(i) / 2 for i in ids], "skip": ["s"] * len(ids)}
        )
        pq.write_table(table, tmp_path / f"p{k}.parquet", row_group_size=3)
    (tmp_path / "v.csv").write_text("id,x\n" + "".join(f"{i},{i}\n" for i in range(5)))
    dm = StreamingDataModule(
        str(tmp_path / "*.parquet"),
        str(tmp_path / "v.csv"),
        columns=None,
        batch_size=6,
        num_workers=2,
        index_cache=False,
    )
    batches = list(dm.train_dataloader())
    assert sorted(i for b in batches for i in b["id"].tolist()) == list(range(20))
    assert all(torch.equal(b["x"], b["id"].float() / 2) for b in batches)
    assert next(iter(dm.val_dataloader()))["id"] == [str(i) for i in range(5)]  # CSV: strings
    narrow = StreamingDataModule(
        str(tmp_path / "*.parquet"), columns=["id"], batch_size=6, index_cache=False
    )
    assert list(next(iter(narrow.train_dataloader()))) == ["id"]


# ---------------------------------------------------------------------------- Trainer


def test_trainer_fit_test_predict(data):
    dm = make(data, num_workers=2)
    model = RecordingModel(batch_ids)
    trainer = quiet_trainer(max_epochs=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, datamodule=dm)
    assert not [w for w in caught if "IterableDataset` has `__len__`" in str(w.message)]
    epochs = model.train_epochs()
    assert len(epochs) == 2 and epochs[0] != epochs[1]
    assert all(sorted(i for b in e for i in b) == TRAIN for e in epochs)
    assert all(sorted(i for b in e for i in b) == VAL for e in model.val_epochs())
    trainer.test(model, datamodule=dm)
    predictions = trainer.predict(model, datamodule=dm)
    assert sorted(i for _, _, ids in model.seen["test"] for i in ids) == TEST
    assert sorted(i for p in predictions for i in p) == TEST


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_is_exact(data, tmp_path, workers):
    def make_dm(**kwargs: Any) -> StreamingDataModule:
        return make(data, num_workers=workers, **kwargs)

    def check_checkpoint(path: Path, epoch: int, done: int) -> None:
        saved = torch.load(path, weights_only=False)
        dm_state = saved["StreamingDataModule"]["train_stream"]
        loader_state = saved["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
        assert dm_state == loader_state  # both paths agree
        assert (dm_state["epoch"], dm_state["batches"]) == (epoch, done)

    reference = assert_resume_mid_epoch_is_exact(
        make_dm,
        batch_ids,
        tmp_path,
        steps=lambda per_epoch: (3, per_epoch + 2),  # mid first epoch, mid second epoch
        check_checkpoint=check_checkpoint,
    )
    per_epoch = len(reference[0])
    assert per_epoch == 10
    if workers:  # another worker count and batch size: the rest of the epoch, re-split
        other = make(data, num_workers=0, batch_size=3)
        resumed = RecordingModel(batch_ids)
        quiet_trainer(max_epochs=2).fit(
            resumed, datamodule=other, ckpt_path=tmp_path / "epoch=0-step=3.ckpt"
        )
        got = resumed.train_epochs()
        head = [i for b in reference[0][:3] for i in b]
        rest = [i for b in got[0] for i in b]
        assert sorted(head + rest) == TRAIN  # every record of epoch 0 exactly once
        assert len(got[0]) == 9 and all(len(b) <= 3 for b in got[0])  # ceil(25 / 3)
        fresh = RecordingModel(batch_ids)
        quiet_trainer(max_epochs=2).fit(fresh, datamodule=make(data, num_workers=0, batch_size=3))
        assert got[1] == fresh.train_epochs()[1]  # then exactly a fresh run's epoch 1 (13)
        assert len(resumed.val_epochs()) == 2  # and validation still runs after each epoch
    # An epoch-end checkpoint starts the next epoch with that epoch's order.
    resumed = RecordingModel(batch_ids)
    end = tmp_path / f"epoch=0-step={per_epoch}.ckpt"
    quiet_trainer(max_epochs=2).fit(resumed, datamodule=make_dm(), ckpt_path=end)
    assert resumed.train_epochs() == reference[1:]


def test_state_dict_round_trip_and_refusals(data):
    dm = make(data, num_workers=0)
    it = iter(dm.train_dataloader())
    head = [batch_ids(next(it)) for _ in range(3)]
    rest = [batch_ids(b) for b in it]
    assert len(head) + len(rest) == 10
    fresh = make(data, num_workers=0)
    it = iter(fresh.train_dataloader())
    for _ in range(3):
        next(it)
    state = fresh.state_dict()
    assert state["train_stream"]["batches"] == 3 and state["split_sizes"]["train"] == 37
    again = make(data, num_workers=0)
    again.load_state_dict(state)  # before setup: kept until the loader is built
    assert again.state_dict()["train_stream"] == state["train_stream"]
    assert [batch_ids(b) for b in again.train_dataloader()] == rest
    two_ranks = make(data, num_workers=0)
    two_ranks._rank_world = lambda: (0, 2)  # as on rank 0 of 2
    it = iter(two_ranks.train_dataloader())
    next(it)
    single = make(data, num_workers=0)  # another world size: accepted, re-split
    single.load_state_dict(two_ranks.state_dict())
    assert len(single.train_dataloader()) == 1 + 8  # 1 batch done, ceil(33 / 4) left
    with pytest.raises(ValueError, match="seed=42, this stream has seed=7.*shuffle_seed=42"):
        reseeded = make(data, num_workers=0, shuffle_seed=7)
        reseeded.load_state_dict(state)
        reseeded.train_dataloader()
    other = make(data, train_files=data["train_files"][:2])
    other.setup("fit")
    with pytest.raises(ValueError, match="train shards"):
        other.load_state_dict(state)


# ---------------------------------------------------------------------------- HTTP


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[str]:
    write_jsonl(tmp_path, "remote", [23], 0)
    table = pa.table(
        {"id": list(range(100, 119)), "tokens": [[i] * (i % 3 + 1) for i in range(19)]}
    )
    pq.write_table(table, tmp_path / "remote.parquet", row_group_size=5)
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(QuietHandler, directory=str(tmp_path))
    )
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_http_jsonl_and_parquet_through_the_datamodule(http_root, tmp_path):
    dm = StreamingDataModule(
        f"{http_root}/remote_0.jsonl",
        f"{http_root}/remote.parquet",
        batch_size=5,
        num_workers=2,
        index_cache=str(tmp_path / "cache"),
    )
    model = RecordingModel(batch_ids)
    quiet_trainer(max_epochs=1).fit(model, datamodule=dm)
    assert sorted(i for b in model.train_epochs()[0] for i in b) == list(range(23))
    assert sorted(i for b in model.val_epochs()[0] for i in b) == list(range(100, 119))
    batch = next(iter(dm.val_dataloader()))
    assert batch["tokens"].tolist() == [[0, 0, 0], [1, 1, 0], [2, 2, 2], [3, 0, 0], [4, 4, 0]]


# ---------------------------------------------------------------------------- extension points


class PairsDataModule(StreamingDataModule):
    """The README example: a new format, ``.pairs`` shards of ``id<TAB>word`` lines."""

    def read_shard(self, path: str) -> Iterator[dict[str, Any]]:
        with open(path) as f:
            for line in f:
                key, word = line.rstrip("\n").split("\t")
                yield {"id": int(key), "word": word}


def test_read_shard_override(tmp_path):
    for k, ids in enumerate([range(0, 9), range(9, 10), range(10, 25)]):
        (tmp_path / f"s{k}.pairs").write_text("".join(f"{i}\tw{i}\n" for i in ids))
    dm = PairsDataModule(str(tmp_path / "*.pairs"), batch_size=4, num_workers=2, index_cache=False)
    batches = list(dm.train_dataloader())
    assert sorted(i for b in batches for i in b["id"].tolist()) == list(range(25))
    assert all(b["word"] == [f"w{i}" for i in b["id"].tolist()] for b in batches)
    assert [s.count for s in dm.shards["train"]] == [9, 1, 15]
    # Workers started with "spawn" get the stream pickled: it carries a copy of the
    # DataModule without its loaders or Trainer.
    quiet_trainer(max_epochs=1).fit(RecordingModel(batch_ids), datamodule=dm)
    assert dm.trainer is not None
    copy = pickle.loads(pickle.dumps(dm.make_stream("train", 0, 1)))
    assert sorted(i for b in copy for i in b["id"].tolist()) == list(range(25))


class RangeStream(IterableDataset):
    """Records ``{"id": i}`` for i in [start, stop), split across ranks and workers."""

    def __init__(self, start: int, stop: int, rank: int, world: int) -> None:
        self.start, self.stop, self.rank, self.world = start, stop, rank, world

    def __iter__(self) -> Iterator[dict[str, int]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        step = self.world * workers
        for i in range(self.start + self.rank * workers + worker, self.stop, step):
            yield {"id": i}


def range_factory(split: str, rank: int, world: int) -> IterableDataset | None:
    return {
        "train": RangeStream(0, 30, rank, world),
        "val": RangeStream(100, 105, rank, world),
    }.get(split)


def test_dataset_factory(tmp_path):
    dm = StreamingDataModule(dataset_factory=range_factory, batch_size=4, num_workers=2)
    train = dm.train_dataloader()
    assert sorted(loader_ids(train)) == list(range(30))
    assert train.batch_pool is not None and train.batch_pool.num_workers == 2
    assert sorted(loader_ids(dm.val_dataloader())) == list(range(100, 105))
    model = RecordingModel(batch_ids)
    quiet_trainer(max_epochs=1).fit(model, datamodule=dm)
    assert sorted(i for b in model.train_epochs()[0] for i in b) == list(range(30))
    with pytest.raises(ValueError, match="no test records"):
        dm.test_dataloader()


# ---------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"train_files": 3}, TypeError, "train_files=3"),
        ({"val_files": []}, TypeError, "val_files"),
        ({"train_files": None}, ValueError, "train_files="),
        ({"val_split": 0.2}, ValueError, "val_split=0.2"),
        ({"val_split": 0.1}, ValueError, r"val_split=0.1 .*leave val_split at its default, 0"),
        ({"test_split": 5}, ValueError, "test_split=5"),
        ({"test_split": "10%"}, TypeError, "test_split"),
        ({"splits": {"train": [0]}}, ValueError, "splits="),
        ({"stratify": True}, ValueError, "stratify="),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"num_workers": "tune"}, ValueError, "num_workers='tune'"),
        ({"num_workers": -1}, ValueError, "num_workers"),
        ({"shuffle_buffer": -1}, ValueError, "shuffle_buffer=-1"),
        ({"shuffle_buffer": 2.5}, TypeError, "shuffle_buffer=2.5"),
        ({"on_error": "ignore"}, ValueError, "on_error='ignore'"),
        ({"fmt": "xml"}, ValueError, "fmt='xml'"),
        ({"columns": "id"}, TypeError, "columns='id'"),
        ({"transform": 3}, TypeError, "transform=3"),
        ({"collate": "pad"}, TypeError, "collate='pad'"),
        ({"index_cache": 3}, TypeError, "index_cache=3"),
        ({"dataset_factory": range_factory}, ValueError, "dataset_factory=, not both"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(data, kwargs, error, named):
    with pytest.raises(error, match=named):
        make(data, **kwargs)


def test_the_split_defaults_are_what_streams_do(data):
    # The signature says what a stream does: no random split (the base's 0.1 does not apply).
    assert inspect.signature(StreamingDataModule).parameters["val_split"].default == 0
    for kwargs in ({}, {"val_split": 0, "test_split": 0.0}):
        dm = make(data, **kwargs)
        dm.setup("fit")
        assert dm.hparams.val_split == 0


def test_bad_files_raise_at_setup(data, tmp_path):
    dm = make(data, train_files=str(tmp_path / "nothing-*.jsonl"))
    with pytest.raises(ValueError, match="train_files=.*no shard matches"):
        dm.setup("fit")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="train_files=.*hold no records"):
        make(data, train_files=str(tmp_path / "empty.jsonl")).setup("fit")
    no_val = make(data, val_files=str(tmp_path / "empty.jsonl"))
    with pytest.warns(UserWarning, match="val_files=.*hold no records: no val loader"):
        assert no_val.val_dataloader() == []
    with pytest.raises(ValueError, match="cannot tell the format"):
        make(data, val_files=str(tmp_path / "x.bin")).setup("validate")
    with pytest.raises(ValueError, match="no test records: pass test_files"):
        make(data, test_files=None).test_dataloader()
