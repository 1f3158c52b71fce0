"""Image decoding and image-folder scanning: the low-level pieces of the image DataModule.

* :func:`decode_image` turns any image file into a ``uint8`` tensor of shape ``(3, H, W)``
  (contiguous, or channels-last on request). JPEG, PNG, WebP and GIF go through
  TorchCodec's image decoders (``torchcodec.decoders.decode_jpeg`` & co.: libjpeg-turbo,
  libpng, libwebp, giflib; no FFmpeg needed); every other format (BMP, TIFF, PPM/PGM,
  ...) goes through Pillow. The format is sniffed from the file's first bytes, not from
  its extension.
* :func:`scan_image_folder` lists a class-folder tree exactly as
  ``torchvision.datasets.ImageFolder(root)`` does (same classes, class indices, extensions
  and sample order) without hanging on symlink loops, and returns an
  :class:`ImageFolderIndex`: the samples held in a few numpy arrays instead of a Python
  list of tuples, so DataLoader workers forked from the main process do not slowly copy
  the list page by page as reference counts are touched ("copy-on-read").

Colour handling in :func:`decode_image` (the same for both decoders):

* grayscale and palette images are expanded to RGB (palette colours looked up);
* alpha is **dropped**, not composited: a transparent pixel keeps the colour stored
  under it. This is what ``PIL.Image.convert("RGB")`` (torchvision's ``pil_loader``)
  and TorchCodec's ``mode="RGB"`` both do, so pixels match torchvision ImageFolder's;
* CMYK is converted with Pillow's formula (TorchCodec uses the same one);
* 16-bit samples (16-bit PNG, TIFF/PNM mode ``"I;16"``, 16-bit PGM opened as mode
  ``"I"``) are scaled to 8 bits with rounding, ``round(v * 255 / 65535)``, not clipped.
  Pillow's 32-bit mode ``"I"`` is read as 16-bit data (clamped to 0..65535) and mode
  ``"F"`` (float) uses Pillow's own conversion (values clipped to 0..255);
* animated GIF/WebP and multi-page TIFF: the first frame;
* the EXIF orientation tag is applied (TorchCodec does it for JPEG/PNG/WebP; for the
  Pillow formats it is read from the file and applied with torch flips/transposes).
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import torch

# The value of ``torchvision.datasets.folder.IMG_EXTENSIONS`` (torchvision 0.29), copied so
# that importing this module does not import torchvision.datasets; a test checks they agree.
IMG_EXTENSIONS: tuple[str, ...] = (
    ".jpg",
    ".jpeg",
    ".png",
    ".ppm",
    ".bmp",
    ".pgm",
    ".tif",
    ".tiff",
    ".webp",
)

PathLike = str | os.PathLike

__all__ = [
    "IMG_EXTENSIONS",
    "ImageDecodeError",
    "ImageFolderIndex",
    "decode_image",
    "scan_image_folder",
]


class ImageDecodeError(OSError):
    """An image file could not be read or decoded.

    A subclass of :class:`OSError`, like Pillow's ``UnidentifiedImageError`` and its
    "image file is truncated" error, so ``except OSError`` written for a PIL loader keeps
    working. The message names the file and the cause; both are also attributes.

    The constructor takes the finished message as its only positional argument, so that
    PyTorch's DataLoader can re-raise it in the main process with the worker's traceback.

    Attributes:
        path: The file that failed (None when unknown).
        reason: What went wrong, e.g. ``"file is empty (0 bytes)"``.
    """

    def __init__(self, message: str, *, path: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.path = path
        self.reason = reason

    @classmethod
    def for_file(cls, path: str, reason: str) -> ImageDecodeError:
        """Build the error for ``path`` with a message naming the file and the cause."""
        return cls(f"cannot decode image {path!r}: {reason}", path=path, reason=reason)

    def __reduce__(self):  # keep path/reason when pickled (multiprocessing)
        return (_rebuild_decode_error, (str(self), self.path, self.reason))


def _rebuild_decode_error(message: str, path: str | None, reason: str | None) -> ImageDecodeError:
    return ImageDecodeError(message, path=path, reason=reason)


# --------------------------------------------------------------------------- decoding

_TORCHCODEC_FORMATS = ("jpeg", "png", "gif", "webp")
# TorchCodec prefixes its errors with "function, /path/to/File.cpp:123, ": drop that part.
_CPP_LOCATION = re.compile(r"^(?:\w+, )?\S+\.cpp:\d+, ")
_EXIF_ORIENTATION = 0x0112
_decoders: dict[str, Callable[..., torch.Tensor]] = {}


def _sniff_format(head: bytes) -> str | None:
    """The TorchCodec format of encoded data from its magic bytes, or None (-> Pillow)."""
    if head[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    return None


def _torchcodec_decoder(fmt: str) -> Callable[..., torch.Tensor]:
    """The TorchCodec decode function for ``fmt``, imported on first use."""
    fn = _decoders.get(fmt)
    if fn is None:
        from torchcodec import decoders

        for name in _TORCHCODEC_FORMATS:
            _decoders[name] = getattr(decoders, f"decode_{name}")
        fn = _decoders[fmt]
    return fn


def decode_image(path: PathLike, *, channels_last: bool = False) -> torch.Tensor:
    """Read and decode one image file into a ``uint8`` tensor ``(3, H, W)``.

    JPEG, PNG, WebP and GIF are decoded by TorchCodec; every other format by Pillow. The
    format is detected from the file's content, so a PNG named ``.jpg`` still decodes.
    Grayscale, palette, RGBA (alpha dropped, not composited), CMYK and 16-bit images all
    come out as 3-channel ``uint8`` (16-bit scaled with rounding); the EXIF orientation is
    applied; animated images give their first frame. See the module docstring for details.

    Truncated files raise: TorchCodec treats running out of data as an error for all four of
    its formats (a JPEG missing only its final EOI marker included), and Pillow raises
    "image file is truncated" unless ``PIL.ImageFile.LOAD_TRUNCATED_IMAGES`` was set to True
    by the caller.

    Memory layout: by default the result is contiguous (``C, H, W`` in memory). The decoders
    produce pixels interleaved (``H, W, C`` in memory), so this costs one copy (done with
    numpy, about twice as fast as ``Tensor.contiguous()`` for this permutation). With
    ``channels_last=True`` the result keeps the interleaved layout, i.e. strides
    ``(1, 3 * W, 3)``, at no cost; torchvision's uint8 ``resize`` runs about twice as fast
    on that layout, and ``stack_uint8_images(..., memory_format=torch.channels_last)``
    batches it with plain copies.

    Args:
        path: The image file.
        channels_last: Return the interleaved layout described above instead of a
            contiguous tensor.

    Returns:
        A ``torch.uint8`` tensor of shape ``(3, H, W)``: contiguous, or with channels-last
        strides ``(1, 3 * W, 3)`` if ``channels_last``.

    Raises:
        ImageDecodeError: The file cannot be read (missing, unreadable, a directory), is
            empty, is not an image, is truncated or corrupt. The message names the path
            and the cause; the original exception is chained as ``__cause__``.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb", buffering=0) as file:  # one read; np.fromfile costs 3x more
            data = bytearray(file.readall())
    except OSError as exc:
        raise ImageDecodeError.for_file(path, f"cannot read file: {exc.strerror or exc}") from exc
    if not data:
        raise ImageDecodeError.for_file(path, "file is empty (0 bytes)")

    fmt = _sniff_format(bytes(data[:12]))
    try:
        image = _decode_torchcodec(fmt, data) if fmt is not None else _decode_pillow(data)
    except ImageDecodeError:
        raise
    except Exception as exc:  # decoders raise RuntimeError, ValueError, OSError, SyntaxError...
        decoder = f"TorchCodec {fmt.upper()} decoder" if fmt else "Pillow"
        message = _CPP_LOCATION.sub("", str(exc).strip()) or type(exc).__name__
        raise ImageDecodeError.for_file(path, f"{decoder}: {message}") from exc
    return _to_layout(image, channels_last)


