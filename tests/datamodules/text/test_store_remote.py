"""Remote text files into the token store: JSONL shards from a local HTTP server (a 503 on each
file's first GET, retried) and from moto's S3 server, through the shared remote layer."""

from __future__ import annotations

import http.server
import threading
from collections import Counter
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs
from moto import server as moto_server

from datamodules import TextDataModule
from datamodules.remote.retrying import RemoteError
from tests.datamodules.streaming.test_remote import FlakyHandler, free_port
from tests.datamodules.text.store_data import (
    CountingTokenizer,
    bpe,
    corpus,
    reference_ids,
    stored_ids,
    write_jsonl,
)

TEXTS = corpus(120)


@pytest.fixture(scope="module")
def tokenizer():
    return bpe(corpus(400))


@pytest.fixture
def http_files(tmp_path: Path):
    for k in range(2):
        write_jsonl(tmp_path / f"part-{k}.jsonl", TEXTS[k::2])
    gets: Counter = Counter()
    handler = type("Handler", (FlakyHandler,), {"gets": gets, "ranges": [], "schedule": ("503",)})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(handler, directory=str(tmp_path))
    )
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", gets
    server.shutdown()
    server.server_close()


def test_jsonl_over_http_is_retried_into_the_store_once(tmp_path, http_files, tokenizer):
    base, gets = http_files
    urls = [f"{base}/part-0.jsonl", f"{base}/part-1.jsonl"]
    counting = CountingTokenizer(tokenizer)

    def make() -> TextDataModule:
        return TextDataModule(
            train_file=urls,
            tokenizer=counting,
            token_cache=tmp_path / "cache",
            tokenize_workers=0,
            val_split=0,
            num_workers=0,
            retries=3,
            timeout=5,
        )

    dm = make()
    dm.setup("fit")
    expected = reference_ids(tokenizer, TEXTS[0::2] + TEXTS[1::2])
    assert stored_ids(dm.dataset.encoded) == expected
    assert dm.remote.stats.retries >= 2  # each file's first GET was a 503
    assert dm.dataset.where(0) == f"{urls[0]}, line 1"
    calls, fetched = counting.calls[0], sum(gets.values())
    again = make()
    again.setup("fit")
    assert counting.calls[0] == calls and again.dataset.path == dm.dataset.path
    assert sum(gets.values()) == fetched  # only HEADs to check the versions: no body read again
    missing = TextDataModule(
        train_file=f"{base}/nope.jsonl", tokenizer=counting, token_cache=tmp_path / "cache"
    )
    with pytest.raises(RemoteError, match=r"http://127\.0\.0\.1:\d+/nope\.jsonl.*404"):
        missing.setup("fit")


@pytest.fixture(scope="module")
def s3():
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    options = {"endpoint_url": f"http://127.0.0.1:{port}", "key": "testing", "secret": "testing"}
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir("texts")
    for k in range(2):
        body = "".join(f'{{"text": {t!r}}}\n'.replace("'", '"') for t in TEXTS[k::2])
        fs.pipe(f"texts/part-{k}.jsonl", body.encode())
    with fs.open("texts/part-2.parquet", "wb") as f:
        pq.write_table(pa.table({"text": TEXTS[:30]}), f, row_group_size=8)
    yield options
    server.stop()


def test_jsonl_and_parquet_from_s3_into_the_store(tmp_path, s3, tokenizer):
    dm = TextDataModule(
        train_file="s3://texts/part-*",
        tokenizer=tokenizer,
        storage_options=s3,
        token_cache=tmp_path / "cache",
        val_split=0,
        num_workers=0,
    )
    dm.setup("fit")
    expected = reference_ids(tokenizer, TEXTS[0::2] + TEXTS[1::2] + TEXTS[:30])
    assert stored_ids(dm.dataset.encoded) == expected
    inputs = dm.dataset.meta["inputs"]["inputs"]
    assert [i["path"] for i in inputs] == [
        f"s3://texts/part-{k}.{e}" for k, e in ((0, "jsonl"), (1, "jsonl"), (2, "parquet"))
    ]
    assert all(i.get("ETag") for i in inputs)  # the remote versions are the objects' ETags
    assert "secret" not in dm.hparams["storage_options"]
    assert dm.unsaved_arguments["storage_options.secret"] == "a credential"
