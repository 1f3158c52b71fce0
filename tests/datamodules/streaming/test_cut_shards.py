"""Compressed line shards cut short (a download stopped, a disk filled): under
``on_error="skip"`` every record before the cut is delivered, and ``dm.skipped`` /
``summary()`` say at which line the shard stops and that the rest of it is lost (counted
once); under ``"raise"`` the cut raises naming the shard and the line."""

from __future__ import annotations

import gzip
import io
import json
import random
import tarfile
import zlib
from pathlib import Path

import pytest
import zstandard

from datamodules import StreamingDataModule
from datamodules.core.skipped import Skipped
from datamodules.shards.errors import ShardError
from datamodules.shards.records import read_records

N = 6000  # records: ~400 KB of text, several zstd blocks, so a cut keeps whole blocks
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"]


def text_of(fmt: str) -> str:
    rng = random.Random(7)
    words = [" ".join(rng.choices(WORDS, k=rng.randint(3, 12))) for _ in range(N)]
    if fmt == "jsonl":
        return "".join(json.dumps({"id": i, "text": w}) + "\n" for i, w in enumerate(words))
    if fmt == "csv":
        return "id,text\n" + "".join(f"{i},{w}\n" for i, w in enumerate(words))
    return "".join(f"{i} {w}\n" for i, w in enumerate(words))


def readable_part(cut: bytes, compression: str) -> bytes:
    """What a decompressor makes of the cut file: the bytes before the cut."""
    if compression == "gz":
        return zlib.decompressobj(wbits=31).decompress(cut)
    return zstandard.ZstdDecompressor().decompressobj().decompress(cut)


def identity(record, fmt: str) -> int:
    if fmt == "txt":
        return int(record.split()[0])
    return int(record["id"])


def line_id(line: str, fmt: str) -> int:
    if fmt == "jsonl":
        return json.loads(line)["id"]
    return int(line.split("," if fmt == "csv" else " ")[0])


def write_cut(root: Path, fmt: str, compression: str) -> tuple[str, list[int], int]:
    """A shard cut at 60% of its bytes: its path, the ids of the whole lines before the cut,
    and the 1-based line the shard stops at (the first one not whole)."""
    data = text_of(fmt).encode()
    packed = gzip.compress(data) if compression == "gz" else zstandard.compress(data)
    cut = packed[: len(packed) * 6 // 10]
    path = root / f"cut.{fmt}.{compression}"
    path.write_bytes(cut)
    whole = readable_part(cut, compression)
    lines = whole[: whole.rfind(b"\n") + 1].decode().splitlines()
    header = 1 if fmt == "csv" else 0
    ids = [line_id(line, fmt) for line in lines[header:]]
    assert 0 < len(ids) < N  # the cut keeps some records and loses some
    return str(path), ids, len(lines) + 1


CASES = [("jsonl", "gz"), ("jsonl", "zst"), ("txt", "gz"), ("csv", "gz"), ("csv", "zst")]


@pytest.mark.parametrize(("fmt", "compression"), CASES)
def test_a_cut_shard_under_skip_delivers_every_record_before_the_cut(
    tmp_path: Path, fmt: str, compression: str
) -> None:
    path, ids, stop = write_cut(tmp_path, fmt, compression)
    dm = StreamingDataModule(
        path, batch_size=64, shuffle=False, on_error="skip", index_cache=False, collate=list
    )
    with pytest.warns(UserWarning, match="skipped"):
        dm.setup("fit")
    delivered = [identity(r, fmt) for batch in dm.train_dataloader() for r in batch]
    assert sorted(delivered) == ids  # every record before the cut, once
    assert dm.skipped.records == 1 and dm.skipped.total == 1 and not dm.skipped.unreadable
    where, why = dm.skipped[0]
    assert where == f"{path}: line {stop}"
    assert why.startswith("cannot read shard past this line (")
    assert why.endswith("; the rest of the shard is lost")
    assert f"{path}: line {stop}: cannot read shard past this line" in dm.summary()


@pytest.mark.parametrize(("fmt", "compression"), CASES)
def test_a_cut_shard_under_raise_names_the_shard_and_line(
    tmp_path: Path, fmt: str, compression: str
) -> None:
    path, _, stop = write_cut(tmp_path, fmt, compression)
    dm = StreamingDataModule(path, batch_size=64, index_cache=False)
    with pytest.raises(ShardError, match=rf"cut\.{fmt}\.{compression}: line {stop}: cannot read"):
        dm.setup("fit")


def test_a_cut_shard_read_whole_without_an_index_counts_the_cut(tmp_path: Path) -> None:
    path, ids, stop = write_cut(tmp_path, "jsonl", "gz")
    counter = Skipped()
    records = list(read_records(path, on_error="skip", counter=counter))
    assert [r["id"] for r in records] == ids
    assert counter.records == 1 and counter[0][0] == f"{path}: line {stop}"
    with pytest.raises(ShardError, match=rf"line {stop}: cannot read shard past this line"):
        list(read_records(path))


def write_tar(path: Path, records: int) -> bytes:
    """A tar of ``records`` records (``kNN.json`` and ``kNN.txt``, each member one block of data
    after its header: a record takes 2048 bytes); returns its bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(records):
            for ext, data in (("json", json.dumps({"id": i}).encode()), ("txt", b"x" * 100)):
                info = tarfile.TarInfo(f"k{i:02d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    return buf.getvalue()


def test_a_shard_whose_records_all_fell_to_damage_is_named_damaged(tmp_path: Path) -> None:
    path = tmp_path / "cut.tar"
    data = write_tar(path, 10)
    path.write_bytes(data[: 2048 + 100])  # cut inside the second record's first header
    dm = StreamingDataModule(str(path), on_error="skip", index_cache=False)
    with pytest.warns(UserWarning, match="skipped"), pytest.raises(ValueError) as got:
        dm.setup("fit")
    message = str(got.value)
    assert "hold no records" in message
    assert f"{path} is damaged, and the record(s) before the damage were left out" in message
    assert "damaged tar archive at byte 2048: the archive ends inside a header" in message


def test_a_shard_whose_records_are_all_bad_says_the_last_reason(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": 1\n{oops\n')
    dm = StreamingDataModule(str(path), on_error="skip", index_cache=False)
    with pytest.warns(UserWarning, match="skipped"), pytest.raises(ValueError) as got:
        dm.setup("fit")
    message = str(got.value)
    assert f"all 2 record(s) of {path} are bad (on_error='skip')" in message
    assert f"the last: {path}: line 2: invalid JSON: Expecting property name" in message
