"""StreamingDataModule and bad records: each kind (invalid JSON, CSV row, UTF-8, unreadable
gzip or Parquet) raises naming the shard and line, or with ``on_error="skip"`` is left out,
counted and reported in the summary (through real worker processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from datamodules import StreamingDataModule
from datamodules.core.skipped import Skipped
from datamodules.shards.errors import RecordError, ShardError

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
    assert dm.skipped.records == (0 if unreadable else 1)
    assert len(dm.skipped.unreadable) == (1 if unreadable else 0)
    # dm.skipped is the one type every DataModule has: (where, why) pairs, all counted
    assert isinstance(dm.skipped, Skipped) and dm.skipped.total == len(dm.skipped) == 1
    where, why = dm.skipped[0]
    name, _, message, _ = BAD[case]
    assert where.startswith(str(tmp_path / name)) and why
    assert message in f"{where}: {why}"
    assert BAD[case][0] in dm.summary()
