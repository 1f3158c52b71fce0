"""The columnar path gives the record path's batches: the same keys, dtypes, padding and
lengths, in the same order, on Parquet and JSONL of every kind of field, through real worker
processes, over ranks x workers, and across exact and elastic resumes."""

from __future__ import annotations

import json
import random
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from datamodules import Source, StreamingDataModule
from datamodules.stream_engine.columns import RowStore
from datamodules.stream_engine.loader import StreamLoader

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def assert_same_batch(a: Any, b: Any, where: str) -> None:
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            assert_same_batch(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, b.dtype, a.shape)
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg=where)
    else:
        assert a == b, where


def batches(dm: StreamingDataModule, columnar: bool, rank: int = 0, world: int = 1,
            workers: int = 0, epoch: int = 0) -> list:  # fmt: skip
    stream = dm.make_stream("train", rank, world)
    assert stream.columnar, "the default collate reads these shards as columns"
    stream.columnar = columnar
    stream.set_epoch(epoch)
    return list(StreamLoader(stream, num_workers=workers))


def same_both_ways(dm: StreamingDataModule, **kwargs: Any) -> list:
    columns, records = batches(dm, True, **kwargs), batches(dm, False, **kwargs)
    assert len(columns) == len(records) > 0
    for i, (a, b) in enumerate(zip(columns, records, strict=True)):
        assert_same_batch(a, b, f"batch {i}")
    return columns


def test_token_labels_pad_with_minus_100_both_ways(tmp_path: Path) -> None:
    # -100 is what cross_entropy ignores; 0 would be a real token id to the loss.
    records = [
        {"id": i, "input_ids": list(range(1, i + 2)), "labels": list(range(11, i + 12))}
        for i in range(3)
    ]
    write_jsonl(tmp_path / "a.jsonl", records)
    dm = StreamingDataModule(tmp_path / "a.jsonl", batch_size=3, shuffle_buffer=0,
                             index_cache=False)  # fmt: skip
    (batch,) = same_both_ways(dm)
    order = batch["id"].tolist()
    assert sorted(order) == [0, 1, 2]
    width = {0: [11, -100, -100], 1: [11, 12, -100], 2: [11, 12, 13]}
    assert batch["labels"].tolist() == [width[i] for i in order]
    ids = {0: [1, 0, 0], 1: [1, 2, 0], 2: [1, 2, 3]}
    assert batch["input_ids"].tolist() == [ids[i] for i in order]
    from datamodules.streaming.datamodule import stream_collate

    assert stream_collate(records)["labels"].tolist() == list(width.values())


RICH = [
    {"id": 0, "n": 3, "x": 0.25, "ok": True, "name": "a", "tokens": [1, 2, 3],
     "w": [0.5, 1.5], "labels": [7, 8], "attention_mask": [1, 1], "empty": []},
    {"id": 1, "n": -4, "x": 1.75, "ok": False, "name": "bé", "tokens": [4],
     "w": [2.5], "labels": [9], "attention_mask": [1], "empty": []},
]  # fmt: skip


