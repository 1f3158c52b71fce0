"""Errors that say where: a batch that cannot be collated, or a transform that raises, names
the shard, the record's line or row, its source, and what would fix it (also from a worker
process); a JSONL syntax error names its real column; ``columns=`` that a Parquet shard lacks
raises in ``setup``."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from collates.records import collate_records
from datamodules import Source, StreamingDataModule
from datamodules.shards.errors import RecordError
from datamodules.stream_engine.failures import BatchError, first_failing

HINT = "choose the fields with columns= (Parquet), make the records alike with transform="


def read_all(dm: StreamingDataModule) -> list:
    return list(dm.train_dataloader())


@pytest.mark.parametrize("workers", [0, 1])
def test_a_ragged_nested_parquet_list_names_the_shard_and_row(tmp_path: Path, workers) -> None:
    rows = [{"id": i, "nested_list": [[1, 2], [3, 4]]} for i in range(30)]
    rows[17]["nested_list"] = [[1, 2], [3]]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "n.parquet", row_group_size=8)
    dm = StreamingDataModule(
        tmp_path / "n.parquet", batch_size=30, shuffle=False, num_workers=workers,
        index_cache=False,
    )  # fmt: skip
    with pytest.raises(BatchError) as error:
        read_all(dm)
    message = str(error.value)
    assert f"{tmp_path / 'n.parquet'}, row 17: in its batch, field 'nested_list'" in message
    assert HINT in message


def test_sources_with_other_keys_name_the_shard_line_and_source(tmp_path: Path) -> None:
    # blank lines between web's records: the line is the file's, not the record's position
    (tmp_path / "web.jsonl").write_text("".join(json.dumps({"id": i, "x": 1}) + "\n\n"
                                                for i in range(16)))  # fmt: skip
    (tmp_path / "code.jsonl").write_text("".join(json.dumps({"id": 100 + i, "y": 1}) + "\n"
                                                 for i in range(16)))  # fmt: skip
    sources = [Source(tmp_path / "web.jsonl", name="web"), Source(tmp_path / "code.jsonl",
               name="code")]  # fmt: skip
    dm = StreamingDataModule(sources, batch_size=32, shuffle=False, num_workers=0,
                             index_cache=False)  # fmt: skip
    with pytest.raises(BatchError) as error:
        read_all(dm)
    message = str(error.value)
    # Without shuffling, web's 16 records come first: code's first record breaks the batch.
    assert f"{tmp_path / 'code.jsonl'}, line 1 (source 'code'): in its batch" in message
    assert "has keys ['id', 'y'] but sample 0 has ['id', 'x']" in message and HINT in message


def test_a_failing_record_deep_in_a_shard_is_located_by_line(tmp_path: Path) -> None:
    lines = [json.dumps({"id": i, "v": [i, i]}) for i in range(400)]
    lines[333] = json.dumps({"id": 333, "v": "not a list"})
    (tmp_path / "deep.jsonl").write_text("\n\n".join(lines) + "\n")  # record k on line 2k+1
    dm = StreamingDataModule(tmp_path / "deep.jsonl", batch_size=50, shuffle=False,
                             num_workers=0, index_cache=False)  # fmt: skip
    with pytest.raises(BatchError, match=r"deep\.jsonl, line 667: in its batch"):
        read_all(dm)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_transform_that_raises_names_its_record(tmp_path: Path, workers) -> None:
    (tmp_path / "t.txt").write_text("".join(f"w{i}\n" for i in range(10)) + "boom\nw10\n")
    dm = StreamingDataModule(tmp_path / "t.txt", transform=_explode_on_boom, batch_size=4,
                             shuffle=False, num_workers=workers, index_cache=False)  # fmt: skip
    with pytest.raises(BatchError) as error:
        read_all(dm)
    message = str(error.value)
    assert f"{tmp_path / 't.txt'}, line 11: in its batch, no boom please" in message
    assert "transform= raised on this record" in message


def _explode_on_boom(text: str) -> str:
    if text == "boom":
        raise ValueError("no boom please")
    return text


def test_first_failing_finds_the_record_that_breaks_the_batch() -> None:
    samples = [{"a": i} for i in range(100)]
    assert first_failing(collate_records, samples) is None
    for bad in (0, 1, 37, 64, 99):
        broken = [dict(s) for s in samples]
        broken[bad] = {"b": 1}
        assert first_failing(collate_records, broken) == max(bad, 1)  # record 0 sets the keys


@pytest.mark.parametrize("workers", [0, 1])
def test_a_jsonl_syntax_error_names_its_real_column(tmp_path: Path, workers) -> None:
    bad = '{"id": 1, "text": "a sentence" "label": 3}'  # a missing comma before "label"
    column = bad.index('"label"') + 1
    (tmp_path / "bad.jsonl").write_text('{"id": 0, "text": "x", "label": 1}\n' + bad + "\n")
    dm = StreamingDataModule(tmp_path / "bad.jsonl", batch_size=2, num_workers=workers,
                             index_cache=False)  # fmt: skip
    with pytest.raises(RecordError, match=r"bad\.jsonl: line 2: invalid JSON: Expecting "
                       rf"',' delimiter \(column {column}\)"):  # fmt: skip
        read_all(dm)
    unclosed = '{"id": 1, "text": "abc"'
    (tmp_path / "bad.jsonl").write_text(unclosed + "\n")
    dm = StreamingDataModule(tmp_path / "bad.jsonl", batch_size=2, num_workers=workers,
                             index_cache=False)  # fmt: skip
    with pytest.raises(RecordError, match=r"line 1: invalid JSON: .* \(column 24\)"):
        read_all(dm)


def test_skipped_bad_json_is_reported_with_its_column(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text('{"id": 0}\n{"id": 1,, "x": 2}\n{"id": 2}\n')
    dm = StreamingDataModule(tmp_path / "bad.jsonl", batch_size=2, on_error="skip",
                             num_workers=0, index_cache=False)  # fmt: skip
    assert sorted(i for b in read_all(dm) for i in b["id"].tolist()) == [0, 2]
    assert "line 2: invalid JSON: Expecting property name enclosed in double quotes (column " \
           "10)" in dm.skipped.summary()  # fmt: skip


def test_columns_a_parquet_shard_lacks_raise_in_setup(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": [1, 2], "x": [3, 4]}), tmp_path / "a.parquet")
    dm = StreamingDataModule(tmp_path / "a.parquet", columns=["id", "nope"], index_cache=False)
    with pytest.raises(ValueError, match=r"columns=\['id', 'nope'\] names \['nope'\] that "
                       r".*a\.parquet lacks; its columns are \['id', 'x'\]"):  # fmt: skip
        dm.setup()
    ok = StreamingDataModule(tmp_path / "a.parquet", columns=["x"], num_workers=0,
                             index_cache=False)  # fmt: skip
    batches = list(ok.train_dataloader())
    assert [sorted(b) for b in batches] == [["x"]]
    assert sorted(batches[0]["x"].tolist()) == [3, 4]
