"""Remote inputs: manifests, audio files, tars and Parquet tables over HTTP (a real server on
127.0.0.1 that counts its requests) and S3 (moto's server), through the shared remote layer."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs
import soundfile
import torch
from moto import server as moto_server

from datamodules import AudioDataModule
from tests.counting_http import counting_server
from tests.datamodules.audio.audio_data import RATE, batch_ids, tone, write_numbered
from tests.datamodules.streaming.test_remote import free_port

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
N = 8


def clip_path(root: Path, i: int) -> Path:
    return root / f"audio/clip{i:03d}.{'wav' if i % 2 else 'flac'}"


def waves_by_id(dm: AudioDataModule) -> dict[int, np.ndarray]:
    dm.setup("fit")
    out = {}
    for batch in dm.train_dataloader():
        batch = dm.on_after_batch_transfer(batch, 0)  # int16 PCM -> float32, as on the device
        for row, i in enumerate(batch_ids(batch)):
            out[i] = batch["input_values"][row, : batch["lengths"][row]].numpy()
    return out


@pytest.fixture
def served(tmp_path: Path):
    root = tmp_path / "site"
    write_numbered(root, N)
    # A second manifest without durations: the lengths come from the remote headers.
    lines = (root / "manifest.jsonl").read_text().splitlines()
    bare = [json.dumps({k: v for k, v in json.loads(s).items() if k != "duration"}) for s in lines]
    (root / "bare.jsonl").write_text("\n".join(bare) + "\n")
    with counting_server(root) as server:
        yield root, server


@pytest.mark.parametrize("manifest", ["manifest.jsonl", "bare.jsonl"])
def test_a_manifest_and_its_audio_files_over_http_decode_as_local_ones(served, manifest) -> None:
    root, server = served
    dm = AudioDataModule(
        f"{server.url}/{manifest}", val_split=0, batch_size=3, num_workers=1, shuffle=False
    )  # the decoder and its remote options travel to the worker
    got = waves_by_id(dm)
    assert sorted(got) == list(range(N))
    for i, wave in got.items():
        np.testing.assert_array_equal(wave, soundfile.read(clip_path(root, i), dtype="float32")[0])
    assert dm.index is not None and dm.index.paths[0] == f"{server.url}/audio/clip000.flac"
    assert server.requests[("GET", "/audio/clip000.flac")]


def test_cache_dir_downloads_each_remote_file_once(served, tmp_path: Path) -> None:
    root, server = served

    def make() -> AudioDataModule:
        return AudioDataModule(
            f"{server.url}/manifest.jsonl", val_split=0, batch_size=4, num_workers=0,
            cache_dir=tmp_path / "cache", cache_limit="1MB",
        )  # fmt: skip

    first = waves_by_id(make())
    gets = {p: n for (m, p), n in server.requests.items() if m == "GET" and "/audio/" in p}
    assert sorted(gets) == sorted(f"/{clip_path(root, i).relative_to(root)}" for i in range(N))
    server.reset()
    dm = make()
    second = waves_by_id(dm)
    list(dm.train_dataloader())  # another epoch
    audio_gets = [p for (m, p) in server.requests if m == "GET" and "/audio/" in p]
    assert audio_gets == []  # each file a HEAD (its version) per process, no download
    assert all(np.array_equal(first[i], second[i]) for i in range(N))


def test_a_missing_remote_audio_file_is_named_or_skipped(served) -> None:
    root, server = served
    clip_path(root, 3).unlink()
    url = f"{server.url}/manifest.jsonl"
    dm = AudioDataModule(url, val_split=0, batch_size=8, num_workers=0, retries=0)
    dm.setup("fit")
    with pytest.raises(ValueError, match=r"manifest\.jsonl: line 4: cannot decode the audio.*404"):
        list(dm.train_dataloader())
    skipping = AudioDataModule(
        url, val_split=0, batch_size=8, num_workers=0, retries=0, on_error="skip"
    )
    with pytest.warns(RuntimeWarning, match="left out 1 undecodable clip"):
        assert sorted(waves_by_id(skipping)) == [i for i in range(N) if i != 3]
    assert skipping.skipped.total == 1


def test_bad_remote_options_raise_naming_them() -> None:
    with pytest.raises(TypeError, match="storage_options"):
        AudioDataModule("a.jsonl", storage_options="x")
    with pytest.raises(ValueError, match="retries"):
        AudioDataModule("a.jsonl", retries=-1)
    with pytest.raises(ValueError, match=r"cache_limit='1GB' needs cache_dir"):
        AudioDataModule("a.jsonl", cache_limit="1GB")


def encoded(i: int, fmt: str = "WAV") -> bytes:
    out = io.BytesIO()
    soundfile.write(out, tone(1600 + 16 * i, 200 + 10 * i), RATE, format=fmt)
    return out.getvalue()


@pytest.fixture(scope="module")
def s3() -> Any:
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    options = {"endpoint_url": f"http://127.0.0.1:{port}", "key": "testing", "secret": "testing"}
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir("audio")
    for k in range(2):  # clips 0-3 in two tar shards
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w") as tar:
            for i in (2 * k, 2 * k + 1):
                for name, body in ((f"s{i}.wav", encoded(i)), (f"s{i}.txt", f"clip {i}".encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(body)
                    tar.addfile(info, io.BytesIO(body))
        fs.pipe(f"audio/shard-{k}.tar", data.getvalue())
    audio = [{"bytes": encoded(i, "FLAC"), "path": f"c{i}.flac"} for i in (4, 5)]
    with fs.open("audio/table.parquet", "wb") as f:  # clips 4-5 in a table
        pq.write_table(pa.table({"audio": audio, "text": ["clip 4", "clip 5"]}), f)
    lines = []  # clips 6-7 as files that a manifest lists
    for i in (6, 7):
        fs.pipe(f"audio/files/c{i}.wav", encoded(i))
        lines.append(json.dumps({"audio_filepath": f"files/c{i}.wav", "text": f"clip {i}"}))
    fs.pipe("audio/manifest.jsonl", ("\n".join(lines) + "\n").encode())
    yield options
    server.stop()


def test_tars_a_parquet_table_and_a_manifest_from_s3(s3) -> None:
    dm = AudioDataModule(
        ["s3://audio/shard-{0..1}.tar", "s3://audio/table.parquet", "s3://audio/manifest.jsonl"],
        storage_options=s3, val_split=0, batch_size=8, num_workers=0, shuffle=False,
    )  # fmt: skip
    dm.setup("fit")
    (batch,) = [dm.on_after_batch_transfer(b, 0) for b in dm.train_dataloader()]
    ids = batch_ids(batch)
    assert sorted(ids) == list(range(8))
    assert batch["text"] == [f"clip {i}" for i in ids]
    for row, i in enumerate(ids):
        stored = encoded(i, "FLAC" if i in (4, 5) else "WAV")
        wave = soundfile.read(io.BytesIO(stored), dtype="float32")[0]
        got = batch["input_values"][row, : batch["lengths"][row]]
        assert torch.equal(got, torch.from_numpy(wave))
    assert dm.index is not None and "s3://audio/files/c6.wav" in dm.index.paths
    assert "secret" not in dm.hparams["storage_options"]
    assert dm.unsaved_arguments["storage_options.secret"] == "a credential"


def test_remote_headers_are_read_once_and_cached_across_runs(served, tmp_path: Path) -> None:
    root, server = served

    def indexed() -> AudioDataModule:
        dm = AudioDataModule(
            f"{server.url}/bare.jsonl", val_split=0, num_workers=0, index_cache=tmp_path / "i"
        )
        dm.setup("fit")
        return dm

    first = indexed()
    assert first.files.headers.reads == N
    assert all(
        server.requests[("GET", f"/{clip_path(root, i).relative_to(root)}")] for i in range(N)
    )
    server.reset()
    second = indexed()
    assert second.files.headers.reads == 0
    assert [p for (_, p) in server.requests if "/audio/" in p] == []  # no request per clip
    assert first.index is not None and second.index is not None
    np.testing.assert_array_equal(second.index.lengths, first.index.lengths)
    assert first.index.lengths.tolist() == [
        len(soundfile.read(clip_path(root, i))[0]) for i in range(N)
    ]
