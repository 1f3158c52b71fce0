"""Text records for TextDataModule: in-memory lists or ``.jsonl`` / ``.csv`` / ``.tsv`` / ``.txt``.

Formats (UTF-8; blank lines are not records; every error names the file and line):

* ``.jsonl``: one JSON object per line; the text under ``text_key``, the label (an int or a
  string), if any, under ``label_key``. Either every record has a label or none does.
* ``.csv`` / ``.tsv``: a header row naming the columns; the text in column ``text_key``, the
  label, if any, in column ``label_key``. A label column whose every value is an integer
  (``"3"``, ``"-1"``) gives int labels; otherwise labels are strings.
* ``.txt``: one text per non-blank line, no labels.

``label_key=None`` (the default) reads labels from the ``"label"`` key or column when the
records have one, and leaves the texts unlabelled otherwise; a ``label_key`` given explicitly
must be in every record (a typo raises at once, naming the file, the line and the keys found).
"""

from __future__ import annotations

import csv
import json
import numbers
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

SUFFIXES: tuple[str, ...] = (".jsonl", ".csv", ".tsv", ".txt")
#: The key or column read for labels when ``label_key`` is not given (labels when present).
DEFAULT_LABEL_KEY = "label"
Label = int | str
PathLike = str | os.PathLike
_INT = re.compile(r"[+-]?\d+")


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


def check_path(path: Any, name: str) -> list[Path]:
    """Validates a path or list of paths argument; returns it as a list of Paths.

    Raises:
        TypeError: If it is neither a path nor a list of paths.
        ValueError: If a suffix is not one of ``.jsonl``, ``.csv``, ``.tsv``, ``.txt``.
    """
    items = list(path) if isinstance(path, (list, tuple)) else [path]
    if not items:
        raise ValueError(f"{name}=[] is not accepted: give a file path or a non-empty list.")
    paths = []
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(
                f"{name}={path!r} is not accepted: use a file path or a list of file paths."
            )
        file = Path(item)
        if file.suffix.lower() not in SUFFIXES:
            raise ValueError(
                f"{name}={str(item)!r} is not accepted: use a file ending in {', '.join(SUFFIXES)}."
            )
        paths.append(file)
    return paths


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


def _read_jsonl(
    path: Path, text_key: str, label_key: str, required: bool
) -> tuple[list, list, list]:
    texts, labels, lines = [], [], []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"{path}, line {number}: not valid UTF-8 ({error.reason})."
                ) from None
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
            texts.append(text)
            labels.append(record.get(label_key))
            lines.append(number)
    return texts, labels, lines


def _read_table(
    path: Path, text_key: str, label_key: str, delimiter: str, required: bool
) -> tuple[list, list, list]:
    texts, labels, lines = [], [], []
    number = 1
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle, delimiter=delimiter)
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
            for row in reader:
                number = reader.line_num
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                if len(row) != len(header):
                    raise ValueError(
                        f"{path}, line {number}: {len(row)} fields but the header has "
                        f"{len(header)}."
                    )
                texts.append(row[text_col])
                lines.append(number)
                if label_col is None:
                    labels.append(None)
                    continue
                label = row[label_col].strip()
                if not label:
                    raise ValueError(f"{path}, line {number}: empty {label_key!r} label.")
                labels.append(label)
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path}, near line {number + 1}: not valid UTF-8 ({error.reason})."
        ) from None
    except csv.Error as error:
        raise ValueError(f"{path}, line {number}: {error}.") from None
    if labels and all(isinstance(v, str) and _INT.fullmatch(v) for v in labels):
        labels = [int(v) for v in labels]
    return texts, labels, lines


def _read_txt(path: Path) -> tuple[list, list, list]:
    texts, lines = [], []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8").rstrip("\r\n")
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"{path}, line {number}: not valid UTF-8 ({error.reason})."
                ) from None
            if line.strip():
                texts.append(line)
                lines.append(number)
    return texts, [None] * len(texts), lines


def read_text_files(
    paths: Sequence[PathLike], text_key: str, label_key: str | None = None
) -> TextRecords:
    """Reads and concatenates text files (see the module docstring for the formats).

    Args:
        paths: The files.
        text_key: The key or column of the text.
        label_key: The key or column of the label; None: ``"label"`` when present.

    Raises:
        FileNotFoundError: If a file does not exist.
        ValueError: For a malformed record (naming the file and line), a file without
            records, or labels on some records but not others.
        TypeError: For labels that are neither ints nor strings, or a mix of both.
    """
    texts: list[str] = []
    labels: list[Any] = []
    files: list[str] = []
    file_index: list[np.ndarray] = []
    lines: list[np.ndarray] = []
    required = label_key is not None
    label_key = DEFAULT_LABEL_KEY if label_key is None else label_key
    for path in map(Path, paths):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file.")
        suffix = path.suffix.lower()
        if suffix == ".jsonl":
            t, lab, num = _read_jsonl(path, text_key, label_key, required)
        elif suffix in (".csv", ".tsv"):
            delimiter = "," if suffix == ".csv" else "\t"
            t, lab, num = _read_table(path, text_key, label_key, delimiter, required)
        elif required:
            raise ValueError(
                f"{path}: a .txt file holds no labels, but label_key={label_key!r} was given: "
                "use .jsonl / .csv / .tsv files for labelled texts, or leave label_key unset."
            )
        else:
            t, lab, num = _read_txt(path)
        if not t:
            raise ValueError(f"{path}: no records (the file is empty or blank).")
        texts.extend(t)
        labels.extend(lab)
        file_index.append(np.full(len(t), len(files), dtype=np.int32))
        lines.append(np.asarray(num, dtype=np.int64))
        files.append(str(path))
    origins = (files, np.concatenate(file_index), np.concatenate(lines))
    records = TextRecords(texts, None, origins)
    has = [label is not None for label in labels]
    if any(has):
        if not all(has):
            first, missing = has.index(True), has.index(False)
            raise ValueError(
                f"{records.where(missing)}: no {label_key!r} label, but {records.where(first)} "
                "has one: label every record or none."
            )
        records.labels = check_labels(labels, records.where)
    return records
