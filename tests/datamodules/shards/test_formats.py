"""Tests for datamodules.shards.formats: formats, ranges, counting cache, bad records, HTTP."""

from __future__ import annotations

import csv
import gzip
import http.server
import io
import json
import os
import threading
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datamodules.core.skipped import Skipped
from datamodules.shards import index as shard_index
from datamodules.shards.errors import RecordError, ShardError
from datamodules.shards.formats import detect_format, expand_files
from datamodules.shards.index import count_records, index_shard, index_shards
from datamodules.shards.records import read_records

N = 2500  # more than one seek slot (1024 records)
RANGES = [(0, N), (0, 1), (7, 9), (1023, 1026), (2047, 2049), (2048, 2500), (2499, 2500), (5, 5)]


def jsonl_text(n: int = N) -> str:
    """JSONL with blank lines sprinkled in (not records) and no trailing newline."""
    lines = []
    for i in range(n):
        lines.append(json.dumps({"id": i, "tokens": list(range(i % 5))}))
        if i % 7 == 0:
            lines.append("   ")
    return "\n".join(lines)


@pytest.fixture(autouse=True)
def _no_memo(monkeypatch):
    monkeypatch.setattr(shard_index, "_MEMO", {})


@pytest.fixture
def shards(tmp_path: Path) -> dict[str, Path]:
    text = jsonl_text()
    out = {"jsonl": tmp_path / "a.jsonl", "gz": tmp_path / "a.jsonl.gz"}
    out["jsonl"].write_text(text)
    out["gz"].write_bytes(gzip.compress(text.encode()))
    try:
        import zstandard

        out["zst"] = tmp_path / "a.jsonl.zst"
        out["zst"].write_bytes(zstandard.ZstdCompressor().compress(text.encode()))
    except ImportError:
        pass
    out["csv"] = tmp_path / "b.csv"
    with open(out["csv"], "w", newline="", encoding="utf-8-sig") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text"])
        for i in range(N):
            writer.writerow([i, f"two\nlines {i}" if i % 3 == 0 else f"t{i}"])
            if i % 11 == 0:
                f.write("\r\n")
    out["txt"] = tmp_path / "c.txt"
    out["txt"].write_bytes(
        b"".join(b"line %d\r\n" % i if i % 2 else b"line %d\n" % i for i in range(N))
    )
    out["parquet"] = tmp_path / "d.parquet"
    table = pa.table({"id": list(range(N)), "tokens": [list(range(i % 4)) for i in range(N)]})
    pq.write_table(table, out["parquet"], row_group_size=300)
    return out


def ids(records) -> list[int]:
    return [int(r["id"]) if isinstance(r, dict) else int(r.split()[1]) for r in records]


@pytest.mark.parametrize("kind", ["jsonl", "gz", "zst", "csv", "txt", "parquet"])
def test_formats_count_and_ranges(shards, kind, tmp_path):
    assert kind in shards, "zstandard (the streaming extra) must be installed"
    path = str(shards[kind])
    index = index_shard(path, cache_dir=tmp_path / "cache")
    assert index.count == N
    assert (index.every > 0) == (kind in ("jsonl", "csv", "txt"))
    for start, stop in RANGES:
        assert ids(read_records(path, start=start, stop=stop, index=index)) == list(
            range(start, stop)
        ), (start, stop)
    assert ids(read_records(path, start=2400)) == list(range(2400, N))  # no index: reads on


def test_record_shapes(shards, tmp_path):
    first = next(read_records(str(shards["jsonl"])))
    assert first == {"id": 0, "tokens": []}
    row = list(read_records(str(shards["csv"]), start=3, stop=4))[0]
    assert row == {"id": "3", "text": "two\nlines 3"}  # header without BOM, multi-line field
    assert list(read_records(str(shards["txt"]), stop=2)) == ["line 0", "line 1"]
    assert next(read_records(str(shards["parquet"]), start=301)) == {"id": 301, "tokens": [0]}
    txt = tmp_path / "blank.txt"
    # As in TextDataModule's .txt files, a blank (or whitespace-only) line is not a record.
    txt.write_text("a\n\n  \t\nb\n\nc")
    assert list(read_records(str(txt))) == ["a", "b", "c"]
    assert count_records(str(txt), cache_dir=False) == 3
    assert list(read_records(str(txt), start=1)) == ["b", "c"]  # positions skip blanks too
    assert list(read_records(str(txt), start=2, stop=3)) == ["c"]


def test_parquet_reads_only_needed_row_groups(shards, monkeypatch):
    seen = []
    original = pq.ParquetFile.iter_batches

    def spy(self, *args, **kwargs):
        seen.append(list(kwargs["row_groups"]))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    assert ids(read_records(str(shards["parquet"]), start=650, stop=905)) == list(range(650, 905))
    assert seen == [[2, 3]]  # row groups of 300 rows: 600-899 and 900-1199


