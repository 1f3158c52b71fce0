"""StreamingDataModule: the contract's checks as they apply to streams, through real loaders,
real worker processes, a real Trainer, real 2-process DDP and a real HTTP server.

The shared contract (tests/datamodules/contract.py) assumes random splits of one dataset; a
stream's splits come from their own files, so the equivalent checks are written here: every
loader covers its split exactly once, Trainer.fit/test/predict run, DDP is disjoint, complete
and even for train and val, a mid-epoch Lightning checkpoint resumes exactly, a resume with
another world size or worker count refuses, bad arguments raise naming the argument.
"""

from __future__ import annotations

import gzip
import http.server
import json
import pickle
import threading
import warnings
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import IterableDataset, get_worker_info

from datamodules import StreamingDataModule
from datamodules.streaming.errors import RecordError, ShardError
from tests.datamodules.contract import quiet_trainer, run_ddp
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


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("streams")
    return {
        "train_files": write_jsonl(root, "train", TRAIN_SIZES, 0),
        "val_files": write_jsonl(root, "val", VAL_SIZES, 100),
        "test_files": write_jsonl(root, "test", TEST_SIZES, 200),
        "index_cache": str(root / "index"),
        "root": root,
    }


def make(data: dict[str, Any], **kwargs: Any) -> StreamingDataModule:
    files = {k: data[k] for k in ("train_files", "val_files", "test_files", "index_cache")}
    return StreamingDataModule(**{**files, "batch_size": 4, "shuffle_buffer": 8, **kwargs})


def ddp_datamodule(**kwargs: Any) -> tuple[StreamingDataModule, Any]:
    """Factory for tests/ddp_runner.py: the same shards in every process."""
    return StreamingDataModule(batch_size=4, shuffle_buffer=8, **kwargs), batch_ids


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
    import datamodules.streaming.datamodule as streaming

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
        str(tmp_path / "*.txt"), batch_size=3, shuffle=False, index_cache=False
    )
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