def rich_records(n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        record = json.loads(json.dumps(RICH[i % 2]))
        record["id"] = i
        record["tokens"] = list(range(i % 7))
        record["w"] = [x + 0.125 for x in range(i % 4 + 1)]
        record["labels"] = [i] * (i % 3 + 1)
        record["attention_mask"] = [1] * (i % 3 + 1)
        out.append(record)
    return out


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def write_id_shards(tmp_path: Path, fmt: str, sizes: list[int], t: Any, row_group: int) -> int:
    """Shards ``s0, s1, ...`` of ``sizes`` records ``{"id": i, "t": t(i)}``, ids counting on
    across shards, as JSONL or Parquet; returns the number of records."""
    first = 0
    for k, n in enumerate(sizes):
        records = [{"id": first + i, "t": t(first + i)} for i in range(n)]
        if fmt == "jsonl":
            write_jsonl(tmp_path / f"s{k}.jsonl", records)
        else:
            table = pa.table(
                {
                    "id": pa.array([r["id"] for r in records], pa.int64()),
                    "t": pa.array([r["t"] for r in records], pa.list_(pa.int64())),
                }
            )
            pq.write_table(table, tmp_path / f"s{k}.parquet", row_group_size=row_group)
        first += n
    return first


def test_jsonl_of_every_plain_kind_gives_the_record_paths_batches(tmp_path: Path) -> None:
    for k, lo in enumerate((0, 90)):
        write_jsonl(tmp_path / f"p{k}.jsonl", rich_records(200)[lo : lo + 90])
    dm = StreamingDataModule(tmp_path, batch_size=16, shuffle_buffer=40, index_cache=False)
    got = same_both_ways(dm)
    assert got[0]["labels"].dtype == torch.int64 and got[0]["x"].dtype == torch.float32
    assert got[0]["ok"].dtype == torch.bool and isinstance(got[0]["name"], list)
    assert got[0]["empty"].shape[1] == 0  # only empty lists: as the record path pads them


@pytest.mark.parametrize(
    "lines",
    [
        ['{"id": 0, "v": 1}', '{"id": 1, "v": 2.5}'],  # ints and floats in one field
        ['{"id": 0, "v": 1.0}', '{"id": 1, "v": 2.0}'],  # whole floats: 1.0, not 1
        ['{"id": 0, "v": [[1, 2], [3, 4]]}', '{"id": 1, "v": [[5, 6]]}'],  # nested lists
        ['{"id": 0, "v": {"a": 1}}', '{"id": 1, "v": {"b": 2}}'],  # objects, other keys
        ['{"id": 0, "v": "2020-01-01"}', '{"id": 1, "v": "x"}'],  # a date-like string
        ['{"id": 0, "v": 18446744073709551615}', '{"id": 1, "v": 1}'],  # beyond int64
        ["[1, 2]", "[3, 4]"],  # arrays, not objects  # fmt: skip
        ['{"id": 0, "v": NaN}', '{"id": 1, "v": 1.5}'],  # json.loads reads NaN
    ],
)
def test_jsonl_that_columns_would_misread_is_read_as_records(tmp_path: Path, lines) -> None:
    (tmp_path / "a.jsonl").write_text("\n".join(lines * 20) + "\n")
    dm = StreamingDataModule(tmp_path / "a.jsonl", batch_size=8, shuffle_buffer=10,
                             index_cache=False)  # fmt: skip
    try:
        same_both_ways(dm)
    except Exception as error:  # then both paths refuse it, with the same message
        with pytest.raises(type(error), match="") as other:
            batches(dm, False)
        assert str(other.value).split(". Every")[0] in str(error)


def test_parquet_of_every_kind_gives_the_record_paths_batches(tmp_path: Path) -> None:
    n = 120
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int32()),
            "f": pa.array([i / 3 for i in range(n)], pa.float32()),
            "d": pa.array([float(i) for i in range(n)], pa.float64()),  # whole floats
            "b": pa.array([i % 2 == 0 for i in range(n)]),
            "s": pa.array([f"r{i}" for i in range(n)]),
            "tokens": pa.array([list(range(i % 5)) for i in range(n)], pa.list_(pa.int16())),
            "fixed": pa.array([[i, i] for i in range(n)], pa.list_(pa.int64(), 2)),
            "grid": pa.array([[[i, 1], [2, 3]] for i in range(n)], pa.list_(pa.list_(pa.int64()))),
            "u": pa.array(range(n), pa.uint64()),
        }
    )
    pq.write_table(table.slice(0, 70), tmp_path / "a.parquet", row_group_size=16)
    pq.write_table(table.slice(70), tmp_path / "b.parquet", row_group_size=25)
    dm = StreamingDataModule(tmp_path, batch_size=12, shuffle_buffer=30, index_cache=False)
    got = same_both_ways(dm)
    assert got[0]["id"].dtype == torch.int64 and got[0]["f"].dtype == torch.float32
    assert got[0]["grid"].shape[1:] == (2, 2)


def test_parquet_shards_of_other_dtypes_widen_as_records_do(tmp_path: Path) -> None:
    pq.write_table(
        pa.table({"id": pa.array(range(50), pa.int32()), "v": pa.array(range(50), pa.int8())}),
        tmp_path / "a.parquet",
    )
    pq.write_table(pa.table({"id": pa.array(range(50, 100), pa.int64()),
                             "v": pa.array([i + 0.5 for i in range(50)])}),
                   tmp_path / "b.parquet")  # fmt: skip
    dm = StreamingDataModule(tmp_path, batch_size=10, shuffle_buffer=60, index_cache=False)
    same_both_ways(dm)


