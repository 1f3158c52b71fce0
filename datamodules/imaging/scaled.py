"""Scaled JPEG decoding: a JPEG the transform shrinks 2x or more is decoded at 1/2, 1/4 or 1/8.

libjpeg(-turbo) can decode a JPEG at a reduced scale inside its inverse DCT, for a fraction of
the cost of decoding every pixel (Pillow exposes it as ``Image.draft``; TorchCodec and
torchvision do not). ``decode="scaled"`` (the default of
:class:`~datamodules.ImageFolderDataModule` and of image streams) uses it wherever the result
cannot be told apart from decoding in full and then resizing: :class:`ImageDecoder` reads the
JPEG's header (size and EXIF orientation), asks the split's transform what it will do with an
image of that size, and decodes at the largest DCT scale (1/2, 1/4 or 1/8) that keeps the
region the transform uses at or above the transform's output size. ``decode="full"`` decodes
every image in full, as :func:`~datamodules.imaging.decoding.decode_image` does.

Which transforms allow it:

* the default train transform (:class:`~datamodules.imaging.transforms.RandomResizedCropFlip`)
  draws its crop box and flip from the header's size before decoding (the same random draws,
  in the same order, as on a decoded image), so the scale follows that crop;
* the default eval transform (:class:`~datamodules.imaging.transforms.ResizeCenterCrop`)
  picks its scale from its resize target;
* any other transform gets the full image, unless it declares the size it needs with a
  ``decode_size`` attribute (the protocol, :data:`DECODE_SIZE`): an int or ``(height, width)``.
  The JPEG is then decoded at the largest scale whose image is still at least that tall and
  that wide, and the transform gets that whole (smaller) image. Declare it only for a transform
  whose result does not depend on the pixel count of its input, e.g. one that resizes the whole
  image first: ``Compose([Resize(256), CenterCrop(224)])`` may declare ``decode_size = 256``.

Everything else takes the full-decode path unchanged: PNG, WebP, GIF, BMP, TIFF, JPEGs that the
transform shrinks less than 2x (the 320x240 photos of a 224 pipeline), and every image under
``decode="full"``. A scaled JPEG is decoded by Pillow (libjpeg-turbo) at the chosen scale, its
EXIF orientation applied as for full decoding; its pixels differ from full decoding + the same
resize by what the two resampling filters differ by (the DCT scaling averages blocks of 2, 4 or
8 pixels, then the antialiased resize finishes), not by any shift or loss of sharpness at the
output size.

A train crop is decoded down to its last row only: libjpeg decodes from the top and cannot
skip what lies above the crop, but the rows below it are left undecoded (about 15% of the
work). So a JPEG damaged below a crop yet complete (ending with its EOI marker) decodes for
that crop and raises for a crop that reaches the damage; a truncated JPEG (no EOI marker) is
always decoded to its end, and always raises.
"""

from __future__ import annotations

import io
import os
import random
from collections.abc import Callable
from typing import Any

import torch

from datamodules.core.checks import check_choice
from datamodules.imaging.decoding import (
    ImageDecodeError,
    _apply_orientation,
    _writable_bytes,
    decode_image_bytes,
    read_image_scratch,
)
from datamodules.imaging.jpeg_header import jpeg_header
from datamodules.imaging.transforms import (
    RandomResizedCropFlip,
    ResizeCenterCrop,
    as_height_width,
)

__all__ = [
    "DECODE",
    "DECODE_SIZE",
    "ImageDecoder",
    "check_decode",
    "decode_jpeg_scaled",
    "decoding_summary",
    "jpeg_header",
    "largest_scale",
]

#: The values of ``decode=``.
DECODE = ("scaled", "full")
#: The attribute by which a custom transform declares the smallest (height, width) it needs.
DECODE_SIZE = "decode_size"
#: The DCT scales (denominators) Pillow decodes at, largest first.
SCALES = (8, 4, 2)


def check_decode(decode: Any) -> None:
    """Raises unless ``decode`` is ``"scaled"`` or ``"full"``, naming the value."""
    check_choice(decode, "decode", DECODE)