def test_count_is_cached_and_invalidated(shards, tmp_path, monkeypatch):
    path, cache = str(shards["jsonl"]), tmp_path / "cache"
    assert index_shard(path, cache_dir=cache).count == N
    assert list(cache.rglob("*.json"))
    monkeypatch.setattr(shard_index, "_MEMO", {})
    scans = []
    original = shard_index._scan
    monkeypatch.setattr(shard_index, "_scan", lambda *a: scans.append(a) or original(*a))
    assert index_shard(path, cache_dir=cache).count == N
    assert scans == []  # from the disk cache
    with open(path, "a") as f:
        f.write('\n{"id": 2500}\n')
    assert index_shard(path, cache_dir=cache).count == N + 1
    assert len(scans) == 1


def test_index_shards_many(shards, tmp_path):
    paths = [str(shards[k]) for k in ("jsonl", "csv", "txt", "parquet")]
    counter = Skipped()
    indexes = index_shards(paths, cache_dir=tmp_path / "cache", counter=counter)
    assert [i.count for i in indexes] == [N] * 4
    assert [i.path for i in indexes] == paths
    assert counter.total == 0 and counter.summary() == "no records skipped"


# ---------------------------------------------------------------------------- bad records


def bad_cases(tmp_path: Path) -> dict[str, tuple[Path, int, list[int], str]]:
    """name -> (shard, line of the bad record, ids of the good records, message part)."""
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text('{"id": 0}\n{"id": 1}\n{"id": \n\n{"id": 3}\n')
    csv_file = tmp_path / "bad.csv"
    csv_file.write_text("id,text\n0,a\n1,b,extra\n2,c\n")
    txt = tmp_path / "bad.txt"
    txt.write_bytes(b"w 0\nw \xff\nw 2\n")
    return {
        "json": (jsonl, 3, [0, 1, 3], "invalid JSON"),
        "csv": (csv_file, 3, [0, 2], "expected 2 fields (as in the header), found 3"),
        "utf8": (txt, 2, [0, 2], "invalid UTF-8"),
    }


@pytest.mark.parametrize("case", ["json", "csv", "utf8"])
def test_bad_record_raise(tmp_path, case):
    path, line, _, reason = bad_cases(tmp_path)[case]
    with pytest.raises(RecordError) as err:
        index = index_shard(str(path), cache_dir=False)  # CSV rows are checked while counting
        list(read_records(str(path), index=index))
    assert err.value.shard == str(path) and err.value.line == line
    assert f"{path}: line {line}: " in str(err.value) and reason in str(err.value)


@pytest.mark.parametrize("case", ["json", "csv", "utf8"])
def test_bad_record_skip(tmp_path, case):
    path, line, good, reason = bad_cases(tmp_path)[case]
    counter = Skipped()
    index = index_shard(str(path), on_error="skip", cache_dir=tmp_path / "c", counter=counter)
    assert index.count == len(good) and index.skipped == 1  # the count agrees with the reader
    assert counter.counts == {str(path): 1} and reason in counter.messages[0]
    assert f"line {line}" in counter.summary()
    reading = Skipped()
    got = list(read_records(str(path), on_error="skip", index=index, counter=reading))
    assert [int(r["id"]) if isinstance(r, dict) else int(r.split()[1]) for r in got] == good
    assert reading.total == 1
    assert (
        len(list(read_records(str(path), on_error="skip", start=1, index=index))) == len(good) - 1
    )
    with pytest.raises(ValueError, match="indexed|index"):
        list(read_records(str(path), on_error="raise", index=index))


def test_unreadable_shard(tmp_path):
    missing = str(tmp_path / "missing.jsonl")
    with pytest.raises(ShardError, match="missing.jsonl: cannot read shard"):
        index_shard(missing, cache_dir=False)
    with pytest.raises(ShardError, match="missing.jsonl"):
        list(read_records(missing))
    counter = Skipped()
    index = index_shard(missing, on_error="skip", cache_dir=False, counter=counter)
    assert index.count == 0 and "missing.jsonl" in index.error
    assert missing in counter.unreadable and "unreadable" in counter.summary()
    corrupt = tmp_path / "corrupt.jsonl.gz"
    data = "".join(json.dumps({"id": i * 7919 % 100003}) + "\n" for i in range(5000))
    corrupt.write_bytes(gzip.compress(data.encode())[:-200])  # truncated
    with pytest.raises(ShardError, match="corrupt.jsonl.gz: line"):
        index_shard(str(corrupt), cache_dir=False)
    cut = index_shard(str(corrupt), on_error="skip", cache_dir=False)  # the lines before stand
    assert cut.error is None and 0 < cut.count < 5000 and cut.skipped == 1
    assert cut.problems[0][0] == f"{corrupt}: line {cut.count + 1}"
    assert cut.problems[0][1].endswith("the rest of the shard is lost")
    notparquet = tmp_path / "x.parquet"
    notparquet.write_text("not parquet")
    with pytest.raises(ShardError, match="x.parquet: cannot open Parquet shard"):
        index_shard(str(notparquet), cache_dir=False)


def test_record_error_survives_worker_reraise():
    err = RecordError("s.jsonl", 4, "invalid JSON")
    assert str(RecordError(str(err))) == str(err)  # how DataLoader re-raises
    import pickle

    again = pickle.loads(pickle.dumps(err))
    assert (again.shard, again.line, str(again)) == ("s.jsonl", 4, str(err))


