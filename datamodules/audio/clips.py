"""The clip index: every clip of a split as flat arrays, read from manifests or class folders.

A :class:`ClipIndex` holds, per clip, its file, its segment (``offset`` and ``duration``
seconds), its length in samples at the target rate, where it came from (``"manifest.jsonl:
line 3"``, for messages) and its transcript or class label. Durations come from the manifest
(NeMo's ``duration``) or, where a manifest has none and for class folders, from the file's
header (:func:`~datamodules.audio.decoding.audio_info`): nothing is decoded to measure.

Inputs:

* a NeMo-style JSONL manifest (``.json`` / ``.jsonl``): one record a line with
  ``audio_filepath`` (relative paths resolve against the manifest's folder), ``duration``,
  ``text`` and an optional ``offset`` (a segment of a longer file);
* a folder of class sub-folders (labels from the sub-folder names, sorted, as Hugging Face's
  AudioFolder gives them), the files' extensions chosen by ``audio_key``.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from datamodules.audio.decoding import AudioDecodeError, audio_info, resampled_length
from datamodules.core.skipped import Skipped, where_in
from datamodules.shards.formats import detect_format
from datamodules.shards.jsonl import numbered_jsonl
from datamodules.shards.lines import ShardLines
from datamodules.shards.records import read_records

__all__ = ["MANIFEST_EXTENSIONS", "ClipIndex", "ManifestError", "read_inputs", "scan_class_folders"]

MANIFEST_EXTENSIONS = (".json", ".jsonl")


class ManifestError(ValueError):
    """A manifest record that cannot be used, named with its file and line."""


@dataclass
class ClipIndex:
    """Flat per-clip arrays of one split (see the module's docstring).

    Attributes:
        paths: The audio file of each clip.
        offsets: Seconds into the file where each clip starts.
        durations: Seconds of each clip (its segment).
        where: Where each clip was listed, for messages.
        texts: Transcripts, or None.
        labels: Class labels (int64), or None.
        classes: Class names in label order, or None (labels given as ints).
        sample_rate: The target rate of :attr:`lengths`.
        blobs: The encoded audio of clips stored in a table (Parquet, Arrow), else None.
    """

    paths: list[str]
    offsets: np.ndarray
    durations: np.ndarray
    where: list[str]
    texts: list[str] | None = None
    labels: np.ndarray | None = None
    classes: list[str] | None = None
    sample_rate: int = 16000
    blobs: list[bytes | None] | None = None
    lengths: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.lengths = np.rint(self.durations * self.sample_rate).astype(np.int64)

    def __len__(self) -> int:
        return len(self.paths)

    def subset(self, keep: np.ndarray) -> ClipIndex:
        """The clips at positions ``keep``, in that order."""
        rows = keep.tolist()
        out = ClipIndex(
            [self.paths[i] for i in rows],
            self.offsets[keep],
            self.durations[keep],
            [self.where[i] for i in rows],
            None if self.texts is None else [self.texts[i] for i in rows],
            None if self.labels is None else self.labels[keep],
            self.classes,
            self.sample_rate,
            None if self.blobs is None else [self.blobs[i] for i in rows],
        )
        out.lengths = self.lengths[keep]
        return out


def _fail(where: str, why: str, on_error: str, skipped: Skipped, file: str, line: Any) -> None:
    if on_error == "raise":
        raise ManifestError(f"{where}: {why}")
    skipped.record(file, line, why)


def parse_record(
    record: Any,
    base: str,
    bad: Callable[[str], None],
    text_key: str | None,
    label_key: str | None,
) -> dict[str, Any] | None:
    """One NeMo-style record as ``{"path", "offset", "duration", "text"?, "label"?}``, or None
    after calling ``bad(why)`` (relative ``audio_filepath`` resolve against ``base``)."""
    if not isinstance(record, dict) or not isinstance(record.get("audio_filepath"), str):
        bad("no 'audio_filepath' (a string) in the record")
        return None
    given = record["audio_filepath"]
    audio = given if os.path.isabs(given) or "://" in given else os.path.join(base, given)
    if not os.path.exists(audio):
        bad(f"audio_filepath {given!r} does not exist ({audio})")
        return None
    offset = record.get("offset", 0.0) or 0.0
    duration = record.get("duration")
    out: dict[str, Any] = {"path": audio}
    if duration is None:
        try:
            info = audio_info(audio)
        except AudioDecodeError as error:
            bad(f"cannot read the header of {audio}: {error.reason}")
            return None
        if not offset:
            out.update(frames=info.frames, rate=info.sample_rate)
        duration = info.duration - offset if isinstance(offset, (int, float)) else None
    if not _seconds(offset) or not _seconds(duration):
        bad(f"offset={offset!r} and duration={duration!r} must be numbers of seconds")
        return None
    if duration <= 0 or offset < 0:
        bad(f"an empty clip (offset={offset}, duration={duration})")
        return None
    out.update(offset=float(offset), duration=float(duration))
    if text_key is not None:
        text = record.get(text_key)
        if not isinstance(text, str):
            bad(f"no {text_key!r} (a string) in the record")
            return None
        out["text"] = text
    if label_key is not None:
        label = record.get(label_key)
        if not isinstance(label, (str, int)) or isinstance(label, bool):
            bad(f"no {label_key!r} (a class name or an int) in the record")
            return None
        out["label"] = label
    return out


def _seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_manifest(path: str) -> bool:
    """Whether ``path`` names a JSONL manifest (``.json`` / ``.jsonl``, optionally ``.gz`` /
    ``.zst``)."""
    name = path.lower()
    for suffix in (".gz", ".zst"):
        name = name.removesuffix(suffix)
    return name.endswith(MANIFEST_EXTENSIONS)


def read_manifest(
    path: str,
    *,
    text_key: str | None,
    label_key: str | None,
    on_error: str,
    skipped: Skipped,
) -> list[dict[str, Any]]:
    """The usable records of one NeMo manifest (see :func:`parse_record`, plus ``"where"``),
    read by the shard layer; a bad line raises (or is counted in ``skipped``), naming file and
    line."""
    base = os.path.dirname(os.path.abspath(path))
    records = []
    lines = ShardLines(path, detect_format(path, "jsonl")[1])
    try:
        for number, record in numbered_jsonl(lines, on_error, skipped):
            where = where_in(path, number)

            def bad(why: str, number: int = number, where: str = where) -> None:
                _fail(where, why, on_error, skipped, path, number)

            out = parse_record(record, base, bad, text_key, label_key)
            if out is not None:
                out["where"] = where
                records.append(out)
    finally:
        lines.close()
    return records


def is_tar(path: str) -> bool:
    """Whether ``path`` names a tar shard (``.tar``, ``.tar.gz``, ``.tgz``)."""
    return path.lower().endswith((".tar", ".tar.gz", ".tgz"))


def _tar_fields(record: dict[str, Any], text_key: str | None, label_key: str | None):
    """A webdataset record's transcript and label: ``txt`` / ``text`` members (or ``text_key``
    in its ``json``), ``cls`` (or ``label_key`` in its ``json``)."""
    meta = record.get("json") if isinstance(record.get("json"), dict) else {}
    text = meta.get(text_key) if text_key else None
    if text is None:
        text = record.get("txt", record.get("text"))
    label = meta.get(label_key) if label_key else None
    if label is None and label_key is not None:
        label = record.get(label_key, record.get("cls"))
    return text, label


def read_tar(
    path: str,
    *,
    extensions: Sequence[str],
    text_key: str | None,
    label_key: str | None,
    on_error: str,
    skipped: Skipped,
) -> list[dict[str, Any]]:
    """The clips of a webdataset tar shard (read by the shard layer): each record's audio is
    its first member among ``extensions``; the transcript a ``txt`` member (or ``text_key`` of
    its ``json``), the label ``label_key`` (a member or in the ``json``). Records are named
    ``"file: key 'k'"``."""
    records = []
    for record in read_records(path):
        key = record.get("__key__")
        where = where_in(path, f"key {key!r}")

        def bad(why: str, key: Any = key, where: str = where) -> None:
            _fail(where, why, on_error, skipped, path, f"key {key!r}")

        blob = next((record[e] for e in extensions if isinstance(record.get(e), bytes)), None)
        if not blob:
            bad(f"no audio member ({', '.join(extensions)})")
            continue
        try:
            info = audio_info(io.BytesIO(blob))
        except AudioDecodeError as error:
            bad(f"cannot read the audio header: {error.reason}")
            continue
        if not info.frames:
            bad("an empty clip (0 frames)")
            continue
        out: dict[str, Any] = {"path": where, "blob": blob, "offset": 0.0, "where": where}
        out.update(duration=info.duration, frames=info.frames, rate=info.sample_rate)
        text, label = _tar_fields(record, text_key, label_key)
        if text_key is not None:
            if not isinstance(text, str):
                bad(f"no transcript (a txt member, or {text_key!r} in its json)")
                continue
            out["text"] = text
        if label_key is not None:
            if not isinstance(label, (str, int)) or isinstance(label, bool):
                bad(f"no {label_key!r} (a class name or an int)")
                continue
            out["label"] = label
        records.append(out)
    return records


def is_table(path: str) -> bool:
    """Whether ``path`` names a Parquet or Arrow file."""
    return path.lower().endswith((".parquet", ".pq", ".arrow"))


def read_table(
    path: str,
    *,
    audio_column: str,
    text_key: str | None,
    label_key: str | None,
    on_error: str,
    skipped: Skipped,
) -> list[dict[str, Any]]:
    """The clips of a Hugging Face audio table (Parquet or Arrow, read by the shard layer):
    ``audio_column`` holds ``{"bytes", "path"}`` (the ``Audio`` feature's storage); durations
    come from the encoded audio's header. Rows are named ``"file: row N"`` (from 1)."""
    columns = [c for c in (audio_column, text_key, label_key) if c]
    records = []
    for number, row in enumerate(read_records(path, columns=columns), 1):
        where = f"{path}: row {number}"

        def bad(why: str, number: int = number, where: str = where) -> None:
            _fail(where, why, on_error, skipped, path, f"row {number}")

        audio = row.get(audio_column)
        blob = audio.get("bytes") if isinstance(audio, dict) else None
        if not isinstance(blob, bytes) or not blob:
            bad(f"no encoded audio in column {audio_column!r} (a struct of bytes and path)")
            continue
        try:
            info = audio_info(io.BytesIO(blob))
        except AudioDecodeError as error:
            bad(f"cannot read the audio header: {error.reason}")
            continue
        if not info.frames:
            bad("an empty clip (0 frames)")
            continue
        out: dict[str, Any] = {"path": audio.get("path") or where, "blob": blob, "offset": 0.0}
        out.update(duration=info.duration, frames=info.frames, rate=info.sample_rate)
        out["where"] = where
        for key, name in ((text_key, "text"), (label_key, "label")):
            if key is None:
                continue
            value = row.get(key)
            valid = isinstance(value, str) or (name == "label" and isinstance(value, int))
            if not valid or isinstance(value, bool):
                bad(f"no {key!r} ({'a string' if name == 'text' else 'a class'}) in the row")
                break
            out[name] = value
        else:
            records.append(out)
    return records


def records_in_memory(
    records: Sequence[Any], *, text_key, label_key, on_error: str, skipped: Skipped
) -> list[dict[str, Any]]:
    """Records given as dicts (a subclass's ``load_manifest``), named ``"record N"``."""
    out = []
    for number, record in enumerate(records):
        where = f"record {number}"

        def bad(why: str, where: str = where) -> None:
            _fail(where, why, on_error, skipped, "records", where)

        parsed = parse_record(record, os.getcwd(), bad, text_key, label_key)
        if parsed is not None:
            parsed["where"] = where
            out.append(parsed)
    return out


def scan_class_folders(root: str, extensions: Sequence[str], skipped: Skipped, on_error: str):
    """Records of a folder of class sub-folders: ``{"path", "offset", "duration", "where",
    "label"}`` (label: the sub-folder's name), durations from the headers."""
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root!r} is not a folder of class sub-folders.")
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    records = []
    for name in classes:
        for folder, dirs, files in os.walk(os.path.join(root, name)):
            dirs.sort()
            for file in sorted(files):
                if not file.lower().endswith(tuple(f".{e}" for e in extensions)):
                    continue
                path = os.path.join(folder, file)
                try:
                    info = audio_info(path)
                except AudioDecodeError as error:
                    _fail(
                        path,
                        f"cannot read its header: {error.reason}",
                        on_error,
                        skipped,
                        path,
                        None,
                    )
                    continue
                if info.frames == 0:
                    _fail(path, "an empty clip (0 frames)", on_error, skipped, path, None)
                    continue
                records.append(
                    {"path": path, "offset": 0.0, "duration": info.duration, "where": path,
                     "label": name, "frames": info.frames, "rate": info.sample_rate}
                )  # fmt: skip
    if not records:
        raise ValueError(
            f"{root!r} holds no audio files ({', '.join(extensions)}) in class sub-folders."
        )
    return records


