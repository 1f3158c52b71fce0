"""Tests for datamodules.remote.listing: webdataset's brace patterns, refused pipe: URLs, and
remote folders listed over HTTP (Python's ``http.server``) and S3 (moto's server)."""

from __future__ import annotations

import functools
import http.server
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import s3fs
from moto import server as moto_server

from datamodules import Source, StreamingDataModule
from datamodules.remote.listing import check_not_pipe, expand_braces, expand_files, list_folder
from datamodules.remote.retrying import RemoteOptions
from datamodules.remote.streams import remote_fs
from datamodules.shards.errors import ShardError
from tests.datamodules.streaming.test_remote import free_port


def write_jsonl(path: Path, ids: range) -> None:
    path.write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))


@pytest.fixture
def shards(tmp_path: Path) -> Path:
    for n in range(4):
        write_jsonl(tmp_path / f"train-{n:06d}.jsonl", range(10 * n, 10 * n + 3))
    write_jsonl(tmp_path / "extra-000000.jsonl", range(100, 102))
    return tmp_path


def test_a_range_keeps_its_zero_padding_and_order() -> None:
    assert expand_braces("shard-{000008..000011}.tar") == [
        "shard-000008.tar",
        "shard-000009.tar",
        "shard-000010.tar",
        "shard-000011.tar",
    ]
    assert expand_braces("s3://b/{train,val}/x.tar") == ["s3://b/train/x.tar", "s3://b/val/x.tar"]
    assert expand_braces("plain-*.tar") == ["plain-*.tar"]
    assert expand_braces("odd{name}.tar") == ["odd{name}.tar"]  # no list, no range: literal


def test_expand_files_takes_ranges_and_lists_in_their_order(shards: Path) -> None:
    found = expand_files(str(shards / "train-{000002..000000}.jsonl"))
    assert [Path(p).name for p in found] == [f"train-{n:06d}.jsonl" for n in (2, 1, 0)]
    found = expand_files(str(shards / "{extra,train}-*.jsonl"))
    assert [Path(p).name for p in found] == ["extra-000000.jsonl"] + [
        f"train-{n:06d}.jsonl" for n in range(4)
    ]


def test_a_missing_shard_of_a_range_is_named(shards: Path) -> None:
    with pytest.raises(ShardError, match=r"train-000004\.jsonl: cannot read shard .*FileNotFound"):
        dm = StreamingDataModule(str(shards / "train-{000003..000004}.jsonl"), num_workers=0)
        dm.setup("fit")


def test_a_stream_reads_every_record_of_a_brace_pattern(shards: Path) -> None:
    dm = StreamingDataModule(
        str(shards / "train-{000000..000003}.jsonl"), batch_size=4, shuffle=False, num_workers=0
    )
    dm.setup("fit")
    ids = [i for batch in dm.train_dataloader() for i in batch["id"].tolist()]
    assert ids == [10 * n + k for n in range(4) for k in range(3)]


@pytest.mark.parametrize(
    ("spec", "instead"),
    [
        ("pipe:aws s3 cp s3://bucket/train-0.tar -", "'s3://bucket/train-0.tar'"),
        ("pipe:curl -s -L https://host/data/x.tar", "'https://host/data/x.tar'"),
        ("pipe:cat /data/x.tar", "give the file's URL"),
    ],
)
def test_a_pipe_url_is_refused_at_construction_naming_the_url_to_use(
    spec: str, instead: str
) -> None:
    with pytest.raises(ValueError, match="shell commands are never run") as caught:
        StreamingDataModule(spec)
    assert str(caught.value).startswith(f"train_files={spec!r} is not accepted")
    assert instead in str(caught.value)
    with pytest.raises(ValueError, match="Source files="):
        Source([spec], weight=1.0)
    check_not_pipe("s3://bucket/train-0.tar")  # a URL itself is fine


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


def test_an_http_folder_is_listed_from_its_index_pages(tmp_path: Path) -> None:
    for name in ("a b/x.wav", "a b/deeper/y.wav", "c/z.txt", "top.wav"):
        (tmp_path / "site/data" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "site/data" / name).write_bytes(b"x")
    (tmp_path / "site/elsewhere.wav").write_bytes(b"x")  # beside the folder: not listed
    handler = functools.partial(_Quiet, directory=os.fspath(tmp_path / "site"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        found = list_folder(f"{url}/data/")
        assert found == [
            (f"{url}/data/a%20b/deeper/y.wav", "a b/deeper/y.wav", None),
            (f"{url}/data/a%20b/x.wav", "a b/x.wav", None),
            (f"{url}/data/c/z.txt", "c/z.txt", None),
            (f"{url}/data/top.wav", "top.wav", None),
        ]
        assert list_folder(f"{url}/data") == found
        with pytest.raises(ValueError, match=rf"{url}/none/: cannot list .*not found \(404\)"):
            list_folder(f"{url}/none/", RemoteOptions(retries=0))
    finally:
        server.shutdown()
        server.server_close()


def test_an_s3_folder_is_listed_with_versions_that_follow_a_rewrite() -> None:
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        storage = {"endpoint_url": f"http://127.0.0.1:{port}", "key": "k", "secret": "s"}
        fs = s3fs.S3FileSystem(**storage)
        fs.mkdir("folders")
        fs.pipe("folders/data/a/x.wav", b"12345")
        fs.pipe("folders/data/b/c/y.wav", b"1")
        fs.pipe("folders/other.wav", b"1")
        options = RemoteOptions(storage_options=storage, retries=0)
        found = list_folder("s3://folders/data/", options)
        assert [(u, r) for u, r, _ in found] == [
            ("s3://folders/data/a/x.wav", "a/x.wav"),
            ("s3://folders/data/b/c/y.wav", "b/c/y.wav"),
        ]
        assert found[0][2].startswith("5;")  # its size, then its ETag
        reader, path = remote_fs("s3://folders/data/a/x.wav", options)
        assert reader.info(path)["size"] == 5  # now in fsspec's listing cache
        fs.pipe("folders/data/a/x.wav", b"123")
        again = list_folder("s3://folders/data", options)
        assert again[0][2].startswith("3;") and again[0][2] != found[0][2]
        assert reader.info(path)["size"] == 3  # the listing dropped the stale one
        with pytest.raises(ValueError, match=r"s3://folders/none/: the folder lists no files"):
            list_folder("s3://folders/none/", options)
    finally:
        server.stop()