def _to_layout(image: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """``image`` (3, H, W) with contiguous or channels-last strides, copying only if needed."""
    if channels_last:
        if image.stride() == (1, 3 * image.shape[2], 3):  # TorchCodec's usual output
            return image
        hwc = image.permute(1, 2, 0)
        if not hwc.is_contiguous():
            hwc = torch.from_numpy(np.ascontiguousarray(hwc.numpy()))
        return hwc.permute(2, 0, 1)
    if image.is_contiguous():
        return image
    # numpy's strided copy is about 2x faster than Tensor.contiguous() for HWC -> CHW.
    return torch.from_numpy(np.ascontiguousarray(image.numpy()))


def _decode_torchcodec(fmt: str, data: bytearray) -> torch.Tensor:
    decode = _torchcodec_decoder(fmt)
    image = decode(torch.frombuffer(data, dtype=torch.uint8), mode="RGB")
    if image.ndim == 4:  # animated GIF / WebP: (N, C, H, W) -> first frame
        image = image[0]
    # A CHW view of TorchCodec's HWC buffer (transposed/flipped views for EXIF rotations).
    return image


def _decode_pillow(data: bytearray) -> torch.Tensor:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        img.load()
        # Read after load(): some plugins (Pillow >= 13's TIFF) apply the orientation while
        # loading and then drop the tag; the others leave it for us.
        orientation = _pil_orientation(img)
        mode = img.mode
        if mode.startswith("I;16") or mode == "I":
            # 16-bit (or Pillow's 32-bit "I", which holds 16-bit PGM/PNG data): scale with
            # rounding, round(v * 255 / 65535), like libpng's png_set_scale_16.
            wide = np.asarray(img).astype(np.int64)
            gray = (np.clip(wide, 0, 65535) * 255 + 32767) // 65535
            array = gray.astype(np.uint8)[:, :, None]
        else:
            array = np.array(img.convert("RGB") if mode != "RGB" else img)
    if array.shape[2] == 1:
        array = np.repeat(array, 3, axis=2)
    return _apply_orientation(torch.from_numpy(array).permute(2, 0, 1), orientation)


def _pil_orientation(img) -> int:
    """The EXIF orientation (1-8) of a Pillow image, 1 when absent or unreadable."""
    try:
        value = img.getexif().get(_EXIF_ORIENTATION, 1)
    except Exception:  # a broken EXIF block must not make a readable image fail
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _apply_orientation(image: torch.Tensor, orientation: int) -> torch.Tensor:
    """Apply an EXIF orientation to a ``(C, H, W)`` tensor, as ``PIL.ImageOps.exif_transpose``.

    1: as stored; 2: mirror left-right; 3: rotate 180; 4: mirror top-bottom; 5: transpose;
    6: rotate 90 clockwise; 7: transverse; 8: rotate 90 counter-clockwise.
    """
    if orientation == 2:
        return image.flip(2)
    if orientation == 3:
        return image.flip(1, 2)
    if orientation == 4:
        return image.flip(1)
    if orientation == 5:
        return image.transpose(1, 2)
    if orientation == 6:
        return image.transpose(1, 2).flip(2)
    if orientation == 7:
        return image.transpose(1, 2).flip(1, 2)
    if orientation == 8:
        return image.transpose(1, 2).flip(1)
    return image


# --------------------------------------------------------------------------- folder index


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

    Raises:
        ValueError: ``paths`` and ``targets`` differ in length, a target is out of range,
            class names repeat, or ``targets`` is not one-dimensional integers.
    """

    __slots__ = ("_buffer", "_offsets", "_targets", "classes", "class_to_idx", "root")

    def __init__(
        self,
        paths: Iterable[PathLike],
        targets: Sequence[int] | np.ndarray | torch.Tensor,
        classes: Sequence[str] | None = None,
        *,
        root: PathLike | None = None,
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
    for index, name in enumerate(classes):
        start = len(paths)
        class_dir = os.path.join(directory, name)
        for folder, files in sorted(_walk_files(class_dir, root_key), key=_first):
            for fname in sorted(files):
                if fname.lower().endswith(suffixes):
                    paths.append(os.path.join(folder, fname))
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
    return ImageFolderIndex(paths, targets, classes=classes, root=directory)
