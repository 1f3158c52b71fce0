"""Hugging Face ``Dataset.save_to_disk`` folders as audio inputs.

Such a folder holds ``state.json`` (its Arrow files, in order, under ``_data_files``),
``dataset_info.json`` and the ``data-*.arrow`` files, each an Arrow IPC stream whose ``audio``
column is the ``Audio`` feature's ``{"bytes", "path"}`` struct: the same as a Parquet or Arrow
table of audio, so the files are read as tables. A ``DatasetDict``'s folder
(``dataset_dict.json`` and one folder per split) is refused with the splits named: each split
of a DataModule is one of those folders.
"""

from __future__ import annotations

import json
import os
import posixpath
from typing import Any

from datamodules.remote.files import is_remote

__all__ = ["saved_dataset_files"]


def _join(folder: str, name: str) -> str:
    return (
        posixpath.join(folder.rstrip("/"), name)
        if is_remote(folder)
        else os.path.join(folder, name)
    )


def _read_json(path: str, files: Any) -> Any | None:
    """The parsed JSON file at ``path``, or None where there is none (local or remote)."""
    if not is_remote(path):
        if not os.path.isfile(path):
            return None
        with open(path, "rb") as file:
            return json.loads(file.read())
    try:
        with files.open(path) as opened:
            return json.loads(opened.read())
    except files.errors:
        return None


def saved_dataset_files(path: str, files: Any) -> list[str] | None:
    """The Arrow files of a ``save_to_disk`` folder, in the dataset's order; None when
    ``path`` is not one (a local folder without ``state.json``, or a file).

    Raises:
        ValueError: ``path`` is a ``DatasetDict``'s folder (its splits named), or its
            ``state.json`` lists no Arrow files.
    """
    if not is_remote(path) and not os.path.isdir(path):
        return None
    if is_remote(path) and posixpath.splitext(path.rstrip("/"))[1]:
        return None  # a file's URL
    state = _read_json(_join(path, "state.json"), files)
    if state is None:
        splits = _read_json(_join(path, "dataset_dict.json"), files)
        if isinstance(splits, dict) and splits.get("splits"):
            names = ", ".join(repr(_join(path, s)) for s in splits["splits"])
            raise ValueError(
                f"{path!r} is a DatasetDict saved with save_to_disk: give one split's folder "
                f"per DataModule split ({names})."
            )
        return None
    data_files = state.get("_data_files") if isinstance(state, dict) else None
    names = [f.get("filename") for f in data_files or [] if isinstance(f, dict)]
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(
            f"{_join(path, 'state.json')!r} lists no Arrow files under '_data_files': not a "
            "folder that datasets' save_to_disk wrote."
        )
    return [_join(path, name) for name in names]
