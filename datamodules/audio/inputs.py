"""One split's inputs, whatever their form, into a :class:`~datamodules.audio.clips.ClipIndex`.

A split is a manifest, a Parquet / Arrow table, a tar shard, a class folder (local or a URL:
``s3://bucket/speech/``, ``http://host/speech/``), a list of them, or
records in memory; labels given as names become class indices (the train split's classes
for validation and test).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from datamodules.audio.clips import (
    ClipIndex,
    is_manifest,
    read_manifest,
    records_in_memory,
)
from datamodules.audio.decoding import resampled_length
from datamodules.audio.files import AudioFiles
from datamodules.audio.folders import is_remote_folder, scan_class_folders
from datamodules.audio.shard_clips import is_table, is_tar, read_table, read_tar
from datamodules.core.skipped import Skipped
from datamodules.remote.files import is_remote
from datamodules.remote.listing import expand_files, has_magic
from datamodules.shards.arrow import saved_dataset_files
from datamodules.shards.records import read_records

__all__ = ["expanded", "first_record_has", "read_inputs"]


def _records_of(
    spec: Any,
    *,
    audio_key: Sequence[str],
    audio_column: str,
    text_key,
    label_key,
    on_error,
    skipped,
    files: AudioFiles,
):
    specs = list(spec) if isinstance(spec, (list, tuple)) else [spec]
    if specs and all(isinstance(item, dict) for item in specs):
        return records_in_memory(
            specs, text_key=text_key, label_key=label_key, on_error=on_error, skipped=skipped,
            files=files,
        )  # fmt: skip
    records: list[dict[str, Any]] = []
    paths = []
    for path in expanded(specs, files):
        saved = saved_dataset_files(path, files.options)  # save_to_disk: its Arrow files
        paths += [path] if saved is None else saved
    for path in paths:
        if is_remote_folder(path) or (not is_remote(path) and os.path.isdir(path)):
            records += scan_class_folders(path, audio_key, skipped, on_error, files)
        elif is_tar(path):
            records += read_tar(
                path, extensions=audio_key, text_key=text_key, label_key=label_key,
                on_error=on_error, skipped=skipped, files=files,
            )  # fmt: skip
        elif is_table(path):
            records += read_table(
                path, audio_column=audio_column, text_key=text_key, label_key=label_key,
                on_error=on_error, skipped=skipped, files=files,
            )  # fmt: skip
        elif is_manifest(path):
            if not files.exists(path):
                raise FileNotFoundError(f"manifest {path!r} does not exist.")
            records += read_manifest(
                path, text_key=text_key, label_key=label_key, on_error=on_error, skipped=skipped,
                files=files,
            )  # fmt: skip
        else:
            raise ValueError(
                f"{path!r} is neither a JSONL manifest (.json / .jsonl), a Parquet or Arrow "
                "table of audio, a tar shard, a folder of class sub-folders, nor a folder "
                "that datasets' save_to_disk wrote."
            )
    return records


def expanded(specs: Sequence[Any], files: AudioFiles) -> list[str]:
    """The paths of ``specs``: globs and brace patterns (``shard-{000..009}.tar``,
    ``s3://b/*.parquet``) expanded as streams expand them, the rest as given."""
    out: list[str] = []
    for item in specs:
        path = os.fspath(item)
        if has_magic(path) or "{" in path:
            out += expand_files(path, files.options, what="file")
        else:
            out.append(path)
    return out


def read_inputs(
    spec: Any,
    *,
    sample_rate: int,
    audio_key: Sequence[str],
    audio_column: str = "audio",
    text_key: str | None,
    label_key: str | None,
    on_error: str,
    skipped: Skipped,
    classes: list[str] | None = None,
    files: AudioFiles | None = None,
) -> ClipIndex:
    """A :class:`ClipIndex` of one split's inputs (a manifest, a folder, or a list of them).

    Args:
        spec: A path (manifest or class folder), a list of paths, or a list of records
            (dicts with NeMo's keys).
        sample_rate: The target rate (for the lengths in samples).
        audio_key: Audio file extensions of class folders and tar members.
        audio_column: The audio column of Parquet and Arrow tables.
        text_key: The manifest field of the transcript, or None.
        label_key: The manifest field of the class label, or None (folders: their names).
        on_error: ``"raise"`` or ``"skip"`` (counted in ``skipped``).
        skipped: Where skipped records are counted.
        classes: The train split's class names (validation and test use its labels).
        files: Opens local and remote inputs and audio files (None: local, default options).
    """
    records = _records_of(
        spec, audio_key=audio_key, audio_column=audio_column, text_key=text_key,
        label_key=label_key, on_error=on_error, skipped=skipped, files=files or AudioFiles(),
    )  # fmt: skip
    if not records:
        raise ValueError(f"{spec!r}: no usable clips (see dm.skipped).")
    labels = None
    if "label" in records[0]:
        values = [r["label"] for r in records]
        if all(isinstance(v, int) for v in values) and classes is None:
            labels = np.asarray(values, dtype=np.int64)
        else:
            names = [str(v) for v in values]
            if classes is None:
                classes = sorted(set(names))
            position = {name: i for i, name in enumerate(classes)}
            unknown = sorted(set(names) - set(position))
            if unknown:
                raise ValueError(f"{spec!r} has classes {unknown} that the train split lacks.")
            labels = np.asarray([position[n] for n in names], dtype=np.int64)
    index = ClipIndex(
        [r["path"] for r in records],
        np.asarray([r["offset"] for r in records], dtype=np.float64),
        np.asarray([r["duration"] for r in records], dtype=np.float64),
        [r["where"] for r in records],
        [r["text"] for r in records] if "text" in records[0] else None,
        labels,
        classes if labels is not None and classes is not None else None,
        sample_rate,
        [r.get("blob") for r in records] if any("blob" in r for r in records) else None,
    )
    exact = [
        resampled_length(r["frames"], r["rate"], sample_rate) if "frames" in r else -1
        for r in records
    ]
    index.lengths = np.where(np.asarray(exact) >= 0, np.asarray(exact), index.lengths)
    return index


def first_record_has(spec: Any, key: str, files: AudioFiles) -> bool:
    """Whether the first record of a split's first input (a manifest, a table, a tar, or
    records in memory) holds ``key`` (tars: a ``txt`` / ``text`` member for ``"text"``)."""
    items = spec if isinstance(spec, (list, tuple)) else [spec]
    if not items:
        return False
    if isinstance(items[0], dict):
        return key in items[0]
    path = expanded(items[:1], files)[0]
    saved = saved_dataset_files(path, files.options)
    path = path if saved is None else saved[0]
    if not is_remote(path) and not os.path.isfile(path):
        return False
    if is_table(path):
        return any(key in row for row in read_records(path, stop=1, options=files.options))
    if is_tar(path):
        rows = read_records(path, stop=1, options=files.options)
        return any(k in row for row in rows for k in ("txt", "text"))
    if not is_manifest(path):
        return False
    rows = read_records(path, "jsonl", "skip", stop=1, counter=Skipped(), options=files.options)
    return any(isinstance(row, dict) and key in row for row in rows)
