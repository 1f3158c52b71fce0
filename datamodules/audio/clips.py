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
* a folder of class sub-folders, local or remote (labels from the sub-folder names, sorted, as
  Hugging Face's AudioFolder gives them), the files' extensions chosen by ``audio_key``:
  :mod:`datamodules.audio.folders`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from datamodules.audio.decoding import AudioDecodeError
from datamodules.audio.files import AudioFiles, folder_of, resolve
from datamodules.core.skipped import Skipped, where_in
from datamodules.shards.formats import detect_format
from datamodules.shards.jsonl import numbered_jsonl
from datamodules.shards.lines import ShardLines

__all__ = [
    "ClipIndex",
    "MANIFEST_EXTENSIONS",
    "ManifestError",
    "fail",
    "is_manifest",
    "join",
    "parse_record",
    "read_manifest",
    "records_in_memory",
]

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
        sources: The number of each clip's Source in a mixture, else None.
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
    sources: np.ndarray | None = None
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
            None if self.sources is None else self.sources[keep],
        )
        out.lengths = self.lengths[keep]
        return out


def fail(where: str, why: str, on_error: str, skipped: Skipped, file: str, line: Any) -> None:
    """Raises :class:`ManifestError` naming ``where`` (``on_error="raise"``), else counts the
    record in ``skipped``."""
    if on_error == "raise":
        raise ManifestError(f"{where}: {why}")
    skipped.record(file, line, why)


def parse_record(
    record: Any,
    base: str,
    bad: Callable[[str], None],
    text_key: str | None,
    label_key: str | None,
    files: AudioFiles,
) -> dict[str, Any] | None:
    """One NeMo-style record as ``{"path", "offset", "duration", "text"?, "label"?}``, or None
    after calling ``bad(why)`` (relative ``audio_filepath`` resolve against ``base``, a folder
    or a folder's URL; a header read for a missing ``duration`` goes through ``files``)."""
    if not isinstance(record, dict) or not isinstance(record.get("audio_filepath"), str):
        bad("no 'audio_filepath' (a string) in the record")
        return None
    given = record["audio_filepath"]
    audio = resolve(given, base)
    if not files.exists(audio):
        bad(f"audio_filepath {given!r} does not exist ({audio})")
        return None
    offset = record.get("offset", 0.0) or 0.0
    duration = record.get("duration")
    out: dict[str, Any] = {"path": audio}
    if duration is None:
        try:
            info = files.info(audio)
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
    files: AudioFiles,
) -> list[dict[str, Any]]:
    """The usable records of one NeMo manifest (see :func:`parse_record`, plus ``"where"``),
    local or remote, read by the shard layer; a bad line raises (or is counted in
    ``skipped``), naming file and line."""
    base = folder_of(path)
    records = []
    lines = ShardLines(path, detect_format(path, "jsonl")[1], options=files.options)
    try:
        with files.headers.of(path):
            for number, record in numbered_jsonl(lines, on_error, skipped):
                where = where_in(path, number)

                def bad(why: str, number: int = number, where: str = where) -> None:
                    fail(where, why, on_error, skipped, path, number)

                out = parse_record(record, base, bad, text_key, label_key, files)
                if out is not None:
                    out["where"] = where
                    records.append(out)
    finally:
        lines.close()
    return records


def records_in_memory(
    records: Sequence[Any],
    *,
    text_key: str | None,
    label_key: str | None,
    on_error: str,
    skipped: Skipped,
    files: AudioFiles,
) -> list[dict[str, Any]]:
    """Records given as dicts (a subclass's ``load_manifest``), named ``"record N"``; relative
    paths resolve against the working directory."""
    out = []
    for number, record in enumerate(records):
        where = f"record {number}"

        def bad(why: str, where: str = where) -> None:
            fail(where, why, on_error, skipped, "records", where)

        parsed = parse_record(record, os.getcwd(), bad, text_key, label_key, files)
        if parsed is not None:
            parsed["where"] = where
            out.append(parsed)
    return out


def _labels(indexes: list[ClipIndex]) -> tuple[np.ndarray | None, list[str] | None]:
    """The joined labels: named classes unified (sorted), or ints as they are."""
    given = [i.labels is not None for i in indexes]
    if not any(given):
        return None, None
    if not all(given):
        raise ValueError("every Source must give class labels, or none of them.")
    if all(i.classes is None for i in indexes):
        return np.concatenate([i.labels for i in indexes]), None
    if any(i.classes is None for i in indexes):
        raise ValueError("give every Source's labels as class names, or every one as ints.")
    classes = sorted({c for i in indexes for c in i.classes})
    position = {c: k for k, c in enumerate(classes)}
    parts = [np.asarray([position[c] for c in i.classes], np.int64)[i.labels] for i in indexes]
    return np.concatenate(parts), classes


def join(indexes: list[ClipIndex]) -> ClipIndex:
    """One index of several sources' clips, in order; ``sources`` numbers each clip's source.

    Raises:
        ValueError: Some sources have transcripts (or labels) and others do not.
    """
    texts = [i.texts is not None for i in indexes]
    if any(texts) and not all(texts):
        raise ValueError("every Source must give transcripts, or none of them.")
    labels, classes = _labels(indexes)
    blobs = None
    if any(i.blobs is not None for i in indexes):
        blobs = [b for i in indexes for b in (i.blobs or [None] * len(i))]
    out = ClipIndex(
        [p for i in indexes for p in i.paths],
        np.concatenate([i.offsets for i in indexes]),
        np.concatenate([i.durations for i in indexes]),
        [w for i in indexes for w in i.where],
        [t for i in indexes for t in i.texts] if all(texts) else None,
        labels,
        classes,
        indexes[0].sample_rate,
        blobs,
        np.concatenate([np.full(len(i), k, np.int64) for k, i in enumerate(indexes)]),
    )
    out.lengths = np.concatenate([i.lengths for i in indexes])
    return out
