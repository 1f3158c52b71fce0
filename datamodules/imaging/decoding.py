"""Image decoding: any image file or encoded bytes to a ``uint8`` RGB tensor, or an error naming it.

* :func:`decode_image` turns any image file into a ``uint8`` tensor of shape ``(3, H, W)``
  (contiguous, or channels-last on request); :func:`decode_image_bytes` does the same for
  encoded bytes already in memory (a member of a tar shard, a Parquet cell). JPEG, PNG, WebP
  and GIF go through
  TorchCodec's image decoders (``torchcodec.decoders.decode_jpeg`` & co.: libjpeg-turbo,
  libpng, libwebp, giflib; no FFmpeg needed); every other format (BMP, TIFF, PPM/PGM,
  ...) goes through Pillow. The format is sniffed from the file's first bytes, not from
  its extension.
* A baseline or progressive JPEG in YCbCr or grayscale that decodes without a warning goes
  through simplejpeg instead (libjpeg-turbo's TurboJPEG API, the same integer IDCT and
  upsampling as TorchCodec's libjpeg-turbo: the same pixels, tested), with its EXIF
  orientation read from its header (:func:`~datamodules.imaging.jpeg_header.jpeg_header`)
  and applied as below. It decodes the detection benchmark's 640x480-800x600 photos in 2.24
  against 2.30-2.38 ms an image alone, and about 9% faster inside a 0-worker detection epoch
  (medians of four alternated pairs). Anything
  else (CMYK, YCCK, 12-bit, a header this module's parser cannot read, a warning such as a
  missing end marker) is left to TorchCodec, which decides and names the error; without
  simplejpeg installed, TorchCodec decodes every JPEG.

Image folders (:class:`~datamodules.ImageFolderDataModule`) and image records of streams
(:class:`~datamodules.StreamingDataModule` with ``image_key=``) both decode here, so their
pixels are the same for the same bytes.

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

import contextlib
import io
import os
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from datamodules.imaging.jpeg_header import jpeg_header

PathLike = str | os.PathLike

#: The image extensions an image folder reads by default: the value of
#: ``torchvision.datasets.folder.IMG_EXTENSIONS`` (torchvision 0.29), copied so that importing
#: this module does not import torchvision.datasets; a test checks they agree.
IMG_EXTENSIONS: tuple[str, ...] = (
    ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp",
)  # fmt: skip

#: Extensions the decoder reads: :data:`IMG_EXTENSIONS` and GIF, which torchvision's
#: ``ImageFolder`` leaves out by default, as ``extensions`` does here.
DECODABLE: tuple[str, ...] = (*IMG_EXTENSIONS, ".gif")

__all__ = [
    "DECODABLE",
    "IMG_EXTENSIONS",
    "ImageDecodeError",
    "decode_image",
    "decode_image_bytes",
    "is_image_bytes",
    "preload",
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


_OTHER_SIGNATURES = (b"BM", b"II*\x00", b"MM\x00*", b"P5", b"P6")


def is_image_bytes(data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` starts like an encoded image (JPEG, PNG, GIF, WebP, BMP, TIFF, PPM/PGM)."""
    head = bytes(data[:12])
    return _sniff_format(head) is not None or head.startswith(_OTHER_SIGNATURES)


def _torchcodec_decoder(fmt: str) -> Callable[..., torch.Tensor]:
    """The TorchCodec decode function for ``fmt``, imported on first use."""
    fn = _decoders.get(fmt)
    if fn is None:
        from torchcodec import decoders

        for name in _TORCHCODEC_FORMATS:
            _decoders[name] = getattr(decoders, f"decode_{name}")
        fn = _decoders[fmt]
    return fn


def preload() -> None:
    """Imports the TorchCodec decoders (about 40 ms of a process's first decode)."""
    _torchcodec_decoder("jpeg")


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
    return _decode(read_image_scratch(path), path, channels_last)


#: ``os.readv`` (POSIX), which reads into a buffer in place; None where there is none.
_readv = getattr(os, "readv", None)


def read_image_file(path: str) -> bytearray:
    """The bytes of an image file, read straight into a buffer of the size ``fstat`` gives,
    for a caller that keeps them (the shard writers); a decoder that decodes them at once
    reads through :func:`read_image_scratch` instead.

    ``bytearray(file.readall())`` took 3.6 ms for a 1 MB photo here (a growing buffer, then a
    copy) against 0.7 ms for a read into a buffer of the right size, 12% of decoding it at a
    reduced scale; 73 against 61 us for a 20 KB one. ``np.fromfile`` costs 3x more. The read
    goes through ``os.open`` and ``os.readv`` where the platform has it (elsewhere
    ``os.read``): 19 us for a 70 KB JPEG here, against 31 us through a file object's
    ``readinto``.

    Raises:
        ImageDecodeError: The file cannot be read, naming it and the cause.
    """
    with _open_image_file(path) as fd:
        data = bytearray(os.fstat(fd).st_size)
        with memoryview(data) as view:
            filled = 0
            while filled < len(data):
                count = _read_into(fd, view[filled:])
                if not count:
                    break
                filled += count
        del data[filled:]
        while chunk := os.read(fd, 1 << 16):  # what the size did not count: a growing file
            data += chunk
        return data


