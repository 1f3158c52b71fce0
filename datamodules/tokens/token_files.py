"""Pre-tokenized corpora read directly: Megatron-LM indexed datasets and flat token files.

``TextDataModule(token_files=...)`` maps one of these, copy-on-write, as a
:class:`~datamodules.tokens.store.StoredDocuments`-like corpus (nothing is tokenized or copied):

* **A Megatron-LM indexed dataset**: a path prefix with ``PREFIX.bin`` and ``PREFIX.idx``
  (``PREFIX.bin`` or ``PREFIX.idx`` name it too, when the other is beside it). The ``.idx``
  is "MMIDIDX" version 1: the magic ``MMIDIDX\\x00\\x00``, ``<Q`` version, ``<B`` dtype code
  (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16), ``<Q``
  sequence count, ``<Q`` document count, then the sequences' int32 lengths, their int64
  byte pointers into ``.bin`` and the int64 document indices (sequence numbers, from 0,
  documents + 1 of them). Each Megatron document, however many sequences it has, is one of
  ours.
* **A flat token file** (nanoGPT's ``train.bin``, or a ``.npy``): every token of the corpus
  one after another, of ``dtype`` (a ``.npy`` says its own), split into documents after each
  ``eos_id`` (the end-of-text token stays the last token of its document; tokens after the
  last one are a document too).

A file whose size or header does not match what it should be raises a ``ValueError`` naming
the file and what was expected. So do ids that do not fit: a sample of every file is checked
against the dtype's usual range and ``vocab_size`` (and a flat file for wider ids read as
narrow ones), see :mod:`datamodules.tokens.token_checks`; a flat file's largest id is checked
exactly, in the pass that looks for ``eos_id``. An ``eos_id`` that never occurs warns (the
file is then one document).
"""

from __future__ import annotations

import os
import struct
import warnings
from typing import Any

import numpy as np

from datamodules.tokens.encoding import EncodedTexts
from datamodules.tokens.store import map_tokens
from datamodules.tokens.token_checks import check_ids, check_vocab

__all__ = [
    "FLAT_DTYPES",
    "MEGATRON_DTYPES",
    "MEGATRON_MAGIC",
    "SCAN",
    "TokenFile",
    "megatron_paths",
    "read_flat",
    "read_megatron",
    "read_token_files",
]

MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
MEGATRON_DTYPES = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float64,
    7: np.float32,
    8: np.uint16,
}
FLAT_DTYPES = ("uint8", "uint16", "int16", "uint32", "int32", "int64")
_HEADER = struct.Struct("<9sQBQQ")
#: Tokens scanned at a time when looking for ``eos_id`` and the largest id: small enough for
#: both to find the slice in the CPU's cache (a 1 GB uint16 file: 0.66 s for both, 0.59 s for
#: ``eos_id`` alone, where 1 << 24 took 1.1 s).
SCAN = 1 << 18


class TokenFile:
    """A pre-tokenized corpus, mapped: ``encoded``, ``len``, ``where`` (no labels).

    Args:
        name: The file (or prefix) as given, for messages.
        tokens: The mapped token ids.
        offsets: Per document its first token, and the total at the end (documents + 1).
        kind: ``"megatron"`` or ``"flat"``.
        max_id: The largest id, when a pass over the tokens found it (None: not known).
    """

    labels = None

    def __init__(
        self,
        name: str,
        tokens: np.ndarray,
        offsets: np.ndarray,
        kind: str,
        max_id: int | None = None,
    ) -> None:
        self.name, self.kind, self.max_id = name, kind, max_id
        lengths = np.diff(offsets)
        self.encoded = EncodedTexts(tokens, lengths, None, offsets=offsets)

    def __len__(self) -> int:
        return len(self.encoded)

    @property
    def num_tokens(self) -> int:
        """Tokens in the corpus."""
        return len(self.encoded.tokens_np)

    def where(self, index: int) -> str:
        """Names a document: ``"file, document N"`` (from 0)."""
        return f"{self.name}, document {index}"

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.encoded.sample(index)


