"""TextDataModule's input files: finding them and reading their documents a chunk at a time.

Text reads every file through the shard layer (:mod:`datamodules.shards`), as streams do: the
formats, their extensions and compressions are the one table of
:mod:`datamodules.shards.formats`, less tar (:data:`TEXT_FORMATS`: JSONL, txt, CSV / TSV,
Parquet, Arrow IPC; a Hugging Face ``save_to_disk`` folder stands for its data files); blank
lines, byte-order marks and bad records follow the one rule of :mod:`datamodules.shards.lines`;
files may be local or remote (:mod:`datamodules.remote`: its storage options, retries, and
errors that name the URL and the status). What is text's own:

* the text of a record: the ``text_key`` key (JSONL, which must hold objects) or column (CSV /
  TSV, Parquet, Arrow), or the whole line (``.txt``); it must be a string.
* the label: ``label_key=None`` (TextDataModule's default) reads the ``"label"`` key or
  column when the records have one and leaves the texts unlabelled otherwise; a ``label_key``
  given explicitly must be in every record (a typo raises at once, naming the file, the line
  and the keys found), and a ``.txt`` file, which holds no labels, refuses one. A CSV / TSV
  file whose every label is an integer (``"3"``, ``"-1"``) gives int labels, otherwise
  strings (:func:`table_labels`).
* errors in text's words, naming the file and the line (``file, line N: ...``) or the
  Parquet or Arrow row (``file, row N: ...``).

:func:`read_documents` yields a file's documents as :class:`Chunk`\\ s of at most a few
thousand texts, so that no reader ever holds a whole corpus.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from datamodules.remote.files import is_remote, local_path
from datamodules.remote.listing import expand_files, has_magic
from datamodules.remote.retrying import RemoteError, RemoteOptions
from datamodules.shards.arrow import arrow_columns, read_arrow_batches
from datamodules.shards.dataset_index import is_index_spec
from datamodules.shards.delimited import DELIMITERS, csv_rows, header_row
from datamodules.shards.errors import RecordError
from datamodules.shards.formats import accepted_extensions, detect_format, expand_saved
from datamodules.shards.jsonl import numbered_jsonl
from datamodules.shards.lines import ShardLines
from datamodules.shards.parquet import parquet_batches, parquet_file
from datamodules.shards.shared_indexing import expand_indexes
from datamodules.shards.txt import numbered_txt

__all__ = [
    "CHUNK_CHARS",
    "CHUNK_TEXTS",
    "Chunk",
    "DEFAULT_LABEL_KEY",
    "SPLIT_FILES",
    "TEXT_FORMATS",
    "accepted_names",
    "arrow_chunk",
    "check_file_argument",
    "file_format",
    "find_files",
    "read_documents",
    "table_labels",
]

#: The file argument of each split, as errors name it.
SPLIT_FILES = {"train": "train_file", "val": "val_file", "test": "test_file"}

#: The formats of :mod:`datamodules.shards.formats` that text reads (all but tar).
TEXT_FORMATS = ("jsonl", "txt", "csv", "tsv", "parquet", "arrow")
#: Texts per chunk, and characters per chunk (whichever comes first).
CHUNK_TEXTS = 4096
CHUNK_CHARS = 8 << 20
_INT = re.compile(r"[+-]?\d+")
#: The key or column read for labels when ``label_key`` is not given (labels when present).
DEFAULT_LABEL_KEY = "label"


def file_format(path: str) -> tuple[str, str | None] | None:
    """``(format, compression)`` of a file from its name (:func:`~datamodules.shards.formats.
    detect_format`), or None when it is not one text reads."""
    try:
        fmt, compression = detect_format(path)
    except ValueError:
        return None
    return (fmt, compression) if fmt in TEXT_FORMATS else None


def accepted_names() -> str:
    """The accepted file names, for error messages."""
    return accepted_extensions(TEXT_FORMATS)


def check_file_argument(value: Any, name: str) -> list[str]:
    """Checks a ``train_file`` / ``val_file`` / ``test_file`` argument in ``__init__``.

    Accepts a path or URL, a glob, a directory, a dataset index (``*.index.json``), or a list of
    them. Globs, directories and indexes are expanded in ``setup`` (:func:`find_files`); a plain
    file name must have an accepted suffix.

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
        if not (has_magic(text) or directory or file_format(text) or is_index_spec(text)):
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
    items = expand_indexes(items, options)  # a dataset index (*.json): the files it lists
    try:
        items = expand_saved(items)  # a save_to_disk folder: its data files
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None
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
        lines: Per text, its line (line formats) or row (Parquet, Arrow) in the file, from 1.
    """

    texts: list[str]
    labels: list[Any] | None
    lines: list[int]


def read_documents(
    path: str, text_key: str, label_key: str | None, options: RemoteOptions
) -> Iterator[Chunk]:
    """Yields the documents of one file, a :class:`Chunk` at a time (what is read: the module
    docstring).

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
            "use .jsonl / .csv / .tsv / .parquet / .arrow files for labelled texts, or leave "
            "label_key unset."
        )
    try:
        if fmt == "parquet":
            with parquet_file(path, options) as pf:
                batches = lambda columns: parquet_batches(pf, path, columns=columns)  # noqa: E731
                yield from _columns(path, pf.schema_arrow.names, batches, text_key, label_key,
                                    required)  # fmt: skip
            return
        if fmt == "arrow":
            batches = lambda columns: read_arrow_batches(path, columns=columns, options=options)  # noqa: E731
            names = arrow_columns(path, options)
            yield from _columns(path, names, batches, text_key, label_key, required)
            return
        lines = ShardLines(path, compression, options=options)
        try:
            if fmt == "jsonl":
                yield from _chunks(_jsonl(path, lines, text_key, label_key, required), True)
            elif fmt in DELIMITERS:
                labelled, rows = _table(path, lines, text_key, label_key, fmt, required)
                yield from _chunks(rows, labelled)
            else:
                yield from _chunks(((text, None, n) for n, text in numbered_txt(lines)), False)
        finally:
            lines.close()
    except RecordError as error:
        raise _in_text_words(error, path) from None