def largest_scale(shrink_h: float, shrink_w: float) -> int:
    """The largest DCT scale denominator (8, 4, 2, else 1) at most both shrink factors: the
    region of the image the transform uses, divided by it, stays at or above the output."""
    shrink = min(shrink_h, shrink_w)
    return next((s for s in SCALES if shrink >= s), 1)


# --------------------------------------------------------------------------- scaled decoding
def _stored_box(
    box: tuple[int, int, int, int], orientation: int, height: int, width: int
) -> tuple[int, int, int, int]:
    """The box ``(top, left, h, w)`` of a displayed image as ``(left, upper, right, lower)`` of
    the image as stored (``height`` x ``width``), for EXIF ``orientation``."""
    top, left, h, w = box
    if orientation >= 5:  # transposed: displayed rows are stored columns
        rows = (height - left - w, height - left) if orientation in (6, 7) else (left, left + w)
        cols = (width - top - h, width - top) if orientation in (7, 8) else (top, top + h)
    else:
        rows = (height - top - h, height - top) if orientation in (3, 4) else (top, top + h)
        cols = (width - left - w, width - left) if orientation in (2, 3) else (left, left + w)
    return cols[0], rows[0], cols[1], rows[1]


def decode_jpeg_scaled(
    data: bytearray,
    scale: int,
    orientation: int = 1,
    box: tuple[int, int, int, int] | None = None,
) -> torch.Tensor:
    """Decodes a JPEG at ``1 / scale`` of its size (libjpeg-turbo's scaled IDCT, via Pillow).

    Args:
        data: The encoded JPEG.
        scale: 1, 2, 4 or 8.
        orientation: The EXIF orientation to apply (see :func:`jpeg_header`).
        box: Only this ``(top, left, h, w)`` of the scaled, oriented image (default: all).

    Returns:
        ``uint8`` ``(3, h, w)``: ``h = ceil(height / scale)`` (or the box's), interleaved in
        memory (possibly a transposed view, for orientations 5-8).

    Raises:
        Exception: Whatever Pillow raises for a bad file (:class:`ImageDecoder` names the file).
    """
    from PIL import Image

    with Image.open(io.BytesIO(data), formats=("JPEG",)) as img:
        width, height = img.size
        wanted = (-(-width // scale), -(-height // scale))
        if scale > 1 and (img.draft(img.mode, (width // scale, height // scale)) is None
                          or img.size != wanted):  # fmt: skip
            raise ValueError(f"Pillow cannot decode this JPEG at 1/{scale} scale")
        stored = None if box is None else _stored_box(box, orientation, wanted[1], wanted[0])
        top = None if stored is None or stored[3] >= wanted[1] else _top_rows(img, stored[3], data)
        if top is not None:
            img = top.crop(stored)
        else:
            img.decodermaxblock = len(data)  # one decoder call, not one per 64 KiB: 5% less
            img.load()
            if stored is not None:
                img = img.crop(stored)
        if img.mode != "RGB":
            img = img.convert("RGB")
        columns, rows = img.size
        raw = bytearray(img.tobytes())
    hwc = torch.frombuffer(raw, dtype=torch.uint8).view(rows, columns, 3)
    return _apply_orientation(hwc.permute(2, 0, 1), orientation)


_SENTINELS = ((1, 254, 3, 252), (254, 1, 252, 3))


def _top_rows(img: Any, rows: int, data: bytearray) -> Any:
    """The first ``rows`` rows of a JPEG opened (and drafted) by Pillow, without decoding the
    rows below them, as a Pillow image; None where that cannot be done (then load it all).

    libjpeg decodes from the top down and has no way to skip entropy-coded data, so the rows
    below the crop are the only ones left undecoded: about 15% of a random crop's decode. The
    decoder is driven as ``ImageFile.load`` drives it, with an image of ``rows`` rows: it stops
    there (libjpeg then reports the unread rows as an error, which says nothing about the rows
    read). Two pixels of the last row are set before decoding and must have changed after it,
    so success means every row was written; else (or if Pillow's internals differ) None.

    Only for data that ends with the EOI marker: a truncated file must fail every time, as it
    does when decoded in full, not only when the crop reaches past its end.
    """
    from PIL import Image

    if bytes(data[-2:]) != b"\xff\xd9" or len(img.tile) != 1:
        return None
    try:
        codec, _, offset, args = img.tile[0]
        width = img.size[0]
        decoder = Image._getdecoder(img.mode, codec, args, img.decoderconfig)
        core = Image.core.new(img.mode, (width, rows))
        pixels = len(img.mode)
        marks = [(0, rows - 1), (width - 1, rows - 1)]
        for xy, sentinel in zip(marks, _SENTINELS, strict=True):
            core.putpixel(xy, sentinel[:pixels] if pixels > 1 else sentinel[0])
        before = [core.getpixel(xy) for xy in marks]
        decoder.setimage(core, (0, 0, width, rows))
        try:
            decoder.decode(memoryview(data)[offset:])
        finally:
            decoder.cleanup()
        if [core.getpixel(xy) for xy in marks] == before:
            return None
        return Image.Image()._new(core)
    except Exception:
        return None


# --------------------------------------------------------------------------- planning
class _Planned:
    """One image's transform, its parameters chosen before decoding (the writer's protocol:
    ``into(image, out)`` and a call)."""

    __slots__ = ("apply", "args")

    def __init__(self, apply: Callable[..., torch.Tensor], *args: Any) -> None:
        self.apply, self.args = apply, args

    def into(self, image: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
        return self.apply(image, *self.args, out)

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return self.apply(image, *self.args, None)


class _PlannedCall:
    """One image's transform, its parameters chosen before decoding, without ``into``."""

    __slots__ = ("apply", "args")

    def __init__(self, apply: Callable[..., torch.Tensor], *args: Any) -> None:
        self.apply, self.args = apply, args

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return self.apply(image, *self.args)


def _scaled_box(box: tuple[int, int, int, int], scale: int) -> tuple[int, int, int, int]:
    """A box of the full image on the image decoded at ``1 / scale`` (edges rounded, half up)."""
    top, left, h, w = box
    t, lft = (2 * top + scale) // (2 * scale), (2 * left + scale) // (2 * scale)
    bottom, right = (2 * (top + h) + scale) // (2 * scale), (2 * (left + w) + scale) // (2 * scale)
    return t, lft, bottom - t, right - lft


#: A plan: ``(scale, box or None, this image's transform or None)``.
Plan = tuple[int, tuple[int, int, int, int] | None, Any]


class _CropPlanner:
    """RandomResizedCropFlip: draws the crop from the header's size, scales for the crop."""

    def __init__(self, transform: RandomResizedCropFlip) -> None:
        self.transform = transform
        self.out_h, self.out_w = as_height_width(transform.size)

    def __call__(self, height: int, width: int) -> Plan | None:
        if height < 2 * self.out_h or width < 2 * self.out_w:
            return None  # no crop can be shrunk 2x: today's path, nothing drawn yet
        t = self.transform
        top, left, h, w = t.crop_box(height, width)
        flip = random.random() < t.flip_p  # the draws of RandomResizedCropFlip.into, in order
        scale = largest_scale(h / self.out_h, w / self.out_w)
        if scale == 1:
            return 1, None, _Planned(t.resized_crop, (top, left, h, w), flip)
        box = _scaled_box((top, left, h, w), scale)
        return scale, box, _Planned(t.resized_crop, (0, 0, box[2], box[3]), flip)


class _ResizePlanner:
    """ResizeCenterCrop: the scale from the resize target of the full image."""

    def __init__(self, transform: ResizeCenterCrop) -> None:
        self.transform = transform

    def __call__(self, height: int, width: int) -> Plan | None:
        shape = self.transform.resized_shape(height, width)
        scale = largest_scale(height / shape[0], width / shape[1])
        if scale == 1:
            return None
        return scale, None, _PlannedCall(self.transform.resized_center_crop, shape)


class _DeclaredPlanner:
    """A transform with ``decode_size``: the largest scale keeping the image at least as big."""

    def __init__(self, size: tuple[int, int]) -> None:
        self.height, self.width = size

    def __call__(self, height: int, width: int) -> Plan | None:
        scale = largest_scale(height / self.height, width / self.width)
        return None if scale == 1 else (scale, None, None)


def planner_for(transform: Any) -> Callable[[int, int], Plan | None] | None:
    """How ``transform`` plans a scaled decode from an image's size; None: it cannot (full
    images).

    Raises:
        ValueError: ``transform.decode_size`` is not an int >= 1 or ``(height, width)``.
    """
    if type(transform) is RandomResizedCropFlip:
        return _CropPlanner(transform)
    if type(transform) is ResizeCenterCrop:
        return _ResizePlanner(transform)
    size = getattr(transform, DECODE_SIZE, None)
    if size is None:
        return None
    try:
        return _DeclaredPlanner(as_height_width(size))
    except ValueError:
        raise ValueError(
            f"{type(transform).__name__}.decode_size={size!r} is not accepted: use an int >= 1 "
            "or (height, width), the smallest image the transform needs."
        ) from None


def decoding_summary(decode: str, train: Any, evaluate: Any) -> str:
    """The summary's line saying which decoding is in use, and how each split's transform
    takes it."""
    if decode == "full":
        return "  decode: 'full' (every image decoded in full)"

    def how(transform: Any) -> str:
        if type(transform) is RandomResizedCropFlip:
            return "crop drawn from the header"
        if type(transform) is ResizeCenterCrop:
            return "scale from the resize target"
        size = getattr(transform, DECODE_SIZE, None)
        if size is not None:
            return f"decode_size {'x'.join(map(str, as_height_width(size)))}"
        return "full images (its transform declares no decode_size)"

    return (
        "  decode: 'scaled' (JPEGs shrunk 2x or more decode at 1/2, 1/4 or 1/8 scale): "
        f"train {how(train)}; eval {how(evaluate)}"
    )


class ImageDecoder:
    """Decodes the images of one split for its transform: scaled JPEGs where it allows.

    :meth:`file` and :meth:`bytes` return ``(image, transform)``: the decoded ``uint8``
    ``(3, H, W)`` (interleaved in memory, as ``decode_image(..., channels_last=True)`` gives)
    and, when the transform's random parameters were drawn before decoding, this image's own
    transform to apply instead of the split's (with ``into(image, out)`` and a call); else
    None. :class:`~datamodules.imaging.batches.ImageBatchWriter` takes both.

    Args:
        transform: The split's transform.
        decode: ``"scaled"`` or ``"full"`` (every image decoded in full; the transform
            applied as given).
    """

    def __init__(self, transform: Any, decode: str = "scaled") -> None:
        check_decode(decode)
        self.decode = decode
        self.plan = planner_for(transform) if decode == "scaled" else None

    def file(self, path: str | os.PathLike) -> tuple[torch.Tensor, Any]:
        """Reads and decodes one image file (errors name it, as ``decode_image``'s do)."""
        path = os.fspath(path)
        return self.bytes(read_image_scratch(path), path)

    def bytes(
        self, data: bytes | bytearray | memoryview, name: str = "<bytes>"
    ) -> tuple[torch.Tensor, Any]:
        """Decodes one encoded image held in memory; ``name`` is what errors call it."""
        if not isinstance(data, bytearray) and not _writable_bytes(data):
            data = bytearray(data)
        header = None if self.plan is None else jpeg_header(data)
        if header is None:
            return decode_image_bytes(data, name=name, channels_last=True), None
        height, width, orientation = header
        if orientation >= 5:
            height, width = width, height
        plan = self.plan(height, width)  # type: ignore[misc]
        if plan is None:
            return decode_image_bytes(data, name=name, channels_last=True), None
        scale, box, planned = plan
        if scale == 1:
            image = decode_image_bytes(data, name=name, channels_last=True)
            if tuple(image.shape[1:]) != (height, width):  # a header TorchCodec reads otherwise
                return image, None
            return image, planned
        try:
            return decode_jpeg_scaled(data, scale, orientation, box), planned
        except Exception as exc:
            message = str(exc).strip() or type(exc).__name__
            raise ImageDecodeError.for_file(name, f"Pillow JPEG decoder: {message}") from exc
