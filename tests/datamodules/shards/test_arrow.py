"""Arrow IPC shards and Hugging Face ``save_to_disk`` folders: a real ``datasets`` folder of
two data files (the stream format), and a file-format ``.arrow``, read by StreamingDataModule
and TextDataModule with every record exactly once, and by the shard layer's readers, index and
``python -m datamodules index``."""

from __future__ import annotations

import http.server
import json
import sys
import threading
from functools import partial
from pathlib import Path

import pyarrow as pa
import pytest

from datamodules import Source, StreamingDataModule, TextDataModule
from datamodules.remote.retrying import RemoteOptions
from datamodules.shards.errors import ShardError
from datamodules.shards.formats import detect_format, expand_files
from datamodules.shards.index import index_shard
from datamodules.shards.records import read_blocks, read_records
from datamodules.text.readers import read_text_files
from datamodules.tokens.inputs import find_files
from tests import subprocesses

N = 5000  # rows: HF writes batches of 1000, so ranges cross batches
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    import datasets

    folder = tmp_path_factory.mktemp("hf") / "saved"
    texts = [f"document {i} " + "word " * (i % 13) for i in range(N)]
    labels = [i % 3 for i in range(N)]
    data = datasets.Dataset.from_dict({"id": list(range(N)), "text": texts, "label": labels})
    data.save_to_disk(str(folder), num_shards=2)
    return folder


def data_files(folder: Path) -> list[str]:
    state = json.loads((folder / "state.json").read_text())
    return [str(folder / entry["filename"]) for entry in state["_data_files"]]


def test_a_saved_folder_is_its_data_files_in_order(saved: Path) -> None:
    files = data_files(saved)
    assert len(files) == 2 and expand_files(str(saved)) == files
    assert [detect_format(f) for f in files] == [("arrow", None)] * 2


def test_stream_format_shards_are_read_counted_and_sliced(saved: Path) -> None:
    first, second = data_files(saved)
    counts = [index_shard(f, cache_dir=False).count for f in (first, second)]
    assert sum(counts) == N and all(counts)
    index = index_shard(first, cache_dir=False)
    assert index.fmt == "arrow" and index.columns == ("id", "text", "label")
    rows = list(read_records(first, start=700, stop=2300))  # across HF's 1000-row batches
    assert [r["id"] for r in rows] == list(range(700, 2300))
    assert set(rows[0]) == {"id", "text", "label"}
    blocks = list(read_blocks(first, start=10, stop=4000, columns=["id"]))
    ids = [i for table, _ in blocks for i in table.column("id").to_pylist()]
    assert ids == list(range(10, min(4000, counts[0])))
    assert all(table.num_columns == 1 and table.num_rows <= 4096 for table, _ in blocks)


def test_file_format_shards_are_read_too(tmp_path: Path) -> None:
    path = tmp_path / "table.arrow"
    table = pa.table({"id": list(range(300)), "text": [f"t{i}" for i in range(300)]})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=64):
            writer.write_batch(batch)
    assert index_shard(str(path), cache_dir=False).count == 300
    assert [r["id"] for r in read_records(str(path), start=100, stop=250)] == list(range(100, 250))
    dm = StreamingDataModule(str(path), batch_size=32, shuffle=False, index_cache=False)
    ids = sorted(int(i) for batch in dm.train_dataloader() for i in batch["id"])
    assert ids == list(range(300))


def test_a_file_that_is_not_arrow_names_itself(tmp_path: Path) -> None:
    path = tmp_path / "bad.arrow"
    path.write_bytes(b"not arrow at all")
    with pytest.raises(ShardError, match=r"bad\.arrow: cannot open Arrow shard"):
        index_shard(str(path), cache_dir=False)


@pytest.mark.parametrize("given", ["train_files", "list", "source"])
def test_streams_read_a_saved_folder_exactly_once(saved: Path, given: str) -> None:
    spec = {"train_files": str(saved), "list": [str(saved)], "source": [Source(files=str(saved))]}
    dm = StreamingDataModule(
        spec[given], batch_size=256, shuffle=True, num_workers=2, index_cache=False
    )
    ids = sorted(int(i) for batch in dm.train_dataloader() for i in batch["id"])
    assert ids == list(range(N))


def test_text_reads_a_saved_folder_exactly_once(saved: Path) -> None:
    files = find_files([str(saved)], "train_file", RemoteOptions())
    assert files == data_files(saved)
    records = read_text_files(files, "text", None)
    assert records.texts == [f"document {i} " + "word " * (i % 13) for i in range(N)]
    assert records.labels == [i % 3 for i in range(N)]
    dm = TextDataModule(train_file=str(saved), val_split=0, test_split=0, batch_size=64)
    dm.setup("fit")
    assert dm.split_size("train") == N and dm.num_classes == 3


def test_a_saved_dataset_dict_asks_for_one_split(tmp_path: Path) -> None:
    import datasets

    split = datasets.Dataset.from_dict({"id": [1, 2], "text": ["a", "b"]})
    datasets.DatasetDict({"train": split, "test": split}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(ValueError, match=r"saved DatasetDict: give the folder of one of its"):
        StreamingDataModule(str(tmp_path / "dd"), index_cache=False).setup("fit")


def test_the_dataset_index_counts_arrow_shards(saved: Path, tmp_path: Path) -> None:
    out = tmp_path / "saved.index.json"
    files = data_files(saved)
    done = subprocesses.run(
        [sys.executable, "-m", "datamodules", "index", *files, "-o", str(out)],
        text=True, cwd=ROOT, )  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = json.loads(out.read_text())
    assert sum(entry["nsamples"] for entry in listed["shardlist"]) == N
    dm = StreamingDataModule(str(out), batch_size=500, shuffle=False, index_cache=False)
    ids = sorted(int(i) for batch in dm.train_dataloader() for i in batch["id"])
    assert ids == list(range(N))


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # quiet
        pass


def test_remote_arrow_shards_over_http(saved: Path) -> None:
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(QuietHandler, directory=str(saved))
    )
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        urls = [f"{base}/{Path(f).name}" for f in data_files(saved)]
        assert sum(index_shard(u, cache_dir=False).count for u in urls) == N
        assert [r["id"] for r in read_records(urls[0], start=3, stop=6)] == [3, 4, 5]
        dm = StreamingDataModule(urls, batch_size=500, num_workers=0, index_cache=False)
        ids = sorted(int(i) for batch in dm.train_dataloader() for i in batch["id"])
        assert ids == list(range(N))
    finally:
        server.shutdown()
        server.server_close()