def _chunks(documents: Iterator[tuple[str, Any, int]], labelled: bool) -> Iterator[Chunk]:
    """``(text, label, line)`` triples as chunks of at most CHUNK_TEXTS texts or CHUNK_CHARS
    characters."""
    texts: list[str] = []
    labels: list[Any] = []
    lines: list[int] = []
    chars = 0
    for text, label, line in documents:
        texts.append(text)
        labels.append(label)
        lines.append(line)
        chars += len(text)
        if len(texts) >= CHUNK_TEXTS or chars >= CHUNK_CHARS:
            yield Chunk(texts, labels if labelled else None, lines)
            texts, labels, lines, chars = [], [], [], 0
    if texts:
        yield Chunk(texts, labels if labelled else None, lines)


def _jsonl(
    path: str, lines: ShardLines, text_key: str, label_key: str, required: bool
) -> Iterator[tuple[str, Any, int]]:
    for number, record in numbered_jsonl(lines):
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
        yield text, record.get(label_key), number


def _table(
    path: str, lines: ShardLines, text_key: str, label_key: str, fmt: str, required: bool
) -> tuple[bool, Iterator[tuple[str, Any, int]]]:
    """Whether a CSV / TSV file has labels, and its documents; the header is read and
    checked at once."""
    found = header_row(lines, DELIMITERS[fmt])
    if found is None:
        raise ValueError(f"{path}: the file is empty; expected a header row.")
    number, header = found
    if text_key not in header:
        raise ValueError(
            f"{path}, line {number}: no column {text_key!r} in the header {header}; set "
            "text_key to the column that holds the text."
        )
    if required and label_key not in header:
        raise ValueError(
            f"{path}, line {number}: no column {label_key!r} in the header {header}; set "
            "label_key to the column that holds the label (or leave it unset for texts "
            "without labels)."
        )
    labelled = label_key in header

    def documents() -> Iterator[tuple[str, Any, int]]:
        for line, _, row in csv_rows(lines, "raise", None, 0, header, DELIMITERS[fmt]):
            label = None
            if labelled:
                label = row[label_key].strip()
                if not label:
                    raise ValueError(f"{path}, line {line}: empty {label_key!r} label.")
            yield row[text_key], label, line

    return labelled, documents()


def arrow_chunk(table: Any, text_key: str, label_key: str | None, row: int, name: str) -> Chunk:
    """The documents of an Arrow table or record batch (a piece of a Parquet file, a Dataset
    batch) that starts at row ``row + 1`` of ``name``.

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


def _columns(
    path: str,
    names: list[str],
    batches: Any,
    text_key: str,
    label_key: str,
    required: bool,
) -> Iterator[Chunk]:
    """The documents of a Parquet or Arrow file of columns ``names``; ``batches(columns)``
    yields its record batches."""
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
    labels = label_key if label_key in names and label_key != text_key else None
    row = 0
    for batch in batches([text_key] if labels is None else [text_key, labels]):
        for start in range(0, batch.num_rows, CHUNK_TEXTS):
            chunk = arrow_chunk(batch.slice(start, CHUNK_TEXTS), text_key, labels, row, path)
            row += len(chunk.texts)
            yield chunk


#: The shard layer's reasons for a bad record, in the words text's errors have always used.
_TEXT_WORDS = (
    (re.compile(r"(header: )?invalid UTF-8: (.*)", re.DOTALL), r"\1not valid UTF-8 (\2)"),
    (re.compile(r"invalid JSON: ('utf-8' codec .*)", re.DOTALL), r"not valid UTF-8 (\1)"),
    (
        re.compile(r"expected (\d+) fields \(as in the header\), found (\d+)"),
        r"\2 fields but the header has \1",
    ),
)


def _in_text_words(error: RecordError, path: str) -> Exception:
    """The shard layer's error for ``path`` in text's form, ``path, line N: why.``: a file
    that is missing or a remote file that failed raises as it always has (FileNotFoundError,
    :class:`~datamodules.remote.retrying.RemoteError`)."""
    cause = error.__cause__
    if isinstance(cause, (RemoteError, ImportError)):
        return cause
    if isinstance(cause, FileNotFoundError):
        return FileNotFoundError(f"{path}: no such file.")
    if error.reason is None:  # a ready message
        return ValueError(str(error))
    reason = error.reason
    for pattern, words in _TEXT_WORDS:
        if (match := pattern.fullmatch(reason)) is not None:
            reason = match.expand(words)
            break
    where = path if error.line is None else f"{path}, line {error.line}"
    return ValueError(f"{where}: {reason}.")


def table_labels(path: str, labels: list[Any]) -> list[Any]:
    """A CSV / TSV file's labels as ints when every one is an integer, else as they are."""
    fmt = (file_format(path) or ("", None))[0]
    if (
        fmt in DELIMITERS
        and labels
        and all(isinstance(v, str) and _INT.fullmatch(v) for v in labels)
    ):
        return [int(v) for v in labels]
    return labels
