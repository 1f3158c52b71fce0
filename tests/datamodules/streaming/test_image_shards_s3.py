"""Tar image shards on a real S3 API (moto's server on 127.0.0.1): read in place and through the
cache with prefetch, every record exactly once over two workers, the same pixels as the local
copies."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import s3fs
import torch
from moto import server as moto_server
from PIL import Image

from datamodules import StreamingDataModule
from datamodules.streaming import write_shards
from tests.datamodules.streaming.test_remote import free_port

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
N = 45


def png(i: int) -> bytes:
    pixels = np.random.default_rng(i).integers(0, 256, (12 + i % 5, 10, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory):
    """Four tar shards of ``N`` records (class = id), locally and in the bucket ``images``."""
    local = tmp_path_factory.mktemp("shards")
    records = [{"__key__": f"r{i:03d}", "png": png(i), "cls": i} for i in range(N)]
    paths = write_shards(records, local, max_records=12, prefix="train")
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    options = {"endpoint_url": f"http://127.0.0.1:{port}", "key": "testing", "secret": "testing"}
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir("images")
    for path in paths:
        fs.put(path, f"images/{Path(path).name}")
    yield options, paths
    server.stop()


def stream(files, options: dict, **kwargs) -> StreamingDataModule:
    return StreamingDataModule(
        files,
        image_key="png",
        image_size=8,
        batch_size=8,
        storage_options=options,
        index_cache=False,
        **kwargs,
    )


@pytest.mark.parametrize("cached", [False, True], ids=["in-place", "cache+prefetch"])
def test_s3_tar_shards_exactly_once_with_two_workers(bucket, tmp_path: Path, cached: bool):
    options, _ = bucket
    extra = {"cache_dir": tmp_path / "cache", "prefetch_shards": 2} if cached else {}
    dm = stream("s3://images/train-*.tar", options, num_workers=2, **extra)
    labels = sorted(int(x) for _, batch in dm.train_dataloader() for x in batch)
    assert labels == list(range(N))
    assert [s.count for s in dm.shards["train"]] == [12, 12, 12, 9]
    if cached:
        assert len(list((tmp_path / "cache").glob("*-train-*.tar"))) == 4


def test_s3_eval_batches_equal_the_local_shards(bucket) -> None:
    options, paths = bucket
    remote = StreamingDataModule(
        "s3://images/train-000000.tar",
        "s3://images/train-*.tar",
        image_key="png",
        image_size=8,
        batch_size=8,
        storage_options=options,
        index_cache=False,
        num_workers=0,
    )
    local = StreamingDataModule(
        paths[0],
        paths,
        image_key="png",
        image_size=8,
        batch_size=8,
        index_cache=False,
        num_workers=0,
    )
    pairs = zip(remote.val_dataloader(), local.val_dataloader(), strict=True)
    for (a, la), (b, lb) in pairs:
        assert torch.equal(a, b) and torch.equal(la, lb)
