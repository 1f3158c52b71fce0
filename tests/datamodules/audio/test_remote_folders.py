"""Folders of class sub-folders over HTTP (Python's ``http.server``, whose index pages list a
folder) and S3 (moto's server), on 127.0.0.1: the same tree gives the same classes, clips, order
and samples as on disk; headers are read once and cached; what cannot be listed or read is
named."""

from __future__ import annotations

import functools
import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import lightning as L
import numpy as np
import pytest
import s3fs
import soundfile
import torch
from moto import server as moto_server

from datamodules import AudioDataModule
from datamodules.audio.clips import ManifestError
from tests.counting_http import counting_server
from tests.datamodules.audio.audio_data import tone, torchcodec_or_skip, write_classes
from tests.datamodules.streaming.test_remote import free_port

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

#: The clips of the tree, in the order a local folder gives them (classes sorted; a folder's
#: own files by name before its sub-folders').
CLIPS = [
    "big bird/big bird0.flac",
    "big bird/big bird1.wav",
    "cat/cat0.flac",
    "cat/cat1.wav",
    "dog/dog0.flac",
    "dog/dog1.wav",
    "dog/zz.wav",
    "dog/extra/a.flac",
]


def write_tree(root: Path) -> Path:
    """Three classes (one with a space), a nested sub-folder, and what is not a clip: a text
    file, a hidden folder, a file at the root."""
    write_classes(root, per_class=2, classes=("big bird", "cat", "dog"))
    soundfile.write(root / "dog/zz.wav", tone(900, 500), 16000)
    (root / "dog/extra").mkdir()
    soundfile.write(root / "dog/extra/a.flac", tone(1100, 700, 22050), 22050)
    (root / "cat/notes.txt").write_text("not audio")
    (root / ".hidden").mkdir()
    soundfile.write(root / ".hidden/h.wav", tone(500, 300), 16000)
    soundfile.write(root / "root.wav", tone(500, 300), 16000)
    return root


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The tree on disk under ``site/speech`` and the URL of ``site`` served by Python's
    ``http.server`` (which answers a folder with its index page of links, not ranges)."""
    root = tmp_path_factory.mktemp("site")
    write_tree(root / "speech")
    handler = functools.partial(_Quiet, directory=os.fspath(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def s3(site: tuple[Path, str]) -> Iterator[dict[str, Any]]:
    """The same tree in ``s3://speech-bucket/speech/`` on moto's server."""
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    options = {"endpoint_url": f"http://127.0.0.1:{port}", "key": "testing", "secret": "testing"}
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir("speech-bucket")
    tree = site[0] / "speech"
    for path in sorted(tree.rglob("*")):
        if path.is_file():
            fs.pipe(f"speech-bucket/speech/{path.relative_to(tree).as_posix()}", path.read_bytes())
    yield options
    server.stop()


def indexed(spec: str | Path, **kwargs: Any) -> tuple[AudioDataModule, dict[str, Any]]:
    """A DataModule over ``spec`` set up, and its one batch of every clip in index order."""
    dm = AudioDataModule(
        spec, val_split=0, batch_size=len(CLIPS), num_workers=0, shuffle=False, bucket=False,
        **kwargs,
    )  # fmt: skip
    dm.setup("fit")
    (batch,) = [dm.on_after_batch_transfer(b, 0) for b in dm.train_dataloader()]
    return dm, batch


def relative(paths: list[str], root: str) -> list[str]:
    return [unquote(p[len(root) :].lstrip("/")).replace(os.sep, "/") for p in paths]


def test_a_tree_over_http_and_s3_gives_the_local_classes_clips_order_and_samples(
    site, s3, tmp_path: Path
) -> None:
    root, url = site
    local, expected = indexed(root / "speech", index_cache=False)
    assert local.index is not None and local.classes == ["big bird", "cat", "dog"]
    assert relative(local.index.paths, str(root / "speech")) == CLIPS
    assert expected["label"].tolist() == [0, 0, 1, 1, 2, 2, 2, 2]
    specs = {
        f"{url}/speech/": {},
        f"{url}/speech": {},  # http.server redirects; the listing is the same
        "s3://speech-bucket/speech/": {"storage_options": s3},
        "s3://speech-bucket/speech": {"storage_options": s3},
    }
    for spec, options in specs.items():
        dm, batch = indexed(spec, index_cache=tmp_path / "index", **options)
        assert dm.index is not None and dm.classes == local.classes, spec
        assert relative(dm.index.paths, spec.rstrip("/")) == CLIPS, spec
        assert dm.index.where == dm.index.paths  # a clip is named by its URL
        np.testing.assert_array_equal(dm.index.lengths, local.index.lengths)
        for key in ("label", "lengths", "input_values"):
            assert torch.equal(batch[key], expected[key]), (spec, key)