def test_ddp_two_processes_disjoint_complete_even(data, tmp_path):
    class Case:
        ddp_factory = "tests.datamodules.streaming.test_datamodule:ddp_datamodule"
        ddp_kwargs = {
            "train_files": data["train_files"],
            "val_files": data["val_files"],
            "index_cache": data["index_cache"],
            "num_workers": 2,
        }

    ranks = run_ddp(Case, tmp_path)  # type: ignore[arg-type]
    assert [r["world"] for r in ranks] == [2, 2]
    for stage, expected, batches in (("train", TRAIN, 5), ("val", VAL, 2)):
        for epoch in range(2):
            per_rank = [r[stage][epoch] for r in ranks]
            assert len(per_rank[0]) == len(per_rank[1]) == batches, stage  # ceil(ceil(n/2)/4)
            ids = [Counter(i for b in batches for i in b) for batches in per_rank]
            assert not set(ids[0]) & set(ids[1]), f"{stage}: ranks overlap"
            assert sorted((ids[0] + ids[1]).elements()) == expected, stage
    assert ranks[0]["train"][0] != ranks[0]["train"][1]  # reshuffled


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_is_exact(data, tmp_path, workers):
    def make_dm(**kwargs: Any) -> StreamingDataModule:
        return make(data, num_workers=workers, **kwargs)

    full = RecordingModel(batch_ids)
    checkpoint = ModelCheckpoint(
        dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{epoch}-{step}"
    )
    quiet_trainer(max_epochs=2, enable_checkpointing=True, callbacks=[checkpoint]).fit(
        full, datamodule=make_dm()
    )
    reference = full.train_epochs()
    per_epoch = len(reference[0])
    assert per_epoch == 10
    for step in (3, per_epoch + 2):  # mid first epoch, mid second epoch
        epoch, done = divmod(step, per_epoch)
        path = tmp_path / f"epoch={epoch}-step={step}.ckpt"
        saved = torch.load(path, weights_only=False)
        dm_state = saved["StreamingDataModule"]["train_stream"]
        loader_state = saved["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
        assert dm_state == loader_state  # both paths agree
        assert (dm_state["epoch"], dm_state["batches"]) == (epoch, done)
        resumed = RecordingModel(batch_ids)
        quiet_trainer(max_epochs=2).fit(resumed, datamodule=make_dm(), ckpt_path=path)
        got = resumed.train_epochs()
        assert got[0] == reference[epoch][done:], f"resume at step {step}"
        assert got[1:] == reference[epoch + 1 :], f"epochs after resuming at step {step}"
    if workers:  # another worker count refuses instead of repeating or skipping records
        other = make(data, num_workers=0)
        with pytest.raises(ValueError, match="Resume with num_workers=2"):
            quiet_trainer(max_epochs=2).fit(
                RecordingModel(batch_ids),
                datamodule=other,
                ckpt_path=tmp_path / "epoch=0-step=3.ckpt",
            )
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
    with pytest.raises(ValueError, match="world_size=2, this stream has world_size=1"):
        single = make(data, num_workers=0)
        single.load_state_dict(two_ranks.state_dict())
        single.train_dataloader()
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


# ---------------------------------------------------------------------------- bad records

BAD = {
    "json": ("bad.jsonl", '{"id": 0}\n{"id": 1}\n{oops\n{"id": 2}\n', "line 3: invalid JSON", 3),
    "csv": ("bad.csv", "id,x\n0,a\n1,b,extra\n2,c\n", "line 3: expected 2 fields", 2),
    "utf8": ("bad.txt", b"0\n\xff\xfe\n1\n", "line 2: invalid UTF-8", 2),
    "gzip": ("bad.jsonl.gz", b"not gzip at all", "bad.jsonl.gz", 0),
    "parquet": ("bad.parquet", b"PAR1 garbage", "bad.parquet", 0),
}


def write_bad(root: Path, case: str) -> tuple[list[str], int]:
    name, content, _, good = BAD[case]
    path = root / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    ok = root / "ok.jsonl"
    ok.write_text("".join(json.dumps({"id": 10 + i}) + "\n" for i in range(4)))
    return [str(path), str(ok)], good + 4


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_records_raise_naming_shard_and_line(tmp_path, case):
    files, _ = write_bad(tmp_path, case)
    dm = StreamingDataModule(files, batch_size=2, shuffle=False, num_workers=1, index_cache=False)
    name, _, message, _ = BAD[case]
    error = first_error(dm)  # at setup, or when read (in a worker, re-raised here)
    assert isinstance(error, (RecordError, ShardError))
    assert name in str(error) and message in str(error)


def first_error(dm: StreamingDataModule) -> Exception | None:
    """The error of setting up and reading an epoch, without its traceback (which would
    keep the loader's worker processes alive until the garbage collector finds them)."""
    try:
        dm.setup("fit")
        list(dm.train_dataloader())
    except Exception as err:  # noqa: BLE001
        return err.with_traceback(None)
    return None


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_records_skip_counts_and_reports(tmp_path, case):
    files, good = write_bad(tmp_path, case)
    dm = StreamingDataModule(
        files, batch_size=2, on_error="skip", num_workers=2, index_cache=False, collate=list
    )
    with pytest.warns(UserWarning, match="skipped"):
        dm.setup("fit")
    delivered = [r for batch in dm.train_dataloader() for r in batch]
    assert len(delivered) == good  # every good record once, nothing else
    unreadable = case in ("gzip", "parquet")
    assert dm.skipped.total == (0 if unreadable else 1)
    assert len(dm.skipped.unreadable) == (1 if unreadable else 0)
    assert BAD[case][0] in dm.summary()


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


def test_defaults_of_the_base_are_accepted(data):
    for kwargs in ({}, {"val_split": 0.1}, {"val_split": 0, "test_split": 0.0}):
        make(data, **kwargs).setup("fit")


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


# ---------------------------------------------------------------------------- LightningCLI


class PlainModel(RecordingModel):
    """RecordingModel with its batch_ids fixed, so LightningCLI can build it without arguments."""

    def __init__(self) -> None:
        super().__init__(batch_ids)


def test_lightning_cli_builds_it(data):
    from lightning.pytorch.cli import LightningCLI

    from datamodules import BaseDataModule

    args = [
        "--data", "StreamingDataModule",
        "--data.train_files", json.dumps(data["train_files"]),
        "--data.val_files", data["val_files"][0],
        "--data.index_cache", data["index_cache"],
        "--data.batch_size", "8", "--data.shuffle_buffer", "100",
        "--trainer.logger", "false",
    ]  # fmt: skip
    cli = LightningCLI(PlainModel, BaseDataModule, subclass_mode_data=True, run=False, args=args)
    dm = cli.datamodule
    assert isinstance(dm, StreamingDataModule)
    assert dm.batch_size == 8 and dm.shuffle_buffer == 100
    assert dm.files["train"] == data["train_files"]
    assert sorted(loader_ids(dm.train_dataloader())) == TRAIN
    assert loader_ids(dm.val_dataloader()) == list(range(100, 106))


def test_gzip_shards(tmp_path):
    text = "".join(json.dumps({"id": i}) + "\n" for i in range(13))
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    dm = StreamingDataModule(str(tmp_path / "a.jsonl.gz"), batch_size=5, index_cache=False)
    assert sorted(loader_ids(dm.train_dataloader())) == list(range(13))


def test_inspect_draws_the_lengths_of_a_variable_length_field(tmp_path: Path) -> None:
    from PIL import Image

    shard = tmp_path / "tokens.jsonl"
    lengths = [1 + (7 * i) % 13 for i in range(40)]
    shard.write_text("".join(json.dumps({"id": i, "tokens": [1] * n}) + "\n"
                             for i, n in enumerate(lengths)))  # fmt: skip
    dm = StreamingDataModule(str(shard), batch_size=8, num_workers=0, shuffle=False)
    key, per_batch = dm.sequence_lengths("train")
    assert key == "tokens"
    assert per_batch == [lengths[i : i + 8] for i in range(0, 40, 8)]
    batch = next(iter(dm.train_dataloader()))
    out = dm.plot_batch(batch, tmp_path / "lengths.png", split="train")
    with Image.open(out) as picture:
        assert picture.format == "PNG" and picture.size[0] > 300
    fixed = tmp_path / "fixed.jsonl"
    fixed.write_text("".join(json.dumps({"id": i, "x": [0, 1]}) + "\n" for i in range(8)))
    assert StreamingDataModule(str(fixed), batch_size=4, num_workers=0).sequence_lengths() is None