def megatron_paths(path: str) -> tuple[str, str] | None:
    """``(bin, idx)`` when ``path`` names a Megatron dataset (prefix, .bin or .idx), else None."""
    prefix = path[:-4] if path.endswith((".bin", ".idx")) else path
    bin_path, idx_path = prefix + ".bin", prefix + ".idx"
    if os.path.isfile(idx_path) and os.path.isfile(bin_path):
        return bin_path, idx_path
    return None


def read_megatron(path: str, vocab_size: int | None = None) -> TokenFile:
    """Maps a Megatron-LM indexed dataset (see the module docstring).

    Raises:
        ValueError: A header or size that does not match, naming the file and what was
            expected, or sampled ids outside the usual range or ``vocab_size``.
    """
    found = megatron_paths(path)
    if found is None:
        raise FileNotFoundError(_missing(path))
    bin_path, idx_path = found
    with open(idx_path, "rb") as f:
        header = f.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise ValueError(
            f"{idx_path}: {len(header)} bytes, shorter than a Megatron .idx header "
            f"({_HEADER.size} bytes)."
        )
    magic, version, code, sequences, documents = _HEADER.unpack(header)
    if magic != MEGATRON_MAGIC:
        raise ValueError(
            f"{idx_path}: starts with {magic!r}, expected the magic {MEGATRON_MAGIC!r}."
        )
    if version != 1:
        raise ValueError(f"{idx_path}: version {version}, expected 1 (MMIDIDX version 1).")
    if code not in MEGATRON_DTYPES:
        raise ValueError(
            f"{idx_path}: dtype code {code}, expected one of {sorted(MEGATRON_DTYPES)}."
        )
    dtype = np.dtype(MEGATRON_DTYPES[code])
    if dtype.kind not in "iu":
        raise ValueError(f"{idx_path}: dtype {dtype.name}, expected an integer dtype of token ids.")
    expected = _HEADER.size + sequences * (4 + 8) + documents * 8
    actual = os.path.getsize(idx_path)
    if actual != expected:
        raise ValueError(
            f"{idx_path}: {actual} bytes, expected {expected} for {sequences} sequences and "
            f"{documents} document indices."
        )
    start = _HEADER.size
    lengths = (
        np.memmap(idx_path, np.int32, "c", start, (sequences,))
        if sequences
        else np.zeros(0, np.int32)
    )
    start += sequences * 4
    pointers = (
        np.memmap(idx_path, np.int64, "c", start, (sequences,))
        if sequences
        else np.zeros(0, np.int64)
    )
    start += sequences * 8
    if not documents:
        raise ValueError(f"{idx_path}: no document indices, expected at least one (a 0).")
    doc_index = np.memmap(idx_path, np.int64, "c", start, (documents,))
    total = int(lengths.sum(dtype=np.int64))
    bin_size = os.path.getsize(bin_path)
    if bin_size != total * dtype.itemsize:
        raise ValueError(
            f"{bin_path}: {bin_size} bytes, expected {total * dtype.itemsize} ({total} tokens of "
            f"{dtype.name}, the lengths in {idx_path})."
        )
    if sequences and (
        int(pointers[0]) != 0
        or not np.array_equal(np.diff(pointers), lengths[:-1].astype(np.int64) * dtype.itemsize)
    ):
        raise ValueError(
            f"{idx_path}: the sequence pointers are not the running sum of the lengths."
        )
    if int(doc_index[0]) != 0 or int(doc_index[-1]) != sequences:
        raise ValueError(
            f"{idx_path}: document indices should run from 0 to the sequence count {sequences}."
        )
    seq_offsets = np.zeros(sequences + 1, dtype=np.int64)
    np.cumsum(lengths, out=seq_offsets[1:])
    offsets = seq_offsets[np.asarray(doc_index)]
    tokens = map_tokens(bin_path, dtype, total)
    check_ids(bin_path, tokens, vocab_size, given=False, exact_later=False)
    return TokenFile(path, tokens, offsets, "megatron")


