"""Where records of conversations (chat, preference pairs) come from: files through the shard
layer, a list in memory, or a Hugging Face ``datasets.Dataset``, read a chunk of records at a time.

Every record is named by where it is, for the errors and the skipped list: ``file, line N``
(JSONL), ``file, row N`` (Parquet, Arrow), ``<datasets.Dataset>, row N`` and ``<conversations>, row
N`` (a list; rows from 1). Files are found as text finds them
(:func:`datamodules.tokens.inputs.find_files`: paths, URLs, globs, braces, directories and
dataset indexes, Hugging Face ``save_to_disk`` folders); JSONL, Parquet and Arrow hold
conversation records (a record is an object: ``.txt`` / ``.csv`` / ``.tsv`` files, which hold
strings or flat rows, are refused).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

from datamodules.conversations.store_build import RecordChunk
from datamodules.remote.listing import file_version
from datamodules.remote.retrying import RemoteOptions
from datamodules.shards.arrow import read_arrow_batches
from datamodules.shards.jsonl import numbered_jsonl
from datamodules.shards.lines import ShardLines
from datamodules.shards.parquet import parquet_batches, parquet_file
from datamodules.tokens.inputs import file_format

__all__ = [
    "CHAT_FORMATS",
    "CHUNK_RECORDS",
    "RecordChunk",
    "check_chat_files",
    "dataset_chunks",
    "file_chunks",
    "inputs_identity",
    "memory_chunks",
]

#: The file formats that hold conversation records.
CHAT_FORMATS = ("jsonl", "parquet", "arrow")
#: Records per chunk (what one render job handles).
CHUNK_RECORDS = 512


def check_chat_files(files: list[str], name: str) -> None:
    """Refuses found files that cannot hold conversation records, naming the argument."""
    for path in files:
        found = file_format(path)
        if found is None or found[0] not in CHAT_FORMATS:
            raise ValueError(
                f"{name}: {path!r} is not accepted: conversations are read from JSONL "
                "(.jsonl / .ndjson, optionally .gz / .zst), Parquet (.parquet) or Arrow "
                "(.arrow, a save_to_disk folder) files, one record per line or row."
            )


def file_chunks(path: str, options: RemoteOptions) -> Iterator[RecordChunk]:
    """The records of one JSONL, Parquet or Arrow file, a chunk at a time, with their lines / rows.

    Raises:
        RecordError: A line that is not JSON, naming the file and the line (a ValueError).
    """
    fmt, compression = file_format(path)
    if fmt == "parquet":
        with parquet_file(path, options) as pf:
            yield from _table_chunks(parquet_batches(pf, path))
        return
    if fmt == "arrow":
        yield from _table_chunks(read_arrow_batches(path, options=options))
        return
    lines = ShardLines(path, compression, options=options)
    try:
        records: list[Any] = []
        numbers: list[int] = []
        for number, record in numbered_jsonl(lines):
            records.append(record)
            numbers.append(number)
            if len(records) >= CHUNK_RECORDS:
                yield RecordChunk(records, numbers)
                records, numbers = [], []
        if records:
            yield RecordChunk(records, numbers)
    finally:
        lines.close()


def _table_chunks(batches: Iterator[Any]) -> Iterator[RecordChunk]:
    """Arrow record batches (of a Parquet or Arrow file) as chunks of records, rows from 1."""
    row = 0
    for batch in batches:
        records = batch.to_pylist()
        for start in range(0, len(records), CHUNK_RECORDS):
            part = records[start : start + CHUNK_RECORDS]
            yield RecordChunk(part, list(range(row + 1, row + 1 + len(part))))
            row += len(part)


def memory_chunks(conversations: Sequence[Any]) -> Iterator[RecordChunk]:
    """A list of conversations (records, or bare message lists) a chunk at a time (rows from 1)."""
    for start in range(0, len(conversations), CHUNK_RECORDS):
        part = [as_record(c) for c in conversations[start : start + CHUNK_RECORDS]]
        yield RecordChunk(part, list(range(start + 1, start + 1 + len(part))))


def dataset_chunks(dataset: Any) -> Iterator[RecordChunk]:
    """The rows of a ``datasets.Dataset`` as records, a chunk at a time (rows from 1)."""
    for start in range(0, len(dataset), CHUNK_RECORDS):
        batch = dataset[start : start + CHUNK_RECORDS]
        keys = list(batch)
        count = len(batch[keys[0]]) if keys else 0
        part = [{k: batch[k][i] for k in keys} for i in range(count)]
        yield RecordChunk(part, list(range(start + 1, start + 1 + count)))


def as_record(conversation: Any) -> Any:
    """A bare list of messages is the record ``{"messages": [...]}``; a mapping stays."""
    return {"messages": conversation} if isinstance(conversation, list) else conversation


def inputs_identity(
    kind: str, value: Any, options: RemoteOptions | None = None
) -> list[dict[str, Any]]:
    """What identifies the inputs in the store's key: files' versions, a Dataset's
    fingerprint, or a hash of a list's records."""
    if kind == "files":
        return [file_version(f, options) or {"path": f, "version": None} for f in value]
    if kind == "dataset":
        fingerprint = getattr(value, "_fingerprint", None)
        return [{"dataset": fingerprint, "rows": len(value), "columns": value.column_names}]
    digest = hashlib.sha256()
    for record in value:
        digest.update(json.dumps(as_record(record), sort_keys=True, default=str).encode())
        digest.update(b"\n")
    return [{"conversations": digest.hexdigest(), "count": len(value)}]