def test_parquet_nulls_are_refused_naming_the_field_and_row(tmp_path: Path) -> None:
    table = pa.table({"id": list(range(40)), "v": [None if i == 13 else i for i in range(40)]})
    pq.write_table(table, tmp_path / "n.parquet")
    dm = StreamingDataModule(tmp_path / "n.parquet", batch_size=40, shuffle=False,
                             index_cache=False, num_workers=0)  # fmt: skip
    with pytest.raises(ValueError, match=r"n\.parquet, row 13: in its batch, field 'v': sample "
                       r"13 holds a NoneType but sample 0 holds a int"):  # fmt: skip
        list(dm.train_dataloader())


def test_sources_with_source_key_and_workers(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "web.jsonl", rich_records(100))
    records = rich_records(160)[100:]
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "code.parquet", row_group_size=20)
    dm = StreamingDataModule(
        [Source(tmp_path / "web.jsonl", weight=3, name="web"),
         Source(tmp_path / "code.parquet", weight=1, name="code")],
        epoch_size=80, source_key="source", batch_size=8, shuffle_buffer=24, index_cache=False,
    )  # fmt: skip
    for workers in (0, 2):
        got = same_both_ways(dm, workers=workers)
        names = Counter(n for b in got for n in b["source"])
        assert names == {"web": 60, "code": 20}


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_exactly_once_over_ranks_and_workers(tmp_path: Path, fmt: str) -> None:
    sizes = [37, 1, 0, 22, 5]  # uneven, one empty, one of a single record
    first = write_id_shards(tmp_path, fmt, sizes, lambda i: list(range(i % 6)), 8)
    dm = StreamingDataModule(tmp_path, batch_size=4, shuffle_buffer=9, index_cache=False)
    dm.setup()
    for world in (1, 2):
        for workers in (0, 1, 2, 3):
            per_rank = [batches(dm, True, rank, world, workers) for rank in range(world)]
            ids = [int(i) for rank in per_rank for b in rank for i in b["id"]]
            assert sorted(ids) == list(range(first)), (world, workers)
            assert len({len(rank) for rank in per_rank}) == 1, (world, workers)


def streams(tmp_path: Path, fmt: str) -> tuple[list, Any]:
    """Shards of ids 0..64 (uneven) and a factory of columnar or record streams over them."""
    sizes = [20, 3, 14, 0, 28]
    first = write_id_shards(tmp_path, fmt, sizes, lambda i: [i] * (i % 4), 6)
    dm = StreamingDataModule(tmp_path, batch_size=4, shuffle_buffer=7, index_cache=False)
    dm.setup()
    return list(range(first)), dm


def run(dm: StreamingDataModule, columnar: bool, world: int, workers: int, batch_size: int,
        state: dict | None, stop: int | None) -> tuple[list, dict]:  # fmt: skip
    """One run over ``world`` ranks: each rank's ids batch by batch, and rank 0's state."""
    dm.batch_size = batch_size
    per_rank, states = [], []
    for rank in range(world):
        stream = dm.make_stream("train", rank, world)
        stream.columnar = columnar
        loader = StreamLoader(stream, num_workers=workers)
        if state is not None:
            loader.load_state_dict(json.loads(json.dumps(state)))
        got = []
        for batch in loader:
            got.append(batch["id"].tolist())
            if stop is not None and len(got) == stop:
                break
        per_rank.append(got)
        states.append(stream.state_dict(batches=(state["batches"] if state else 0) + len(got)))
    return per_rank, states[0]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_resumes_exact_and_elastic_equal_the_record_path(tmp_path: Path, fmt: str) -> None:
    warnings.simplefilter("ignore")
    ids, dm = streams(tmp_path, fmt)
    rng = random.Random(3)
    plans = [[(1, 0, 4, 3), (1, 0, 4, None)], [(2, 2, 4, 2), (3, 1, 3, None)],
             [(2, 1, 4, 1), (1, 2, 5, 2), (2, 0, 3, None)]]  # fmt: skip
    for _ in range(3):
        plans.append([(rng.randint(1, 3), rng.randint(0, 2), rng.randint(2, 5), 1),
                      (rng.randint(1, 3), rng.randint(0, 2), rng.randint(2, 5), None)])  # fmt: skip
    for plan in plans:
        seen: dict[bool, list] = {}
        for columnar in (True, False):
            state, out = None, []
            for world, workers, size, stop in plan:
                per_rank, state = run(dm, columnar, world, workers, size, state, stop)
                out.append(per_rank)
            seen[columnar] = out
        assert seen[True] == seen[False], plan
        delivered = [i for run_ in seen[True] for rank in run_ for b in rank for i in b]
        assert sorted(set(delivered)) == ids, plan