def _missing(path: str) -> str:
    prefix = path[:-4] if path.endswith((".bin", ".idx")) else path
    return (
        f"token_files={path!r}: no such file, and no Megatron dataset of that prefix "
        f"(neither {prefix}.bin nor {prefix}.idx exists)."
    )


def read_flat(
    path: str, dtype: str | None, eos_id: int, vocab_size: int | None = None
) -> TokenFile:
    """Maps a flat token file (``.bin`` of ``dtype``, or ``.npy``), split after each ``eos_id``.

    Raises:
        ValueError: A size that is not a whole number of tokens, a ``.npy`` that is not 1-D or
            whose dtype disagrees with ``dtype``, ids that do not fit the dtype or
            ``vocab_size``, naming the file.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(_missing(path))
    if path.lower().endswith(".npy"):
        try:
            array = np.load(path, mmap_mode="c")
        except ValueError as error:
            raise ValueError(f"{path}: not a readable .npy file ({error}).") from None
        if array.ndim != 1 or array.dtype.kind not in "iu":
            raise ValueError(
                f"{path}: a {array.ndim}-D {array.dtype.name} array, expected a 1-D array of "
                "integer token ids."
            )
        if dtype is not None and np.dtype(dtype) != array.dtype:
            raise ValueError(f"{path}: holds {array.dtype.name}, but dtype={dtype!r} was given.")
        tokens = array if len(array) else np.zeros(0, array.dtype)
    else:
        width = np.dtype(dtype or "uint16")
        size = os.path.getsize(path)
        if size % width.itemsize:
            raise ValueError(
                f"{path}: {size} bytes, not a whole number of {width.name} tokens "
                f"({width.itemsize} bytes each): is dtype={width.name!r} right?"
            )
        tokens = map_tokens(path, width, size // width.itemsize)
    check_ids(path, tokens, vocab_size, given=not path.lower().endswith(".npy"), exact_later=True)
    ends, largest = [], -1
    for i in range(0, len(tokens), SCAN):  # one pass: the documents and the largest id
        chunk = tokens[i : i + SCAN]
        ends.append(np.flatnonzero(chunk == eos_id) + (i + 1))
        largest = max(largest, int(chunk.max()))
    check_vocab(path, largest, vocab_size)
    cuts = np.concatenate(ends) if ends else np.zeros(0, dtype=np.int64)
    offsets = np.concatenate([[0], cuts.astype(np.int64)])
    if offsets[-1] != len(tokens):
        offsets = np.append(offsets, len(tokens))
    if len(tokens) and not len(cuts):
        warnings.warn(
            f"{path}: eos_id={eos_id} never occurs in its {len(tokens)} tokens, so the file is "
            "read as 1 document; give the end-of-text id that ends each document.",
            UserWarning,
            stacklevel=2,
        )
    return TokenFile(path, tokens, offsets, "flat", max_id=largest)


def read_token_files(
    path: str, dtype: str | None, eos_id: int | None, vocab_size: int | None = None
) -> TokenFile:
    """A Megatron dataset when ``path`` names one, else a flat token file.

    Raises:
        FileNotFoundError: Neither a Megatron dataset nor a file of that name.
        ValueError: A flat file without ``eos_id``, or a file that does not match (above).
    """
    if megatron_paths(path) is not None:
        corpus = read_megatron(path, vocab_size)
        if dtype is not None and np.dtype(dtype) != corpus.encoded.tokens_np.dtype:
            raise ValueError(
                f"{path}: its .idx says {corpus.encoded.tokens_np.dtype.name}, but dtype={dtype!r} "
                "was given."
            )
        return corpus
    if not os.path.isfile(path):
        raise FileNotFoundError(_missing(path))
    if eos_id is None:
        raise ValueError(
            f"token_files={path!r} is a flat token file: give eos_id= (the end-of-text id that "
            "ends each document), or a Megatron prefix with .bin and .idx."
        )
    return read_flat(path, dtype, eos_id, vocab_size)