def _records_of(
    spec: Any,
    *,
    audio_key: Sequence[str],
    audio_column: str,
    text_key,
    label_key,
    on_error,
    skipped,
):
    specs = list(spec) if isinstance(spec, (list, tuple)) else [spec]
    if specs and all(isinstance(item, dict) for item in specs):
        return records_in_memory(
            specs, text_key=text_key, label_key=label_key, on_error=on_error, skipped=skipped
        )
    records: list[dict[str, Any]] = []
    for item in specs:
        path = os.fspath(item)
        if os.path.isdir(path):
            records += scan_class_folders(path, audio_key, skipped, on_error)
        elif is_tar(path):
            records += read_tar(
                path, extensions=audio_key, text_key=text_key, label_key=label_key,
                on_error=on_error, skipped=skipped,
            )  # fmt: skip
        elif is_table(path):
            records += read_table(
                path, audio_column=audio_column, text_key=text_key, label_key=label_key,
                on_error=on_error, skipped=skipped,
            )  # fmt: skip
        elif is_manifest(path):
            if not os.path.exists(path):
                raise FileNotFoundError(f"manifest {path!r} does not exist.")
            records += read_manifest(
                path, text_key=text_key, label_key=label_key, on_error=on_error, skipped=skipped
            )
        else:
            raise ValueError(
                f"{path!r} is neither a JSONL manifest (.json / .jsonl), a Parquet or Arrow "
                "table of audio, a tar shard, nor a folder of class sub-folders."
            )
    return records


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
    """
    records = _records_of(
        spec, audio_key=audio_key, audio_column=audio_column, text_key=text_key,
        label_key=label_key, on_error=on_error, skipped=skipped,
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
