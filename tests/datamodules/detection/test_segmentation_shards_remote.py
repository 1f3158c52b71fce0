"""Segmentation shards over HTTP (a real server on 127.0.0.1 that counts its requests) and S3
(moto's server): the same batches as the folders, each member read by one range request (or
from a downloaded copy with cache_dir); a shard changed since indexing raises, named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import s3fs
from moto import server as moto_server

from datamodules.remote.retrying import RemoteError
from tests.counting_http import counting_server
from tests.datamodules.detection.segmentation_data import write_pairs
from tests.datamodules.detection.segmentation_shard_data import (
    assert_same_batches,
    batches_of,
    pair_bytes,
    write_parquet_shards,
    write_tar_shards,
)
from tests.datamodules.streaming.test_remote import free_port

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
COUNT = 7
SHARDS = "train-{000000..000002}"


def write_site(root: Path) -> tuple[Path, Path]:
    """Folder pairs under ``root/folders`` and their shards under ``root/site/{tar,parquet}``
    (3, 3 and 1 records)."""
    folders = write_pairs(root / "folders", COUNT, lambda i: (12, 16) if i % 2 else (9, 20))
    pairs = pair_bytes(*folders)
    write_tar_shards(root / "site" / "tar", pairs, 3)
    write_parquet_shards(root / "site" / "parquet", pairs, 3)
    return folders, root / "site"


@pytest.mark.parametrize("fmt", ["tar", "parquet"])
def test_http_shards_give_the_folders_batches_members_by_range(tmp_path: Path, fmt: str) -> None:
    folders, site = write_site(tmp_path)
    _, expected = batches_of(folders)
    with counting_server(site) as server:
        dm, got = batches_of(f"{server.url}/{fmt}/{SHARDS}.{fmt}", num_workers=1)
        assert_same_batches(expected, got)
        assert sorted(dm.indexes["train"].versions) == [
            f"{server.url}/{fmt}/train-00000{k}.{fmt}" for k in range(3)
        ]
        server.reset()
        assert_same_batches(expected, list(dm.make_loader("train")))  # a second epoch
        shard_gets = [r for r in server.log if r.path.endswith(f".{fmt}")]
        if fmt == "tar":  # one range request per member (image and mask), past a header
            assert len(shard_gets) == 2 * COUNT
            assert all(r.start >= 512 for r in shard_gets)
        else:  # a footer and row groups per shard, kept for the next rows
            assert {r.path for r in shard_gets} == {
                f"/parquet/train-00000{k}.parquet" for k in range(3)
            }


def test_cache_dir_downloads_each_shard_once(tmp_path: Path) -> None:
    folders, site = write_site(tmp_path)
    _, expected = batches_of(folders)
    with counting_server(site) as server:
        url = f"{server.url}/tar/{SHARDS}.tar"
        dm, got = batches_of(url, cache_dir=str(tmp_path / "copies"), cache_limit="1MB")
        assert_same_batches(expected, got)
        server.reset()
        assert_same_batches(expected, list(dm.make_loader("train")))  # read from the copies
        assert not [r for r in server.log if r.path.endswith(".tar")]
    assert len(list((tmp_path / "copies").rglob("*.tar*"))) >= 3


def test_a_shard_changed_since_indexing_is_named(tmp_path: Path) -> None:
    _, site = write_site(tmp_path)
    with counting_server(site) as server:
        dm, _ = batches_of(f"{server.url}/tar/{SHARDS}.tar")
        shard = site / "tar" / "train-000001.tar"
        shard.write_bytes(shard.read_bytes() + b"\0" * 1024)
        dm.files.__init__(dm.files.options)  # a new process: versions asked again
        with pytest.raises(RemoteError, match=r"train-000001\.tar.*changed since it was indexed"):
            list(dm.make_loader("train"))


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("s3seg")
    folders, site = write_site(root)
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    options = {"endpoint_url": f"http://127.0.0.1:{port}", "key": "testing", "secret": "testing"}
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir("seg")
    for path in sorted(site.rglob("train-*")):
        fs.put(str(path), f"seg/{path.parent.name}/{path.name}")
    yield options, folders
    server.stop()


@pytest.mark.parametrize("spec", [f"tar/{SHARDS}.tar", "parquet/*.parquet"])
def test_s3_shards_give_the_folders_batches(s3: Any, spec: str) -> None:
    options, folders = s3
    _, expected = batches_of(folders)
    dm, got = batches_of(f"s3://seg/{spec}", storage_options=options)
    assert_same_batches(expected, got)
    assert len(dm.indexes["train"].versions) == 3