# ---------------------------------------------------------------------------- paths


def test_expand_files(tmp_path):
    for name in ("b.jsonl", "a.jsonl", "c.parquet", "notes.md"):
        (tmp_path / name).write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.jsonl").write_text("")
    assert expand_files(str(tmp_path / "*.jsonl")) == [
        str(tmp_path / n) for n in ("a.jsonl", "b.jsonl")
    ]
    assert expand_files(str(tmp_path / "**" / "*.jsonl"))[-1] == str(tmp_path / "sub" / "d.jsonl")
    listed = [str(tmp_path / "b.jsonl"), tmp_path / "a.jsonl"]
    assert expand_files(listed) == [str(tmp_path / "b.jsonl"), str(tmp_path / "a.jsonl")]
    assert len(expand_files(tmp_path)) == 4  # a directory: the files with a known format
    with pytest.raises(ValueError, match="no shard matches"):
        expand_files(str(tmp_path / "*.csv"))
    with pytest.raises(ValueError, match="listed twice"):
        expand_files([str(tmp_path / "a.jsonl"), str(tmp_path / "*.jsonl")])


def test_detect_format():
    assert detect_format("x/y.jsonl.zst") == ("jsonl", "zstd")
    assert detect_format("https://h/p/a.CSV.gz?sig=1") == ("csv", "gzip")
    assert detect_format("a.bin", fmt="txt") == ("txt", None)
    with pytest.raises(ValueError, match="cannot tell the format"):
        detect_format("a.bin")
    with pytest.raises(ValueError, match="fmt='xml'"):
        detect_format("a.jsonl", fmt="xml")
    with pytest.raises(ValueError, match="on_error='ignore'"):
        list(read_records("a.jsonl", on_error="ignore"))


# ---------------------------------------------------------------------------- HTTP


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """SimpleHTTPRequestHandler plus single byte ranges (as object stores serve)."""

    def send_head(self):
        header = self.headers.get("Range")
        if not header:
            return super().send_head()
        data = Path(self.translate_path(self.path)).read_bytes()
        first, _, last = header.split("=", 1)[1].partition("-")
        start, end = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
        if start >= len(data):
            self.send_error(416)
            return None
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        return io.BytesIO(data[start : end + 1])

    def log_message(self, *args):
        pass


class PlainHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(params=["ranges", "no-ranges"])
def http_root(request, shards):
    handler = RangeHandler if request.param == "ranges" else PlainHandler
    root = os.path.dirname(shards["jsonl"])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=root))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.gz", "d.parquet"])
def test_http_shards(http_root, name, tmp_path):
    url = f"{http_root}/{name}"
    index = index_shard(url, cache_dir=tmp_path / "cache")
    assert index.count == N
    for start, stop in [(0, N), (2047, 2049), (650, 905)]:
        got = ids(read_records(url, start=start, stop=stop, index=index))
        assert got == list(range(start, stop))
    assert list((tmp_path / "cache").rglob("*.json"))  # Last-Modified identifies the version
    with pytest.raises(ShardError, match="missing.jsonl"):
        index_shard(f"{http_root}/missing.jsonl", cache_dir=False)


def test_byte_order_mark_and_blank_lines(tmp_path):
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_text('\n{"id": 0}\n  \n{"id": 1}\n\n', encoding="utf-8-sig")
    index = index_shard(str(jsonl), cache_dir=False)
    assert index.count == 2 == index_shard(str(jsonl), on_error="skip", cache_dir=False).count
    assert list(read_records(str(jsonl), index=index)) == [{"id": 0}, {"id": 1}]
    txt = tmp_path / "bom.txt"
    txt.write_text("first\nsecond\n", encoding="utf-8-sig")
    assert list(read_records(str(txt))) == ["first", "second"]


def test_a_csv_line_of_only_whitespace_is_not_a_record(tmp_path):
    """The rule of shards/lines.py, which csv reads as a row of one field."""
    path = tmp_path / "blank.csv"
    path.write_text("id,text\n   \n0,a\n   \n\t\n\n1,b\n", encoding="utf-8-sig")
    for on_error in ("raise", "skip"):
        index = index_shard(str(path), on_error=on_error, cache_dir=False)
        assert index.count == 2 and not index.skipped
        records = list(read_records(str(path), on_error=on_error, index=index))
        assert records == [{"id": "0", "text": "a"}, {"id": "1", "text": "b"}]


def test_http_stream_through_workers(http_root, tmp_path):
    from collections import Counter

    from datamodules.stream_engine.loader import StreamLoader
    from datamodules.stream_engine.stream import ShardedStream

    urls = [f"{http_root}/a.jsonl", f"{http_root}/d.parquet"]
    shards = index_shards(urls, cache_dir=False)
    seen = Counter()
    for rank in range(2):
        stream = ShardedStream(shards, batch_size=100, rank=rank, world_size=2, shuffle=True)
        for batch in StreamLoader(stream, num_workers=2, multiprocessing_context="fork"):
            seen.update(int(r["id"]) for r in batch)
    assert seen == Counter({i: 2 for i in range(N)})  # both shards hold ids 0..N-1
