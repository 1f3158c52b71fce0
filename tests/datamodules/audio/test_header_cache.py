"""Durations from file headers are read once into the clip index and cached across runs: a
second DataModule over the same files reads no header (it would fail if it did)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from datamodules import AudioDataModule
from tests.datamodules.audio.audio_data import write_classes

FILES = 8  # write_classes(per_class=4) with two classes


def index_of(folder: Path, cache: object) -> AudioDataModule:
    dm = AudioDataModule(folder, val_split=0, num_workers=0, index_cache=cache)
    dm.setup("fit")
    return dm


def spoil_headers(folder: Path) -> list[Path]:
    """Overwrites the first bytes of every file, keeping its size and mtime: a stat sees the
    same file, a header read fails."""
    spoiled = []
    for path in sorted(folder.rglob("*.*")):
        st = path.stat()
        with open(path, "r+b") as f:
            f.write(b"\0" * 64)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        spoiled.append(path)
    return spoiled


def test_a_second_datamodule_takes_every_header_from_the_cache(tmp_path: Path) -> None:
    folder, cache = write_classes(tmp_path / "sounds"), tmp_path / "index"
    first = index_of(folder, cache)
    assert first.files.headers.reads == FILES
    assert len(list(cache.glob("*.json"))) == 1  # one cache file for the folder
    spoiled = spoil_headers(folder)
    second = index_of(folder, cache)
    assert second.files.headers.reads == 0
    assert first.index is not None and second.index is not None
    np.testing.assert_array_equal(second.index.lengths, first.index.lengths)
    np.testing.assert_array_equal(second.index.durations, first.index.durations)
    assert second.index.paths == first.index.paths
    # A file whose mtime changed is read again: here its spoiled header is named.
    os.utime(spoiled[0])
    with pytest.raises(ValueError, match=rf"{spoiled[0].name}: cannot read its header"):
        index_of(folder, cache)


def test_index_cache_false_reads_the_headers_at_every_setup(tmp_path: Path) -> None:
    folder = write_classes(tmp_path / "sounds")
    assert index_of(folder, False).files.headers.reads == FILES
    assert index_of(folder, False).files.headers.reads == FILES
    with pytest.raises(TypeError, match=r"index_cache=3 is not accepted"):
        AudioDataModule(folder, index_cache=3)
