"""The image-folder index: samples as compact arrays, scanned as torchvision's ImageFolder does.

:func:`scan_image_folder` lists a class-folder tree exactly as
``torchvision.datasets.ImageFolder(root)`` does (same classes, class indices, extensions and
sample order) without hanging on symlink loops, and returns an :class:`ImageFolderIndex`: the
samples held in a few numpy arrays instead of a Python list of tuples, so DataLoader workers
forked from the main process do not slowly copy the list page by page as reference counts
are touched ("copy-on-read").
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import torch

from datamodules.imaging.decoding import IMG_EXTENSIONS  # the default extensions, re-exported

PathLike = str | os.PathLike

__all__ = ["IMG_EXTENSIONS", "ImageFolderIndex", "scan_image_folder"]


class ImageFolderIndex:
    """An ordered list of ``(path, class index)`` samples held in compact arrays.

    Paths are stored as one ``uint8`` buffer of file-system-encoded bytes plus ``int64``
    offsets, targets as one ``int64`` array: three objects however many samples there
    are, so forked DataLoader workers share them without copy-on-read growth, and the
    index pickles quickly for spawned workers.

    Build one with :func:`scan_image_folder`, or directly from explicit paths and class
    indices (e.g. in a ``find_samples()`` that reads a CSV)::

        ImageFolderIndex(["a/1.png", "b/2.png"], [0, 1], classes=["cat", "dog"])
        ImageFolderIndex.from_samples([("a/1.png", 0), ("b/2.png", 1)])

    Args:
        paths: One path per sample (str or ``os.PathLike``), in sample order.
        targets: One class index per sample, each in ``[0, len(classes))``.
        classes: Class names; index ``i`` names class ``i``. Defaults to
            ``["0", "1", ..., str(max(targets))]``.
        root: The folder the samples came from, if any (informational).
        ignored: Files of the folder left out for their extension, counted by extension
            (what :func:`scan_image_folder` found; ``summary()`` reports it).

    Raises:
        ValueError: ``paths`` and ``targets`` differ in length, a target is out of range,
            class names repeat, or ``targets`` is not one-dimensional integers.
    """

    __slots__ = ("_buffer", "_offsets", "_targets", "classes", "class_to_idx", "root", "ignored")

    def __init__(
        self,
        paths: Iterable[PathLike],
        targets: Sequence[int] | np.ndarray | torch.Tensor,
        classes: Sequence[str] | None = None,
        *,
        root: PathLike | None = None,
        ignored: Mapping[str, int] | None = None,
    ) -> None:
        encoded = [os.fsencode(p) for p in paths]
        lengths = np.fromiter((len(b) for b in encoded), dtype=np.int64, count=len(encoded))
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        buffer = np.frombuffer(b"".join(encoded), dtype=np.uint8)

        if isinstance(targets, torch.Tensor):
            targets = targets.numpy(force=True)
        target_array = np.asarray(targets)
        if target_array.size == 0:
            target_array = target_array.astype(np.int64)
        if target_array.ndim != 1 or not np.issubdtype(target_array.dtype, np.integer):
            raise ValueError(
                f"targets must be a 1-D sequence of integer class indices, got an array of "
                f"shape {target_array.shape} and dtype {target_array.dtype}"
            )
        target_array = np.ascontiguousarray(target_array, dtype=np.int64)
        if len(target_array) != len(encoded):
            raise ValueError(
                f"paths and targets must have the same length, got {len(encoded)} paths "
                f"and {len(target_array)} targets"
            )
        if classes is None:
            top = int(target_array.max()) + 1 if len(target_array) else 0
            classes = [str(i) for i in range(top)]
        classes = [str(c) for c in classes]
        if len(set(classes)) != len(classes):
            raise ValueError(f"class names must be unique, got {classes}")
        if len(target_array) and (target_array.min() < 0 or target_array.max() >= len(classes)):
            bad = int(np.flatnonzero((target_array < 0) | (target_array >= len(classes)))[0])
            raise ValueError(
                f"targets must be class indices in [0, {len(classes)}), got {target_array[bad]} "
                f"for sample {bad} ({os.fsdecode(encoded[bad])!r})"
            )
        offsets.flags.writeable = False

        self._buffer = buffer
        self._offsets = offsets
        self._targets = target_array
        self.classes: list[str] = classes
        self.class_to_idx: dict[str, int] = {name: i for i, name in enumerate(classes)}
        self.root: str | None = None if root is None else os.fspath(root)
        self.ignored: dict[str, int] = dict(ignored or {})

    @classmethod
    def from_samples(
        cls,
        samples: Iterable[tuple[PathLike, int]],
        classes: Sequence[str] | None = None,
        *,
        root: PathLike | None = None,
    ) -> ImageFolderIndex:
        """Build an index from ``(path, class index)`` pairs, as torchvision's ``samples``.

        Args:
            samples: ``(path, class index)`` pairs in sample order.
            classes: Class names (see the class docstring for the default).
            root: The folder the samples came from, if any.

        Returns:
            The index.
        """
        pairs = list(samples)
        return cls([p for p, _ in pairs], [int(t) for _, t in pairs], classes=classes, root=root)

    def __len__(self) -> int:
        return len(self._targets)

    def _check(self, i: int) -> int:
        n = len(self._targets)
        index = int(i)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"sample index {i} is out of range for {n} samples")
        return index

    def path(self, i: int) -> str:
        """The path of sample ``i`` (negative indices count from the end)."""
        i = self._check(i)
        start, stop = self._offsets[i], self._offsets[i + 1]
        return os.fsdecode(self._buffer[start:stop].tobytes())

    def target(self, i: int) -> int:
        """The class index of sample ``i`` (negative indices count from the end)."""
        return int(self._targets[self._check(i)])

    def __getitem__(self, i: int) -> tuple[str, int]:
        """The ``(path, class index)`` pair of sample ``i``."""
        i = self._check(i)
        return self.path(i), int(self._targets[i])

    @property
    def targets(self) -> np.ndarray:
        """The class index of every sample: the index's own ``int64`` numpy array.

        Not a copy: do not modify it in place. ``torch.from_numpy(index.targets)`` views it
        as a tensor without copying (it is left writable so that this does not warn).
        """
        return self._targets

    @property
    def samples(self) -> list[tuple[str, int]]:
        """All ``(path, class index)`` pairs as a new list (as torchvision's ``samples``).

        Built on demand; prefer :meth:`path` / :meth:`target` in per-sample code.
        """
        return [self[i] for i in range(len(self))]

    @property
    def paths(self) -> list[str]:
        """All paths as a new list, in sample order."""
        return [self.path(i) for i in range(len(self))]

    @property
    def nbytes(self) -> int:
        """The bytes held by the arrays (paths, offsets, targets)."""
        return self._buffer.nbytes + self._offsets.nbytes + self._targets.nbytes

    def __repr__(self) -> str:
        root = f", root={self.root!r}" if self.root is not None else ""
        return f"ImageFolderIndex({len(self)} samples, {len(self.classes)} classes{root})"

    def __getstate__(self):
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state: Mapping[str, object]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)


def _find_classes(root: str) -> list[str]:
    """Sorted names of the sub-folders of ``root`` (symlinks followed), as torchvision."""
    with os.scandir(root) as entries:
        return sorted(entry.name for entry in entries if entry.is_dir())


def _walk_files(top: str, ancestors: frozenset[tuple[int, int]]) -> list[tuple[str, list[str]]]:
    """``(dirpath, filenames)`` for every folder under ``top``, following symlinks.

    Mirrors ``os.walk(top, followlinks=True)`` (unreadable folders skipped silently, an
    entry is a folder if ``DirEntry.is_dir()`` says so), except that a folder whose real
    identity ``(st_dev, st_ino)`` is already on the path from the root down to it is not
    entered again: that is a symlink loop, which would make os.walk recurse until the OS
    refuses the path. Any tree without loops is walked exactly as os.walk walks it, even
    where two symlinks lead to the same folder (its files are then listed under both).
    """
    found: list[tuple[str, list[str]]] = []
    try:
        st = os.stat(top)
    except OSError:
        return found
    stack = [(top, ancestors | {(st.st_dev, st.st_ino)})]
    while stack:
        folder, seen = stack.pop()
        dirs: list[str] = []
        files: list[str] = []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        is_dir = entry.is_dir()
                    except OSError:
                        is_dir = False
                    (dirs if is_dir else files).append(entry.name)
        except OSError:
            continue
        found.append((folder, files))
        for name in dirs:
            child = os.path.join(folder, name)
            try:
                st = os.stat(child)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key not in seen:
                stack.append((child, seen | {key}))
    return found


def _first(item: tuple[str, list[str]]) -> str:
    return item[0]


def scan_image_folder(
    root: PathLike,
    extensions: Sequence[str] = IMG_EXTENSIONS,
    *,
    allow_empty: bool = False,
) -> ImageFolderIndex:
    """Scan a class-folder tree into an :class:`ImageFolderIndex`, as torchvision would.

    For the same folder, ``classes``, ``class_to_idx`` and ``samples`` equal those of
    ``torchvision.datasets.ImageFolder(root)``: classes are the sorted names of the
    sub-folders of ``root`` (symlinks followed, hidden folders included); each class folder
    is walked recursively following symlinks; folders are visited in sorted path order and
    files in sorted name order; a file is kept if its lower-cased name ends with one of
    ``extensions``; paths are ``os.path.join(root, class, ..., name)`` from ``root`` as
    given (``~`` expanded). Unlike torchvision, a symlink loop does not hang the scan: a
    folder already on the current path (same device and inode) is not entered again.

    Args:
        root: The folder holding one sub-folder per class.
        extensions: Accepted file extensions (matched case-insensitively).
        allow_empty: Keep classes whose folder holds no accepted file (they get an index
            but no samples), instead of raising, like torchvision's ``allow_empty``.

    Returns:
        The index of samples, with ``classes``, ``class_to_idx`` and ``root`` set.

    Raises:
        FileNotFoundError: ``root`` does not exist, has no sub-folder, holds no accepted
            file at all, or (unless ``allow_empty``) some class folder holds none. The
            message names the folder (and the classes and extensions where relevant).
        NotADirectoryError: ``root`` is not a folder.
    """
    directory = os.path.expanduser(os.fspath(root))
    suffixes = tuple(e.lower() for e in extensions)
    if not os.path.exists(directory):
        raise FileNotFoundError(f"image folder root {directory!r} does not exist")
    if not os.path.isdir(directory):
        raise NotADirectoryError(f"image folder root {directory!r} is not a directory")
    classes = _find_classes(directory)
    if not classes:
        raise FileNotFoundError(
            f"found no class folder in {directory!r}: expected one sub-folder per class, "
            f"holding that class's images"
        )
    root_stat = os.stat(directory)
    root_key = frozenset({(root_stat.st_dev, root_stat.st_ino)})

    paths: list[str] = []
    targets: list[int] = []
    empty: list[str] = []
    ignored: Counter[str] = Counter()
    for index, name in enumerate(classes):
        start = len(paths)
        class_dir = os.path.join(directory, name)
        for folder, files in sorted(_walk_files(class_dir, root_key), key=_first):
            for fname in sorted(files):
                if fname.lower().endswith(suffixes):
                    paths.append(os.path.join(folder, fname))
                else:
                    ignored[os.path.splitext(fname)[1].lower() or "(no extension)"] += 1
        targets.extend([index] * (len(paths) - start))
        if len(paths) == start:
            empty.append(name)

    accepted = ", ".join(suffixes)
    if not paths:
        raise FileNotFoundError(
            f"found no image file in the class folders of {directory!r} "
            f"(accepted extensions: {accepted})"
        )
    if empty and not allow_empty:
        raise FileNotFoundError(
            f"found no valid file for the classes {', '.join(empty)} in {directory!r} "
            f"(accepted extensions: {accepted}); remove those folders or pass "
            f"allow_empty=True"
        )
    return ImageFolderIndex(
        paths, targets, classes=classes, root=directory, ignored=dict(sorted(ignored.items()))
    )
