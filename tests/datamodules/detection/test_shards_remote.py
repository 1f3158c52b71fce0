"""Detection shards over HTTP (a real server on 127.0.0.1 that counts its requests) and S3
(moto's server): parsed once, each image read by one range request of its member (or from a
downloaded copy with cache_dir), equal to the local shards; a shard changed since indexing
raises, named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import s3fs
from moto import server as moto_server

from datamodules.detection import write_detection_shards
from datamodules.remote.retrying import RemoteError
from tests.counting_http import counting_server
from tests.datamodules.detection.detection_data import COCO_SIZES, write_coco
from tests.datamodules.detection.shard_data import assert_same, by_image_id
from tests.datamodules.streaming.test_remote import free_port

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
SHARDS = "train-{000000..000002}"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """tar and Parquet shards of the COCO fixture (4, 4 and 2 images), with classes.json."""
    coco = write_coco(tmp_path / "coco")
    for fmt in ("tar", "parquet"):
        write_detection_shards(coco, tmp_path / "site" / fmt, fmt=fmt, max_records=4)
    return tmp_path / "site"


@pytest.mark.parametrize("fmt", ["tar", "parquet"])
def test_http_shards_read_as_the_local_ones_images_by_range(
    site: Path, tmp_path: Path, fmt: str
) -> None:
    _, local = by_image_id(site / fmt, masks=False)
    with counting_server(site) as server:
        # A brace pattern of URLs, or the dataset index the writer wrote beside the shards.
        url = f"{server.url}/{fmt}/" + (f"{SHARDS}.tar" if fmt == "tar" else "train.index.json")
        dm, got = by_image_id(url, masks=False, num_workers=1, cache=tmp_path / "index")
        assert dm.classes == ["cat", "dog", "zebra"]  # classes.json beside the shards
        assert_same(local, got)
        server.reset()
        dm.setup("fit")  # a second setup maps the cached index; then only images are read
        for _ in dm.make_loader("train"):
            pass
        shard_gets = [r for r in server.log if r.path.endswith(f".{fmt}")]
        if fmt == "tar":  # one range request per image, at its member's data (past a header)
            assert len(shard_gets) == len(COCO_SIZES)
            assert all(r.start >= 512 for r in shard_gets)
        else:  # a Parquet footer and row group per shard (kept for the next rows)
            names = {f"/{fmt}/train-00000{k}.{fmt}" for k in range(3)}
            assert {r.path for r in shard_gets} == names


def test_cache_dir_downloads_each_shard_once(site: Path, tmp_path: Path) -> None:
    _, local = by_image_id(site / "tar", masks=False)
    with counting_server(site) as server:
        url = f"{server.url}/tar/{SHARDS}.tar"
        kwargs: dict[str, Any] = {"cache": tmp_path / "index", "masks": False}
        dm, got = by_image_id(url, cache_dir=tmp_path / "copies", cache_limit="1MB", **kwargs)
        assert_same(local, got)
        server.reset()
        for _ in dm.make_loader("train"):  # a second epoch reads the copies
            pass
        assert not [r for r in server.log if r.path.endswith(".tar")]
    assert len(list((tmp_path / "copies").rglob("*.tar*"))) >= 3


def test_a_shard_changed_since_indexing_is_named(site: Path, tmp_path: Path) -> None:
    with counting_server(site) as server:
        dm, _ = by_image_id(f"{server.url}/tar/{SHARDS}.tar", masks=False, cache=tmp_path)
        shard = site / "tar" / "train-000001.tar"
        shard.write_bytes(shard.read_bytes() + b"\0" * 1024)
        dm.setup("fit")
        dm.files.__init__(dm.files.options)  # a new process: versions asked again
        with pytest.raises(RemoteError, match=r"train-000001\.tar.*changed since it was indexed"):
            for _ in dm.make_loader("train"):
                pass


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("s3data")
    coco = write_coco(root / "coco")
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    options = {"endpoint_url": f"http://127.0.0.1:{port}", "key": "testing", "secret": "testing"}
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir("det")
    for fmt in ("tar", "parquet"):
        for path in write_detection_shards(coco, root / fmt, fmt=fmt, max_records=4):
            fs.put(path, f"det/{fmt}/{Path(path).name}")
        fs.put(str(root / fmt / "classes.json"), f"det/{fmt}/classes.json")
    yield options, root
    server.stop()


@pytest.mark.parametrize("spec", [f"tar/{SHARDS}.tar", "parquet/*.parquet"])
def test_s3_shards_read_as_the_local_ones(s3: Any, tmp_path: Path, spec: str) -> None:
    pytest.importorskip("pycocotools")
    options, root = s3
    _, local = by_image_id(root / spec.split("/")[0])
    dm, got = by_image_id(f"s3://det/{spec}", storage_options=options, cache=tmp_path)
    assert dm.classes == ["cat", "dog", "zebra"]
    assert_same(local, got)  # masks included
