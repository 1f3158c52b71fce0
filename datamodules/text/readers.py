"""Text records in memory for TextDataModule: from lists, or read whole from files.

:class:`TextRecords` holds texts, labels and where each came from; :func:`records_from_memory`
checks in-memory ``texts`` / ``labels``; :func:`read_text_files` reads files into memory (the
formats are :mod:`datamodules.tokens.inputs`'). Either every record has a label or none does.
Corpora bigger than memory go through the token store instead (:mod:`datamodules.tokens.store`).
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from datamodules.remote.files import is_remote, local_path
from datamodules.remote.retrying import RemoteOptions
from datamodules.tokens.inputs import DEFAULT_LABEL_KEY, read_documents, table_labels

__all__ = [
    "Label",
    "PathLike",
    "TextRecords",
    "check_labels",
    "labels_of",
    "read_text_files",
    "records_from_memory",
]

Label = int | str
PathLike = str | os.PathLike


class TextRecords:
    """Texts with optional labels, and where each came from (for error messages).

    Args:
        texts: One string per sample.
        labels: One int or string per sample, or None.
        origins: Per sample, ``(file, line)``; None for in-memory texts (named ``texts[i]``).
    """

    def __init__(
        self,
        texts: list[str],
        labels: list[Label] | None = None,
        origins: tuple[list[str], np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.texts = texts
        self.labels = labels
        self._origins = origins
        self.encoded: Any = None  # set by TextDataModule.setup (an EncodedTexts)

    def __len__(self) -> int:
        return len(self.texts)

    def where(self, index: int) -> str:
        """Names a sample: ``"file, line N"`` or ``"texts[i]"``."""
        if self._origins is None:
            return f"texts[{index}]"
        files, file_index, lines = self._origins
        return f"{files[int(file_index[index])]}, line {int(lines[index])}"

    def __getitem__(self, index: int) -> dict[str, Any]:
        """One tokenized sample ``{"input_ids": LongTensor, "labels": int}`` (after setup)."""
        if self.encoded is None:
            raise RuntimeError("texts are not tokenized yet: call setup() first.")
        return self.encoded.sample(index)


def check_labels(values: Sequence[Any], where: Any) -> list[Label]:
    """Returns labels as Python ints or strings (all of one kind).

    Raises:
        TypeError: For a label that is neither an int nor a string, or a mix of both; the
            message names the record (``where(i)``).
    """
    out: list[Label] = []
    for i, value in enumerate(values):
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
            out.append(int(value))
        else:
            raise TypeError(
                f"{where(i)}: label {value!r} ({type(value).__name__}) is not accepted: use an "
                "int or a string."
            )
        if type(out[-1]) is not type(out[0]):
            raise TypeError(
                f"{where(i)}: label {value!r} is a {type(out[-1]).__name__} but {where(0)} has "
                f"the {type(out[0]).__name__} label {out[0]!r}: use ints or strings, not both."
            )
    return out


def records_from_memory(texts: Any, labels: Any = None) -> TextRecords:
    """Validates in-memory ``texts`` (and ``labels``) and wraps them.

    Raises:
        TypeError: If texts is not a list of strings or labels are not ints/strings.
        ValueError: If texts is empty or labels has another length.
    """
    if isinstance(texts, (str, bytes)) or not (
        hasattr(texts, "__len__") and hasattr(texts, "__iter__")
    ):
        raise TypeError(
            f"texts is a {type(texts).__name__}: use a list of strings (one per sample)."
        )
    texts = list(texts)  # also a numpy array or pandas Series of strings
    if len(texts) == 0:
        raise ValueError("texts is empty: give at least one text.")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is a {type(text).__name__} ({text!r}): use strings.")
    if labels is None:
        return TextRecords(texts)
    if isinstance(labels, (torch.Tensor, np.ndarray)):
        labels = labels.tolist()
    if isinstance(labels, (str, bytes)) or not (
        hasattr(labels, "__len__") and hasattr(labels, "__iter__")
    ):
        raise TypeError(f"labels is a {type(labels).__name__}: use a list with one per text.")
    labels = list(labels)
    if len(labels) != len(texts):
        raise ValueError(
            f"labels has {len(labels)} items but texts has {len(texts)}: give one label per text."
        )
    return TextRecords(texts, check_labels(labels, lambda i: f"labels[{i}]"))


def read_text_files(
    paths: Sequence[PathLike],
    text_key: str,
    label_key: str | None,
    options: RemoteOptions | None = None,
) -> TextRecords:
    """Reads and concatenates text files into memory (formats: :mod:`datamodules.tokens.inputs`).

    Raises:
        FileNotFoundError: If a file does not exist.
        ValueError: For a malformed record (naming the file and line), a file without
            records, or labels on some records but not others.
        TypeError: For labels that are neither ints nor strings, or a mix of both.
    """
    options = options or RemoteOptions()
    texts: list[str] = []
    labels: list[Any] = []
    files: list[str] = []
    file_index: list[np.ndarray] = []
    lines: list[np.ndarray] = []
    for path in map(os.fspath, paths):
        if not is_remote(path) and not os.path.isfile(local_path(path)):
            raise FileNotFoundError(f"{path}: no such file.")
        count, file_labels = 0, []
        for chunk in read_documents(path, text_key, label_key, options):
            texts.extend(chunk.texts)
            file_labels.extend(chunk.labels or [None] * len(chunk.texts))
            lines.append(np.asarray(chunk.lines, dtype=np.int64))
            count += len(chunk.texts)
        if not count:
            raise ValueError(f"{path}: no records (the file is empty or blank).")
        labels.extend(table_labels(path, file_labels))
        file_index.append(np.full(count, len(files), dtype=np.int32))
        files.append(path)
    origins = (files, np.concatenate(file_index), np.concatenate(lines))
    records = TextRecords(texts, None, origins)
    records.labels = labels_of(labels, records.where, label_key or DEFAULT_LABEL_KEY)
    return records


def labels_of(labels: list[Any], where: Any, label_key: str) -> list[Label] | None:
    """The records' labels (None when no record has one), checked.

    Raises:
        ValueError: Some records have a label and others do not.
        TypeError: A label that is neither an int nor a string, or a mix of both.
    """
    has = [label is not None for label in labels]
    if not any(has):
        return None
    if not all(has):
        first, missing = has.index(True), has.index(False)
        raise ValueError(
            f"{where(missing)}: no {label_key!r} label, but {where(first)} has one: label every "
            "record or none."
        )
    return check_labels(labels, where)