@contextlib.contextmanager
def _open_image_file(path: str) -> Iterator[int]:
    """An image file's descriptor, open for reading and closed after; an ``OSError`` on the
    way (opening or reading) becomes an :class:`ImageDecodeError` that names the file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise ImageDecodeError.for_file(path, f"cannot read file: {exc.strerror or exc}") from exc
    try:
        yield fd
    except ImageDecodeError:
        raise
    except OSError as exc:
        raise ImageDecodeError.for_file(path, f"cannot read file: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


#: Each thread's buffer for :func:`read_image_scratch` (a memoryview of a bytearray).
_scratch = threading.local()
#: Files larger than this are read into a buffer of their own: a thread keeps its scratch
#: buffer for its life, and one large TIFF should not hold its size there.
SCRATCH_LIMIT = 16 << 20


def read_image_scratch(path: str) -> memoryview:
    """The bytes of an image file, read into this thread's reused buffer: a view that stays
    valid until the same thread's next call. For a caller that decodes the bytes at once and
    keeps nothing that points into them (the decoders copy what they return).

    In a detection epoch at 0 workers here, reading each file into a new ``bytearray`` (as
    :func:`read_image_file` does) took 0.09-0.14 ms a 75 KB JPEG between two decodes, against
    0.06 ms into a buffer that stays the same: a new one is fresh memory each time, while the
    decoder's output has just pushed the last one out of the CPU's caches. Files over
    :data:`SCRATCH_LIMIT` get a buffer of their own.

    Raises:
        ImageDecodeError: The file cannot be read, naming it and the cause.
    """
    with _open_image_file(path) as fd:
        size = os.fstat(fd).st_size
        if size >= SCRATCH_LIMIT:
            return memoryview(read_image_file(path))
        buffer = getattr(_scratch, "buffer", None)
        if buffer is None or len(buffer) <= size:
            # A new buffer, never a resized one: a view of the old one may still be alive (in
            # an error's traceback), and a bytearray with views cannot be resized.
            buffer = _scratch.buffer = memoryview(bytearray(max(1 << 20, 2 * (size + 1))))
        # One byte more than the size, to see a file that grew since fstat.
        wanted, filled = size + 1, 0
        while filled < wanted:
            count = _read_into(fd, buffer[filled:wanted])
            if not count:
                break
            filled += count
        if filled == wanted:  # it grew: read it whole, into a buffer of its own
            return memoryview(read_image_file(path))
        return buffer[:filled]


def _read_into(fd: int, buffer: memoryview) -> int:
    """Reads from ``fd`` into ``buffer``; the count read (0 at the end of the file)."""
    if _readv is not None:
        return _readv(fd, [buffer])
    chunk = os.read(fd, len(buffer))
    buffer[: len(chunk)] = chunk
    return len(chunk)


def decode_image_bytes(
    data: bytes | bytearray | memoryview, *, name: str = "<bytes>", channels_last: bool = False
) -> torch.Tensor:
    """Decode one encoded image held in memory into a ``uint8`` tensor ``(3, H, W)``.

    The same decoders, colour handling and layouts as :func:`decode_image` (which reads a
    file and calls this): the same bytes give the same pixels.

    Args:
        data: The encoded image (JPEG, PNG, WebP, GIF, BMP, TIFF, ...). A ``bytearray`` or
            a writable, contiguous ``memoryview`` of bytes is decoded in place (and left as it
            was); other buffers are copied once (the decoders need a writable one).
        name: What to call the image in an error message (a path, a shard and key).
        channels_last: Return the interleaved layout (see :func:`decode_image`).

    Returns:
        A ``torch.uint8`` tensor of shape ``(3, H, W)``.

    Raises:
        ImageDecodeError: The bytes are empty, not an image, truncated or corrupt; the
            message names ``name`` and the cause.
    """
    if not isinstance(data, bytearray) and not _writable_bytes(data):
        data = bytearray(data)
    return _decode(data, name, channels_last)


def _writable_bytes(data: object) -> bool:
    """Whether ``data`` is a writable, contiguous memoryview of bytes (decoded in place)."""
    return (
        isinstance(data, memoryview)
        and not data.readonly
        and data.contiguous
        and data.format in ("B", "b", "c")
        and data.ndim == 1
    )


def _decode(data: bytearray | memoryview, name: str, channels_last: bool) -> torch.Tensor:
    if not data:
        raise ImageDecodeError.for_file(name, "file is empty (0 bytes)")
    fmt = _sniff_format(bytes(data[:12]))
    try:
        image = _decode_simplejpeg(data) if fmt == "jpeg" else None
        if image is None:
            image = _decode_torchcodec(fmt, data) if fmt is not None else _decode_pillow(data)
    except ImageDecodeError:
        raise
    except Exception as exc:  # decoders raise RuntimeError, ValueError, OSError, SyntaxError...
        decoder = f"TorchCodec {fmt.upper()} decoder" if fmt else "Pillow"
        message = _CPP_LOCATION.sub("", str(exc).strip()) or type(exc).__name__
        raise ImageDecodeError.for_file(name, f"{decoder}: {message}") from exc
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


#: simplejpeg, once imported (False: not installed).
_simplejpeg: Any = None


def _decode_simplejpeg(data: bytearray | memoryview) -> torch.Tensor | None:
    """A JPEG decoded by simplejpeg with its EXIF orientation applied, as a ``(3, H, W)`` view
    of the interleaved pixels; None where TorchCodec should decode it (see the module
    docstring)."""
    global _simplejpeg
    if _simplejpeg is None:
        try:
            import simplejpeg
        except ImportError:
            simplejpeg = False
        _simplejpeg = simplejpeg
    if _simplejpeg is False:
        return None
    header = jpeg_header(data)
    if header is None:
        return None
    try:
        if _simplejpeg.decode_jpeg_header(data)[2] not in ("YCbCr", "Gray"):
            return None
        # strict: a recoverable error (a truncated file...) raises, and TorchCodec decides.
        pixels = _simplejpeg.decode_jpeg(data, colorspace="RGB", strict=True)
    except ValueError:
        return None
    return _apply_orientation(torch.from_numpy(pixels).permute(2, 0, 1), header[2])


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
