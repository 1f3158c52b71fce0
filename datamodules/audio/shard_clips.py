"""Clips stored inside shards: webdataset tars and Hugging Face audio tables (Parquet, Arrow).

Both are read once, through the shard layer, and their encoded clips are kept in the index (in
memory, compressed); durations come from each clip's header. A bad record is named by its
shard and key (tars) or row (tables), and raised or counted as
:func:`~datamodules.audio.clips.fail` says.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from datamodules.audio.clips import fail
from datamodules.audio.decoding import AudioDecodeError, audio_info
from datamodules.audio.files import AudioFiles
from datamodules.core.skipped import Skipped, where_in
from datamodules.shards.records import read_records

__all__ = ["is_table", "is_tar", "read_table", "read_tar"]


def is_tar(path: str) -> bool:
    """Whether ``path`` names a tar shard (``.tar``, ``.tar.gz``, ``.tgz``)."""
    return path.lower().endswith((".tar", ".tar.gz", ".tgz"))


def _tar_fields(
    record: dict[str, Any], text_key: str | None, label_key: str | None
) -> tuple[Any, Any]:
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
    files: AudioFiles,
) -> list[dict[str, Any]]:
    """The clips of a webdataset tar shard (read by the shard layer, local or remote with
    ``files.options``): each record's audio is
    its first member among ``extensions``; the transcript a ``txt`` member (or ``text_key`` of
    its ``json``), the label ``label_key`` (a member or in the ``json``). Records are named
    ``"file: key 'k'"``."""
    records = []
    for record in read_records(path, options=files.options):
        key = record.get("__key__")
        where = where_in(path, f"key {key!r}")

        def bad(why: str, key: Any = key, where: str = where) -> None:
            fail(where, why, on_error, skipped, path, f"key {key!r}")

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
    files: AudioFiles,
) -> list[dict[str, Any]]:
    """The clips of a Hugging Face audio table (Parquet or Arrow, read by the shard layer,
    local or remote with ``files.options``):
    ``audio_column`` holds ``{"bytes", "path"}`` (the ``Audio`` feature's storage); durations
    come from the encoded audio's header. Rows are named ``"file: row N"`` (from 1)."""
    columns = [c for c in (audio_column, text_key, label_key) if c]
    records = []
    for number, row in enumerate(read_records(path, columns=columns, options=files.options), 1):
        where = f"{path}: row {number}"

        def bad(why: str, number: int = number, where: str = where) -> None:
            fail(where, why, on_error, skipped, path, f"row {number}")

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
