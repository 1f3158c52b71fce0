"""TextDataModule's input files: finding them and reading their documents a chunk at a time.

Formats, by extension (UTF-8; every error names the file and the line or row):

* ``.jsonl``: one JSON object per line, the text under ``text_key``, the label (an int or a
  string), if any, under ``label_key``; blank lines are not records.
* ``.csv`` / ``.tsv``: a header row naming the columns; the text in column ``text_key``, the
  label, if any, in column ``label_key``. A file whose every label is an integer (``"3"``,
  ``"-1"``) gives int labels, otherwise strings (see :func:`table_labels`).
* ``.txt``: one text per line, no labels; blank lines are not records.
* ``.parquet``: the ``text_key`` column (and ``label_key``, when the file has it), read a row
  group at a time, never the whole file.

``label_key=None`` (TextDataModule's default) reads labels from the ``"label"`` key or column
when the records have one, and leaves the texts unlabelled otherwise; a ``label_key`` given
explicitly must be in every record (a typo raises at once, naming the file, the line and the
keys found), and a ``.txt`` file, which holds no labels, refuses one.

The line formats may be compressed (``.gz``, ``.zst``). Files may be local or remote
(``http(s)://``, ``s3://``...): they are opened through :mod:`datamodules.remote`, with its
storage options, retries and errors that name the URL and the status.

:func:`read_documents` yields a file's documents as :class:`Chunk`\\ s of at most a few
thousand texts, so that no reader ever holds a whole corpus.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from datamodules.remote.files import (
    decompress,
    is_remote,
    local_path,
    open_binary,
    open_seekable_remote,
)
from datamodules.remote.listing import expand_files, has_magic
from datamodules.remote.retrying import RemoteError, RemoteOptions

__all__ = [
    "CHUNK_CHARS",
    "CHUNK_TEXTS",
    "COMPRESSIONS",
    "Chunk",
    "DEFAULT_LABEL_KEY",
    "FORMATS",
    "accepted_names",
    "arrow_chunk",
    "check_file_argument",
    "file_format",
    "find_files",
    "read_documents",
    "table_labels",
]

FORMATS = {".jsonl": "jsonl", ".txt": "txt", ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet"}
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd"}
#: Texts per chunk, and characters per chunk (whichever comes first).
CHUNK_TEXTS = 4096
CHUNK_CHARS = 8 << 20
_INT = re.compile(r"[+-]?\d+")
#: The key or column read for labels when ``label_key`` is not given (labels when present).
DEFAULT_LABEL_KEY = "label"


def file_format(path: str) -> tuple[str, str | None] | None:
    """``(format, compression)`` of a file from its name, or None when it is not one of ours."""
    name = str(path).split("?", 1)[0].lower()
    compression = None
    for ext, comp in COMPRESSIONS.items():
        if name.endswith(ext):
            compression, name = comp, name[: -len(ext)]
    for ext, fmt in FORMATS.items():
        if name.endswith(ext):
            if fmt == "parquet" and compression is not None:
                return None  # Parquet compresses internally
            return fmt, compression
    return None


def accepted_names() -> str:
    """The accepted file names, for error messages."""
    return ".jsonl, .csv, .tsv or .txt (each optionally .gz or .zst), or .parquet"


def check_file_argument(value: Any, name: str) -> list[str]:
    """Checks a ``train_file`` / ``val_file`` / ``test_file`` argument in ``__init__``.

    Accepts a path or URL, a glob, a directory, or a list of them. Globs and directories are
    expanded in ``setup`` (:func:`find_files`); a plain file name must have an accepted suffix.

    Returns:
        The items as strings.

    Raises:
        TypeError: Neither a path nor a list of paths.
        ValueError: An empty list, or a file whose suffix is not accepted.
    """
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items:
        raise ValueError(f"{name}=[] is not accepted: give a file, a glob, a directory or a list.")
    out = []
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(
                f"{name}={value!r} is not accepted: use a file path or URL, a glob, a "
                "directory, or a list of them."
            )
        text = os.fspath(item)
        directory = not is_remote(text) and os.path.isdir(local_path(text))
        if not (has_magic(text) or directory or file_format(text)):
            raise ValueError(
                f"{name}={text!r} is not accepted: use a file ending in " + accepted_names() + "."
            )
        out.append(text)
    return out


def find_files(items: list[str], name: str, options: RemoteOptions) -> list[str]:
    """The files of a checked file argument: globs and directories expanded, sorted.

    Raises:
        FileNotFoundError: A local file that does not exist, or a glob that matches nothing.
        ValueError: A matched file whose suffix is not accepted, or one listed twice.
    """
    try:
        files = expand_files(
            items, options, known=lambda p: file_format(p) is not None, what="file"
        )
    except ValueError as error:
        raise FileNotFoundError(f"{name}: {error}") from None
    for path in files:
        if file_format(path) is None:
            raise ValueError(f"{name}: {path!r} is not a file ending in " + accepted_names() + ".")
        if not is_remote(path) and not os.path.isfile(local_path(path)):
            raise FileNotFoundError(f"{path}: no such file.")
    return files


@dataclass
class Chunk:
    """Consecutive documents of one file.

    Attributes:
        texts: The texts.
        labels: One label per text (None where a record has none), or None for a format
            without labels.
        lines: Per text, its line (line formats) or row (Parquet) in the file, from 1.
    """

    texts: list[str]
    labels: list[Any] | None
    lines: list[int]


class _Chunker:
    """Collects documents into chunks of at most CHUNK_TEXTS texts or CHUNK_CHARS characters."""

    def __init__(self, labelled: bool) -> None:
        self.labelled = labelled
        self._reset()

    def _reset(self) -> None:
        self.texts: list[str] = []
        self.labels: list[Any] = []
        self.lines: list[int] = []
        self.chars = 0

    def add(self, text: str, label: Any, line: int) -> Chunk | None:
        self.texts.append(text)
        self.labels.append(label)
        self.lines.append(line)
        self.chars += len(text)
        if len(self.texts) >= CHUNK_TEXTS or self.chars >= CHUNK_CHARS:
            return self.take()
        return None

    def take(self) -> Chunk | None:
        if not self.texts:
            return None
        chunk = Chunk(self.texts, self.labels if self.labelled else None, self.lines)
        self._reset()
        return chunk


def _open(path: str, compression: str | None, options: RemoteOptions) -> Any:
    try:
        return decompress(open_binary(path, 0, options), compression)
    except RemoteError:
        raise
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file.") from None


def _jsonl(
    path: str, handle: Any, text_key: str, label_key: str, required: bool
) -> Iterator[Chunk]:
    chunker = _Chunker(labelled=True)
    for number, raw in enumerate(handle, start=1):
        try:
            line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"{path}, line {number}: not valid UTF-8 ({error.reason}).") from None
        if not line.strip():
            continue
        try:
            record = json.loads(line.rstrip("\r\n"))  # the break would move the column
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path}, line {number}: invalid JSON: {error.msg} (column {error.colno})."
            ) from None
        if not isinstance(record, dict):
            raise ValueError(
                f"{path}, line {number}: expected a JSON object with a {text_key!r} key, "
                f"got a {type(record).__name__}."
            )
        if text_key not in record:
            raise ValueError(
                f"{path}, line {number}: no {text_key!r} key (keys: {sorted(record)}); set "
                "text_key to the key that holds the text."
            )
        if required and label_key not in record:
            raise ValueError(
                f"{path}, line {number}: no {label_key!r} key (keys: {sorted(record)}); set "
                "label_key to the key that holds the label (or leave it unset for texts "
                "without labels)."
            )
        text = record[text_key]
        if not isinstance(text, str):
            raise ValueError(
                f"{path}, line {number}: {text_key!r} holds a {type(text).__name__} "
                f"({text!r}); expected a string."
            )
        chunk = chunker.add(text, record.get(label_key), number)
        if chunk is not None:
            yield chunk
    if (chunk := chunker.take()) is not None:
        yield chunk


def _table(
    path: str, handle: Any, text_key: str, label_key: str, delimiter: str, required: bool
) -> Iterator[Chunk]:
    number = 1
    stream = io.TextIOWrapper(handle, encoding="utf-8-sig", newline="")
    try:
        reader = csv.reader(stream, delimiter=delimiter)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path}: the file is empty; expected a header row.")
        if text_key not in header:
            raise ValueError(
                f"{path}, line 1: no column {text_key!r} in the header {header}; set text_key "
                "to the column that holds the text."
            )
        if required and label_key not in header:
            raise ValueError(
                f"{path}, line 1: no column {label_key!r} in the header {header}; set "
                "label_key to the column that holds the label (or leave it unset for texts "
                "without labels)."
            )
        text_col = header.index(text_key)
        label_col = header.index(label_key) if label_key in header else None
        chunker = _Chunker(labelled=label_col is not None)
        for row in reader:
            number = reader.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) != len(header):
                raise ValueError(
                    f"{path}, line {number}: {len(row)} fields but the header has {len(header)}."
                )
            label = None
            if label_col is not None:
                label = row[label_col].strip()
                if not label:
                    raise ValueError(f"{path}, line {number}: empty {label_key!r} label.")
            chunk = chunker.add(row[text_col], label, number)
            if chunk is not None:
                yield chunk
        if (chunk := chunker.take()) is not None:
            yield chunk
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path}, near line {number + 1}: not valid UTF-8 ({error.reason})."
        ) from None
    except csv.Error as error:
        raise ValueError(f"{path}, line {number}: {error}.") from None


def _txt(path: str, handle: Any) -> Iterator[Chunk]:
    chunker = _Chunker(labelled=False)
    for number, raw in enumerate(handle, start=1):
        try:
            line = raw.decode("utf-8-sig" if number == 1 else "utf-8").rstrip("\r\n")
        except UnicodeDecodeError as error:
            raise ValueError(f"{path}, line {number}: not valid UTF-8 ({error.reason}).") from None
        if line.strip():
            chunk = chunker.add(line, None, number)
            if chunk is not None:
                yield chunk
    if (chunk := chunker.take()) is not None:
        yield chunk


def arrow_chunk(table: Any, text_key: str, label_key: str | None, row: int, name: str) -> Chunk:
    """The documents of an Arrow table (a Parquet row group, a Dataset batch) that starts at
    row ``row + 1`` of ``name``.

    Raises:
        ValueError: A text that is not a string, naming ``name`` and its row.
    """
    texts = table.column(text_key).to_pylist()
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(
                f"{name}, row {row + i + 1}: {text_key!r} holds a {type(text).__name__} "
                f"({text!r}); expected a string."
            )
    labels = table.column(label_key).to_pylist() if label_key is not None else None
    return Chunk(texts, labels, list(range(row + 1, row + 1 + len(texts))))


def _parquet(
    path: str, text_key: str, label_key: str, required: bool, options: RemoteOptions
) -> Iterator[Chunk]:
    import pyarrow.parquet as pq

    handle = open_seekable_remote(path, options) if is_remote(path) else None
    try:
        try:
            pf = pq.ParquetFile(handle if handle is not None else local_path(path))
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: no such file.") from None
        except Exception as error:
            raise ValueError(f"{path}: not a readable Parquet file ({error}).") from None
        names = pf.schema_arrow.names
        if text_key not in names:
            raise ValueError(
                f"{path}: no column {text_key!r} (columns: {names}); set text_key to the column "
                "that holds the text."
            )
        if required and label_key not in names:
            raise ValueError(
                f"{path}: no column {label_key!r} (columns: {names}); set label_key to the "
                "column that holds the label (or leave it unset for texts without labels)."
            )
        columns = [text_key] + ([label_key] if label_key in names and label_key != text_key else [])
        row = 0
        for group in range(pf.metadata.num_row_groups):
            table = pf.read_row_group(group, columns=columns, use_threads=False)
            chunk = arrow_chunk(
                table, text_key, columns[1] if len(columns) == 2 else None, row, path
            )
            row += len(chunk.texts)
            for start in range(0, len(chunk.texts), CHUNK_TEXTS):
                stop = start + CHUNK_TEXTS
                part = None if chunk.labels is None else chunk.labels[start:stop]
                yield Chunk(chunk.texts[start:stop], part, chunk.lines[start:stop])
    finally:
        if handle is not None:
            handle.close()


def read_documents(
    path: str, text_key: str, label_key: str | None, options: RemoteOptions
) -> Iterator[Chunk]:
    """Yields the documents of one file, a :class:`Chunk` at a time (formats: module docstring).

    ``label_key=None`` reads the ``"label"`` key or column when present; a key given must be
    in every record.

    Labels of a CSV / TSV file are strings here; :func:`table_labels` makes them ints when the
    whole file's are.

    Raises:
        FileNotFoundError: A local file that does not exist.
        RemoteError: A remote file that cannot be read, naming the URL and the status.
        ValueError: A malformed record, naming the file and the line (or row).
    """
    found = file_format(path)
    if found is None:
        raise ValueError(f"{path!r} is not a file ending in " + accepted_names() + ".")
    fmt, compression = found
    required = label_key is not None
    label_key = DEFAULT_LABEL_KEY if label_key is None else label_key
    if fmt == "txt" and required:
        raise ValueError(
            f"{path}: a .txt file holds no labels, but label_key={label_key!r} was given: "
            "use .jsonl / .csv / .tsv / .parquet files for labelled texts, or leave label_key "
            "unset."
        )
    if fmt == "parquet":
        yield from _parquet(path, text_key, label_key, required, options)
        return
    handle = _open(path, compression, options)
    try:
        if fmt == "jsonl":
            yield from _jsonl(path, handle, text_key, label_key, required)
        elif fmt in ("csv", "tsv"):
            delimiter = "," if fmt == "csv" else "\t"
            yield from _table(path, handle, text_key, label_key, delimiter, required)
        else:
            yield from _txt(path, handle)
    finally:
        handle.close()


def table_labels(path: str, labels: list[Any]) -> list[Any]:
    """A CSV / TSV file's labels as ints when every one is an integer, else as they are."""
    fmt = (file_format(path) or ("", None))[0]
    if (
        fmt in ("csv", "tsv")
        and labels
        and all(isinstance(v, str) and _INT.fullmatch(v) for v in labels)
    ):
        return [int(v) for v in labels]
    return labels
