"""The token store: a corpus tokenized once, on disk, memory-mapped by every later run and rank.

A store is one folder under ``token_cache``, named by a hash of what decides its contents
(:func:`store_key`: the inputs and their versions, the tokenizer's fingerprint, ``text_key``,
``label_key``, ``max_length``, ``truncation_side`` and ``lowercase``), so a different input or
tokenizer gives a different store. It holds:

* ``tokens.bin``: every document's token ids, one after another, ``uint16`` when the
  vocabulary fits and ``uint32`` otherwise;
* ``offsets.npy`` (int64, documents + 1) and ``lengths.npy`` (int64): where each document
  starts, and its length;
* ``files.npy`` (int32) and ``lines.npy`` (int64): per document, its input file (an index into
  the metadata's ``files``) and line or row, for error messages;
* ``labels.npy`` (int64, when labelled): per document its int label, or for string labels
  an index into the metadata's ``label_names``;
* ``trained.bin`` (uint8, chat data): per token, 1 where the loss is computed (the loss
  mask), aligned with ``tokens.bin``;
* ``meta.json``: the format version, the inputs (path, size, mtime or ETag), the tokenizer's
  class and fingerprint, the options above, the counts and the size of every file.

A store is written in a temporary folder and renamed into place when complete
(:class:`StoreWriter`), so a crash never leaves a store that looks whole. :func:`open_store`
checks every file's size against the metadata and maps the arrays copy-on-write: their pages
are the files' own (``RssFile``), never anonymous memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
from typing import Any

import numpy as np

from datamodules.tokens.encoding import EncodedTexts

__all__ = [
    "ARRAYS",
    "FORMAT",
    "StoreWriter",
    "StoredDocuments",
    "VERSION",
    "check_store",
    "map_tokens",
    "store_key",
    "token_dtype",
]

FORMAT = "datamodules-token-store"
VERSION = 1
ARRAYS = ("offsets", "lengths", "files", "lines")


def store_key(material: dict[str, Any]) -> str:
    """The folder name of a store: a hash of what decides its contents."""
    text = json.dumps({"format": FORMAT, "version": VERSION, **material}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def token_dtype(vocab_size: int | None) -> np.dtype:
    """``uint16`` when every id is below 65,536, else ``uint32``."""
    return np.dtype(np.uint16 if vocab_size is not None and vocab_size <= 1 << 16 else np.uint32)


class StoreWriter:
    """Writes a store into a temporary folder beside ``path``; :meth:`finish` renames it there.

    Args:
        path: The store's folder (it must not exist yet).
        dtype: The token dtype (``uint16`` or ``uint32``); ids that do not fit raise.
    """

    def __init__(self, path: str, dtype: np.dtype) -> None:
        self.path = path
        self.tmp = f"{path}.tmp-{socket.gethostname()}-{os.getpid()}"
        shutil.rmtree(self.tmp, ignore_errors=True)
        os.makedirs(self.tmp)
        self.dtype = np.dtype(dtype)
        self._tokens = open(os.path.join(self.tmp, "tokens.bin"), "wb")  # noqa: SIM115
        self._parts: dict[str, list[np.ndarray]] = {"lengths": [], "files": [], "lines": []}
        self._labels: list[Any] = []
        self._trained: Any = None
        self.documents = self.tokens = 0
        self.max_id = -1
        #: The input names (set by the builder), for :meth:`where`.
        self.names: list[str] = []

    def add(
        self,
        flat: np.ndarray,
        lengths: np.ndarray,
        file: int,
        lines: list[int],
        trained: np.ndarray | None = None,
    ) -> None:
        """Appends the documents of one chunk: their ids (flat), lengths, file and lines, and
        (chat data) their per-token loss mask ``trained``: given for every chunk or none."""
        if trained is not None:
            if self._trained is None:
                self._trained = open(os.path.join(self.tmp, "trained.bin"), "wb")  # noqa: SIM115
            self._trained.write(np.ascontiguousarray(trained, dtype=np.uint8).tobytes())
        if len(flat):
            top = int(flat.max())
            if top >= np.iinfo(self.dtype).max + 1:
                raise ValueError(
                    f"token id {top} does not fit the store's {self.dtype.name}: the tokenizer "
                    "declares a smaller vocabulary than it uses."
                )
            self.max_id = max(self.max_id, top)
        self._tokens.write(np.ascontiguousarray(flat, dtype=self.dtype).tobytes())
        self._parts["lengths"].append(np.asarray(lengths, dtype=np.int64))
        self._parts["files"].append(np.full(len(lengths), file, dtype=np.int32))
        self._parts["lines"].append(np.asarray(lines, dtype=np.int64))
        self.documents += len(lengths)
        self.tokens += int(np.sum(lengths))

    def where(self, index: int) -> str:
        """Names document ``index`` of what was added so far (for label errors)."""
        files = np.concatenate(self._parts["files"]) if self._parts["files"] else []
        lines = np.concatenate(self._parts["lines"]) if self._parts["lines"] else []
        name = self.names[int(files[index])] if self.names else "?"
        return f"{name}, line {int(lines[index])}"

    def add_labels(self, labels: np.ndarray) -> None:
        """Sets every document's label id (int labels, or indices into ``label_names``)."""
        self._labels = [np.asarray(labels, dtype=np.int64)]

    def finish(self, meta: dict[str, Any]) -> None:
        """Writes the arrays and the metadata, then renames the folder into place."""
        self._tokens.close()
        if self._trained is not None:
            self._trained.close()
        if self.dtype == np.uint32 and self.max_id < 1 << 16:
            self._narrow()
        arrays = {
            k: _joined(v, np.int64 if k != "files" else np.int32) for k, v in self._parts.items()
        }
        offsets = np.zeros(self.documents + 1, dtype=np.int64)
        np.cumsum(arrays["lengths"], out=offsets[1:])
        arrays["offsets"] = offsets
        if self._labels:
            arrays["labels"] = self._labels[0]
        for name, array in arrays.items():
            np.save(os.path.join(self.tmp, f"{name}.npy"), array)
        sizes = {
            name: os.path.getsize(os.path.join(self.tmp, name)) for name in os.listdir(self.tmp)
        }
        meta = {
            **meta,
            "format": FORMAT,
            "version": VERSION,
            "dtype": self.dtype.name,
            "documents": self.documents,
            "tokens": self.tokens,
            "max_id": self.max_id,
            "trained": self._trained is not None,
            "sizes": sizes,
            "built_by": {"host": socket.gethostname(), "pid": os.getpid()},
        }
        with open(os.path.join(self.tmp, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1)
        if os.path.exists(self.path):  # another builder renamed a complete store first
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            os.rename(self.tmp, self.path)

    def _narrow(self) -> None:
        """Rewrites uint32 tokens as uint16 (a tokenizer that declared no vocabulary size)."""
        wide = os.path.join(self.tmp, "tokens.bin")
        narrow = wide + ".u16"
        source = map_tokens(wide, np.uint32, self.tokens)
        with open(narrow, "wb") as f:
            for i in range(0, self.tokens, 1 << 24):
                f.write(np.asarray(source[i : i + (1 << 24)], dtype=np.uint16).tobytes())
        del source
        os.replace(narrow, wide)
        self.dtype = np.dtype(np.uint16)

    def abort(self) -> None:
        """Removes the temporary folder (after a failure)."""
        self._tokens.close()
        if self._trained is not None:
            self._trained.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _joined(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def check_store(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """``(metadata, None)`` for a complete store, ``(None, reason)`` for a broken one, and
    ``(None, None)`` when there is none."""
    meta_path = os.path.join(path, "meta.json")
    if not os.path.isdir(path):
        return None, None
    try:
        with open(meta_path) as f:
            meta = json.load(f)
    except (OSError, ValueError) as error:
        return None, f"its meta.json cannot be read ({type(error).__name__}: {error})"
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        return None, f"it has format version {meta.get('version')!r}, this library writes {VERSION}"
    expected = meta.get("sizes", {})
    itemsize = np.dtype(meta.get("dtype", "uint32")).itemsize
    if expected.get("tokens.bin") != meta.get("tokens", -1) * itemsize:
        return None, "its metadata disagrees with itself (tokens x dtype != tokens.bin)"
    for name, size in sorted(expected.items()):
        file = os.path.join(path, name)
        actual = os.path.getsize(file) if os.path.exists(file) else None
        if actual != size:
            state = "is missing" if actual is None else f"holds {actual} bytes"
            return None, f"{name} {state}, its metadata says {size} bytes (truncated or unfinished)"
    return meta, None


class StoredDocuments:
    """A token store mapped into memory: what ``setup`` uses in place of texts.

    ``encoded`` is an :class:`~datamodules.tokens.encoding.EncodedTexts` over the mapped
    arrays; nothing per document or per token is copied into anonymous memory.

    Args:
        path: The store's folder.
        meta: Its metadata (from :func:`check_store`).
    """

    def __init__(self, path: str, meta: dict[str, Any]) -> None:
        self.path = path
        self.meta = meta
        #: Whether this process built the store (in this setup), rather than mapped it.
        self.built = False
        tokens = map_tokens(os.path.join(path, "tokens.bin"), meta["dtype"], meta["tokens"])
        arrays = {n: np.load(os.path.join(path, f"{n}.npy"), mmap_mode="c") for n in ARRAYS}
        self._files, self._lines = arrays["files"], arrays["lines"]
        self.names: list[str] = meta.get("files", [])
        self.encoded = EncodedTexts(tokens, arrays["lengths"], None, offsets=arrays["offsets"])
        #: Chat data: the per-token loss mask (uint8, aligned with the tokens), else None.
        self.trained: np.ndarray | None = None
        if meta.get("trained"):
            trained = os.path.join(path, "trained.bin")
            self.trained = map_tokens(trained, np.uint8, meta["tokens"])
        self.labels: list[Any] | None = None
        labels_file = os.path.join(path, "labels.npy")
        if os.path.exists(labels_file):
            ids = np.load(labels_file, mmap_mode="c")
            names = meta.get("label_names")
            self.labels = [names[i] for i in ids.tolist()] if names else ids.tolist()

    def __len__(self) -> int:
        return int(self.meta["documents"])

    @property
    def num_tokens(self) -> int:
        """Tokens in the store."""
        return int(self.meta["tokens"])

    @property
    def max_id(self) -> int:
        """The largest token id in the store (-1 when empty)."""
        return int(self.meta["max_id"])

    def where(self, index: int) -> str:
        """Names a document: ``"file, line N"`` (``row N`` for Parquet, Arrow and Datasets,
        ``record N`` for tar shards)."""
        name = self.names[int(self._files[index])]
        tables, tars = (".parquet", ".arrow"), (".tar", ".tar.gz", ".tgz", ".tar.zst")
        unit = "row" if name.lower().endswith(tables) or name.startswith("<") else "line"
        unit = "record" if name.lower().endswith(tars) else unit
        return f"{name}, {unit} {int(self._lines[index])}"

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.encoded.sample(index)


def map_tokens(file: str, dtype: str | np.dtype, count: int, offset: int = 0) -> np.ndarray:
    """A flat token file mapped copy-on-write (an empty array for an empty file)."""
    if not count:
        return np.zeros(0, dtype=dtype)
    return np.memmap(file, dtype=dtype, mode="c", offset=offset, shape=(count,))