def test_the_store_keeps_only_rows_that_may_still_be_emitted(tmp_path: Path) -> None:
    n = 50_000
    write_jsonl(tmp_path / "a.jsonl", [{"id": i, "t": [i] * 3} for i in range(n)])
    dm = StreamingDataModule(tmp_path / "a.jsonl", batch_size=64, shuffle_buffer=1000,
                             index_cache=False, num_workers=0)  # fmt: skip
    sizes, live = [], []
    original = RowStore.release

    def watching(store: RowStore, positions: Any) -> None:
        original(store, positions)
        sizes.append(len(store))
        live.append(int(store._alive[: len(store)].sum()))

    RowStore.release = watching  # type: ignore[method-assign]
    try:
        ids = [i for b in dm.train_dataloader() for i in b["id"].tolist()]
    finally:
        RowStore.release = original  # type: ignore[method-assign]
    assert sorted(ids) == list(range(n))
    # Rows held: the buffer's (1,000) and the unread part of a block (up to 2,048), plus
    # those emitted since the last compaction (at least 4,096 and half the rows): a
    # straggler that stays in the buffer for many draws keeps only its own row.
    assert max(sizes) < 10_000 and max(live) <= 1000 + 2048 and live[-1] == 0


def test_summary_says_which_path(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", rich_records(10))
    (tmp_path / "b.csv").write_text("id\n1\n2\n")
    columns = StreamingDataModule(tmp_path / "a.jsonl", index_cache=False)
    columns.setup()
    assert "batches: gathered from columns" in columns.summary()
    for kwargs, why in (
        ({"transform": dict}, "transform= / train_transforms= / eval_transforms= take records"),
        ({"collate": list}, "a collate= of its own"),
    ):
        dm = StreamingDataModule(tmp_path / "a.jsonl", index_cache=False, **kwargs)
        dm.setup()
        assert f"batches: collated from records ({why})" in dm.summary()
    csv = StreamingDataModule(tmp_path / "b.csv", index_cache=False)
    csv.setup()
    assert "collated from records (csv shards are read as records)" in csv.summary()


def numeric_records(n: int) -> list[dict[str, Any]]:
    """Numbers and lists of numbers only: the batches are gathered a group at a time."""
    return [
        {"id": i, "x": i / 4 + 0.125, "ok": i % 3 == 0, "tokens": list(range(i % 9)) or [5],
         "w": [i + 0.5] * (i % 4 + 1), "labels": [i] * (i % 3 + 1), "m": [True] * (i % 2 + 1)}
        for i in range(n)
    ]  # fmt: skip


@pytest.mark.parametrize("workers", [0, 2])
def test_groups_of_numeric_batches_equal_the_record_paths(tmp_path: Path, workers: int) -> None:
    write_jsonl(tmp_path / "a.jsonl", numeric_records(300)[:170])
    pq.write_table(pa.Table.from_pylist(numeric_records(300)[170:]), tmp_path / "b.parquet",
                   row_group_size=50)  # fmt: skip
    dm = StreamingDataModule(tmp_path, batch_size=7, shuffle_buffer=30, index_cache=False)
    got = same_both_ways(dm, workers=workers, rank=1, world=2)
    assert sum(len(b["id"]) for b in got) == 150  # rank 1 of 2: half, in batches of 7
    assert got[0]["labels"].dtype == torch.int64 and got[0]["m"].dtype == torch.bool
    # padding was exercised: a batch's rows of lists end in the pad value on the right
    assert any((b["w"][:, -1] == 0).any() and (b["w"][:, 0] != 0).all() for b in got)


def test_a_kept_small_tensor_does_not_keep_its_message(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", numeric_records(16000))
    dm = StreamingDataModule(tmp_path, batch_size=2, num_workers=2, index_cache=False)
    dm.setup("fit")
    loader = dm.train_dataloader()
    kept = [batch["id"] for batch in loader]  # what a user logging ids would keep
    assert sorted(torch.cat(kept).tolist()) == list(range(16000))
    assert all(ids.untyped_storage().nbytes() == ids.numel() * 8 for ids in kept)
    stats = loader.batch_pool.stats()  # slots were reused: no fresh segment per message
    assert stats["fallback"] == 0 and stats["pooled"] > stats["slots"]


@pytest.mark.parametrize("orjson", ["installed", "missing"])
def test_lines_read_one_by_one_are_what_json_loads_reads(monkeypatch, orjson: str) -> None:
    from datamodules.shards import jsonl as jsonl_blocks

    if orjson == "missing":  # the standard library then reads every line
        monkeypatch.setattr(jsonl_blocks, "orjson", None)
    lines = [b'{"a": 1, "b": [1.5, 2]}', b'{"n": NaN}', b'{"big": 18446744073709551616}',
             b'{"low": -9223372036854775809}', b'{"s": "\\ud800"}', '{"u": "é"}'.encode(),
             b'{"inf": 1e400, "z": -0.0, "a": 1, "a": 2}']  # fmt: skip
    for line in lines:
        got, expected = jsonl_blocks.parse_line(line), json.loads(line)
        assert json.dumps(got) == json.dumps(expected) and type(got) is type(expected)
    with pytest.raises(ValueError):
        jsonl_blocks.parse_line(b'{"a": 1,}')


def test_auto_workers_count_parsing_as_cpu_work_and_remote_shards_as_io(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", numeric_records(10))
    local = StreamingDataModule(tmp_path / "a.jsonl", index_cache=False)
    mixed = StreamingDataModule(
        train_files=[Source(tmp_path / "a.jsonl", weight=1),
                     Source(["http://127.0.0.1:9/b.jsonl"], weight=1)],
        index_cache=False,
    )  # fmt: skip
    assert local.work == "decode" and mixed.work == "io"
    reason = local.loader_settings("train").reasons["num_workers"]
    assert "CPU" in reason and "I/O" not in reason
    assert "I/O-bound" in mixed.loader_settings("train").reasons["num_workers"]


# ---------------------------------------------------------------------- fresh workers
def test_arrow_numbers_are_the_buffers_as_numpy_without_pandas() -> None:
    from datamodules.stream_engine.columns import arrow_numbers

    table = pa.table({"i": pa.array(range(6), pa.int16()), "f": pa.array([0.5] * 6, pa.float32()),
                      "u": pa.array(range(6), pa.uint32()), "b": [True, False] * 3})  # fmt: skip
    for name in table.column_names:
        column = table.column(name).combine_chunks().slice(2, 3)  # an offset into the buffer
        got = arrow_numbers(column)
        assert got.dtype == column.to_numpy(zero_copy_only=False).dtype
        assert got.tolist() == column.to_pylist()


WORKER_IMPORTS = """
import sys, json
from datamodules import StreamingDataModule
dm = StreamingDataModule(sys.argv[1:], batch_size=4, num_workers=2, persistent_workers=False)
loader = dm.train_dataloader()
before = {m for m in ("pyarrow.json",) if m in sys.modules}  # (setup reads no JSON block)
seen = sorted(i for _ in range(2) for b in loader for i in b["id"].tolist())
after = {m for m in ("pyarrow.json", "pyarrow.parquet", "pandas") if m in sys.modules}
print(json.dumps([sorted(before), sorted(after), seen]))
"""


def test_the_loader_imports_its_workers_readers_before_they_fork(tmp_path: Path) -> None:
    # In a fresh interpreter: the readers the workers use are imported in the main process
    # as the loader starts them (each fresh worker then has them), and none pulls in pandas.
    import sys

    from tests import subprocesses

    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text("".join(json.dumps({"id": i, "tokens": [i] * (i % 3 + 1)}) + "\n"
                             for i in range(10)))  # fmt: skip
    tokens = pa.array([[i] * (i % 3 + 1) for i in range(10, 20)], pa.list_(pa.int64()))
    pq.write_table(pa.table({"id": list(range(10, 20)), "tokens": tokens}), tmp_path / "b.parquet")
    command = [sys.executable, "-c", WORKER_IMPORTS, str(jsonl), str(tmp_path / "b.parquet")]
    done = subprocesses.run(command, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    before, after, seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert before == [] and after == ["pyarrow.json", "pyarrow.parquet"]
    assert seen == sorted(list(range(20)) * 2)  # two fresh epochs, every record once each
