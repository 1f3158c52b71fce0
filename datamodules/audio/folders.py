"""Folders of class sub-folders, local or remote, as clip records labelled by sub-folder.

Each audio file under ``root/<class>/`` (at any depth) is a clip of the class ``<class>``, as
Hugging Face's AudioFolder labels them; classes are sorted by name, and a class's files come
in the order ``os.walk`` gives with its folders sorted (a folder's own files, by name, then its
sub-folders', by name). Sub-folders whose name starts with ``.`` are not classes; files at the
root are not clips.

A remote folder (``s3://bucket/speech/``, ``http://host/speech/``) is listed once by the
remote layer (:func:`~datamodules.remote.listing.list_folder`: an object store's listing, or
the links of an HTTP index page) and gives the same records, in the same order, as the same
tree on disk. Durations come from the headers (a range read each), cached across runs by
``files.headers``: a local file's header is read again when its size or mtime changed, an
object store's when its listing shows another size or ETag; an HTTP index page tells no
version, so a file's header is kept while its URL is listed.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator, Sequence
from typing import Any

from datamodules.audio.clips import fail
from datamodules.audio.decoding import AudioDecodeError
from datamodules.audio.files import AudioFiles
from datamodules.core.skipped import Skipped
from datamodules.remote.files import is_remote
from datamodules.remote.listing import list_folder

__all__ = ["is_remote_folder", "scan_class_folders"]


def is_remote_folder(path: str) -> bool:
    """Whether ``path`` is a URL taken for a folder: it ends with ``/``, or its last part has
    no extension (``s3://bucket/speech``)."""
    if not is_remote(path):
        return False
    if path.endswith("/"):
        return True
    return not posixpath.splitext(path.split("://", 1)[1].rsplit("/", 1)[-1])[1]


def _walk_key(relative: str) -> list[tuple[int, str]]:
    """Where a file (``class/sub/name.wav``) comes in ``os.walk``'s order with its folders
    sorted: at the first part where two paths differ, a file before a folder, else by name."""
    *folders, name = relative.split("/")
    return [(1, part) for part in folders] + [(0, name)]


def _local_files(root: str) -> Iterator[tuple[str, str, str, str | None]]:
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root!r} is not a folder of class sub-folders.")
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    for name in classes:
        for folder, dirs, names in os.walk(os.path.join(root, name)):
            dirs.sort()
            for file in sorted(names):
                yield os.path.join(folder, file), file, name, None


def _remote_files(root: str, files: AudioFiles) -> list[tuple[str, str, str, str | None]]:
    listed = [
        (url, relative, version)
        for url, relative, version in list_folder(root, files.options)
        if "/" in relative and not relative.startswith(".")
    ]
    listed.sort(key=lambda item: _walk_key(item[1]))
    return [(url, rel, rel.split("/", 1)[0], version) for url, rel, version in listed]


def scan_class_folders(
    root: str, extensions: Sequence[str], skipped: Skipped, on_error: str, files: AudioFiles
) -> list[dict[str, Any]]:
    """Records of a folder of class sub-folders, local or a URL: ``{"path", "offset",
    "duration", "where", "label", "frames", "rate"}`` (label: the sub-folder's name; where: the
    file's path or URL), durations from the headers (cached across runs by ``files.headers``).

    Raises:
        FileNotFoundError: A local ``root`` that is not a folder.
        ValueError: A URL that cannot be listed (naming it, the status and what to give
            instead), or a folder without audio files in class sub-folders.
        ManifestError: A file whose header cannot be read (with ``on_error="raise"``), naming
            it (and, for a URL, the status).
    """
    remote = is_remote(root)
    listed = _remote_files(root, files) if remote else list(_local_files(root))
    suffixes = tuple(f".{e.lower()}" for e in extensions)
    chosen = [item for item in listed if item[1].lower().endswith(suffixes)]
    stamps = {path: version for path, _, _, version in chosen} if remote else None
    records = []
    with files.headers.of(root, folder=True, stamps=stamps):
        for path, _, label, _ in chosen:
            try:
                info = files.info(path)
            except AudioDecodeError as error:
                why = f"cannot read its header: {error.reason}"
                fail(path, why, on_error, skipped, path, None)
                continue
            if info.frames == 0:
                fail(path, "an empty clip (0 frames)", on_error, skipped, path, None)
                continue
            records.append(
                {"path": path, "offset": 0.0, "duration": info.duration, "where": path,
                 "label": label, "frames": info.frames, "rate": info.sample_rate}
            )  # fmt: skip
    if not records:
        raise ValueError(
            f"{root!r} holds no audio files ({', '.join(extensions)}) in class sub-folders."
        )
    return records
