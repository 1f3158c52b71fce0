"""Shard formats: the one extension table, format and compression detection, finding shards.

A *shard* is one file of records. Formats, by extension, for every reader of this library
(streams, text, the index); the line formats may be compressed (``.gz`` / ``.gzip``, ``.zst`` /
``.zstd``):

* ``.jsonl`` / ``.ndjson``: one JSON value per line (:mod:`~datamodules.shards.jsonl`).
* ``.txt``: one record per line, the line without its line break (:mod:`~datamodules.shards.txt`).
* ``.csv`` / ``.tsv``: one dict per row, keyed by the header row, every value a string
  (:mod:`~datamodules.shards.delimited`).
* ``.parquet`` / ``.pq``: one dict per row, read a row group at a time, never the whole file
  (:mod:`~datamodules.shards.parquet`).
* ``.arrow``: Arrow IPC, the stream format (what Hugging Face ``save_to_disk`` writes) or the
  file format; one dict per row (:mod:`~datamodules.shards.arrow`). A ``save_to_disk`` folder
  stands for its data files, in the order of its ``state.json``.
* ``.tar`` (``.tar.gz`` / ``.tgz`` / ``.tar.zst``, read from the beginning): WebDataset's
  records, members grouped by key (:mod:`~datamodules.shards.tar`).

The line formats share one rule for blank lines, byte-order marks and bad records, stated in
:mod:`~datamodules.shards.lines`. Remote shards go through fsspec (``http(s)://``, ``s3://``
with s3fs installed, ...), opened by :mod:`datamodules.remote.files`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from datamodules.core.checks import check_choice
from datamodules.remote.files import is_remote
from datamodules.remote.listing import expand_files as list_files
from datamodules.remote.retrying import RemoteOptions
from datamodules.shards.arrow import saved_dataset_files

__all__ = [
    "COMPRESSIONS",
    "EXTENSIONS",
    "FORMATS",
    "LINE_FORMATS",
    "TABLE_FORMATS",
    "accepted_extensions",
    "detect_format",
    "expand_files",
    "expand_saved",
]

FORMATS = ("jsonl", "txt", "csv", "tsv", "parquet", "arrow", "tar")
#: The formats whose records are lines of text (read through :mod:`~datamodules.shards.lines`).
LINE_FORMATS = ("jsonl", "txt", "csv", "tsv")
#: The formats read as Arrow tables: counted from their metadata, never compressed outside,
#: with no bad records to skip (so indexed the same under either ``on_error``).
TABLE_FORMATS = ("parquet", "arrow")
#: The one extension table: every reader of files (streams, text, the index) tells formats by it.
EXTENSIONS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".txt": "txt",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".arrow": "arrow",
    ".tar": "tar",
}
#: Compression suffixes of the line formats and tar (Parquet and Arrow compress internally).
COMPRESSIONS = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd"}


def detect_format(path: str, fmt: str | None = None) -> tuple[str, str | None]:
    """Returns ``(format, compression)`` of a shard from its extension.

    Args:
        path: Path or URL; a query string (``?...``) is ignored.
        fmt: Force the format (one of :data:`FORMATS`); compression is still inferred.

    Raises:
        ValueError: The extension (or ``fmt``) is not one of the supported formats.
    """
    name = str(path).split("?", 1)[0].lower()
    compression = None
    if name.endswith(".tgz"):
        name = name[:-4] + ".tar.gz"
    for ext, comp in COMPRESSIONS.items():
        if name.endswith(ext):
            compression, name = comp, name[: -len(ext)]
            break
    if fmt is None:
        fmt = next((f for ext, f in EXTENSIONS.items() if name.endswith(ext)), None)
        if fmt is None:
            raise ValueError(
                f"cannot tell the format of shard {path!r} from its extension: use one of "
                f"{accepted_extensions()}, or pass fmt=."
            )
    else:
        check_choice(fmt, "fmt", FORMATS)
    if fmt in TABLE_FORMATS and compression is not None:
        kind = "Parquet" if fmt == "parquet" else "Arrow"
        raise ValueError(f"shard {path!r}: {kind} compresses internally; drop the {compression}.")
    return fmt, compression


def expand_files(
    spec: str | os.PathLike | Iterable[str | os.PathLike], options: RemoteOptions | None = None
) -> list[str]:
    """Turns a shard specification into a list of shards (see
    :func:`datamodules.remote.listing.expand_files`); a directory gives its files with a
    supported extension, a ``save_to_disk`` folder its data files (:func:`expand_saved`)."""
    given = [spec] if isinstance(spec, (str, os.PathLike)) else list(spec)
    return list_files(expand_saved(given), options, known=_known)


def expand_saved(items: Iterable[str | os.PathLike]) -> list[str]:
    """``items`` with every Hugging Face ``save_to_disk`` folder among them replaced by its
    data files in order (:func:`~datamodules.shards.arrow.saved_dataset_files`); other items
    unchanged.

    Raises:
        ValueError: A saved ``DatasetDict`` folder (name one split's folder), or a
            ``state.json`` that does not name its data files.
    """
    out: list[str] = []
    for item in items:  # local folders only: a URL here is a file's (no extra requests)
        files = None if is_remote(os.fspath(item)) else saved_dataset_files(os.fspath(item))
        out.extend([os.fspath(item)] if files is None else files)
    return out


def _known(path: str) -> bool:
    try:
        detect_format(path)
    except ValueError:
        return False
    return True


def accepted_extensions(formats: Iterable[str] = FORMATS) -> str:
    """The extensions of ``formats``, for error messages: ``".jsonl, .ndjson, ..., .tar (each
    optionally + .gz or .zst), or .parquet, .pq"``."""
    formats = tuple(formats)
    compressible = LINE_FORMATS + ("tar",)
    packed = ", ".join(e for e, f in EXTENSIONS.items() if f in formats and f in compressible)
    plain = ", ".join(e for e, f in EXTENSIONS.items() if f in formats and f not in compressible)
    packed += " (each optionally + .gz or .zst)" if packed else ""
    return f"{packed}, or {plain}" if packed and plain else packed or plain