def test_remote_headers_are_read_once_and_a_changed_object_again(site, s3, tmp_path) -> None:
    root, url = site
    cache = tmp_path / "index"
    for spec, options in (
        (f"{url}/speech/", {}),
        ("s3://speech-bucket/speech/", {"storage_options": s3}),
    ):
        first, _ = indexed(spec, index_cache=cache, **options)
        assert first.files.headers.reads == len(CLIPS)
        second, _ = indexed(spec, index_cache=cache, **options)
        assert second.files.headers.reads == 0, spec
    # An object rewritten on S3 (another size and ETag in the listing) is read again.
    fs = s3fs.S3FileSystem(**s3)
    key = "speech-bucket/speech/cat/cat1.wav"
    before = fs.cat(key)
    try:
        fs.pipe(key, (root / "speech/dog/zz.wav").read_bytes())
        third, batch = indexed("s3://speech-bucket/speech/", index_cache=cache, storage_options=s3)
        assert third.files.headers.reads == 1
        assert int(batch["lengths"][CLIPS.index("cat/cat1.wav")]) == 900
    finally:
        fs.pipe(key, before)


def test_a_server_without_index_pages_is_named_with_what_to_give_instead(site) -> None:
    root, _ = site
    with counting_server(root) as server:  # answers a folder's URL with 404
        dm = AudioDataModule(f"{server.url}/speech/", val_split=0, num_workers=0, retries=0)
        with pytest.raises(
            ValueError,
            match=rf"{server.url}/speech/: cannot list the folder \(over HTTP .*index page.*"
            r"not found \(404\)\. Give a manifest",
        ):
            dm.setup("fit")


def test_a_missing_or_undecodable_remote_file_is_named_or_skipped(tmp_path: Path, s3) -> None:
    tree = write_tree(tmp_path / "site" / "speech")
    os.symlink(tmp_path / "nowhere.wav", tree / "cat" / "gone.wav")  # listed, then 404
    (tree / "dog" / "bad.flac").write_bytes(b"not a flac file at all" * 10)
    handler = functools.partial(_Quiet, directory=os.fspath(tmp_path / "site"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/speech/"
    try:
        strict = AudioDataModule(url, val_split=0, num_workers=0, retries=0, index_cache=False)
        with pytest.raises(
            ManifestError, match=rf"{url}cat/gone.wav: cannot read its header: .*404"
        ):
            strict.setup("fit")
        dm, batch = indexed(url, on_error="skip", retries=0, index_cache=False)
        assert dm.skipped.total == 2
        assert relative(dm.index.paths, url) == CLIPS
    finally:
        server.shutdown()
        server.server_close()
    fs = s3fs.S3FileSystem(**s3)
    fs.pipe("speech-bucket/broken/cat/bad.wav", b"RIFF but no more")
    fs.pipe("speech-bucket/broken/cat/ok.wav", (tree / "dog/zz.wav").read_bytes())
    with pytest.raises(
        ManifestError, match=r"s3://speech-bucket/broken/cat/bad.wav: cannot read its header"
    ):
        indexed("s3://speech-bucket/broken/", storage_options=s3, index_cache=False)
    with pytest.raises(ValueError, match=r"s3://speech-bucket/nothing/: the folder lists no"):
        indexed("s3://speech-bucket/nothing/", storage_options=s3, index_cache=False)


def test_torchcodec_decodes_a_folder_over_http_as_soundfile_does(site) -> None:
    torchcodec_or_skip()
    root, url = site
    _, expected = indexed(root / "speech", index_cache=False)
    dm, batch = indexed(f"{url}/speech/", decoder="torchcodec", index_cache=False)
    assert torch.equal(batch["lengths"], expected["lengths"])
    torch.testing.assert_close(batch["input_values"], expected["input_values"], rtol=0, atol=1e-6)


class LabelRecorder(L.LightningModule):
    """Records the labels and lengths of every batch it trains on."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 3)
        self.seen: list[tuple[int, int]] = []

    def training_step(self, batch: dict[str, Any], index: int) -> torch.Tensor:
        self.seen += zip(batch["label"].tolist(), batch["lengths"].tolist(), strict=True)
        logits = self.layer(batch["input_values"].mean(1, keepdim=True))
        return torch.nn.functional.cross_entropy(logits, batch["label"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_trainer_fits_on_a_class_folder_in_s3(site, s3, tmp_path: Path) -> None:
    _, expected = indexed(site[0] / "speech", index_cache=False)
    dm = AudioDataModule(
        "s3://speech-bucket/speech/",
        storage_options=s3,
        val_split=0,
        batch_size=3,
        num_workers=1,
        index_cache=tmp_path / "index",
    )  # fmt: skip  (the worker reads the audio with the storage options)
    model = LabelRecorder()
    trainer = L.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(model, datamodule=dm)
    want = zip(expected["label"].tolist(), expected["lengths"].tolist(), strict=True)
    assert sorted(model.seen) == sorted(want)
    assert trainer.global_step == 3
