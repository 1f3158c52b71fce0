"""A JPEG's stored size and EXIF orientation, read from its markers without decoding it.

Shared by the full decoder (:mod:`datamodules.imaging.decoding`, which applies the orientation
to what libjpeg-turbo's TurboJPEG API decodes) and the scaled one
(:mod:`datamodules.imaging.scaled`, which plans its DCT scale from the size).
"""

from __future__ import annotations

__all__ = ["jpeg_header"]

#: The start-of-frame markers (every coding process but the hierarchical DHP).
_SOF = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF))


def jpeg_header(data: bytes | bytearray | memoryview) -> tuple[int, int, int] | None:
    """``(height, width, orientation)`` of a JPEG as stored, from its markers; None if ``data``
    is not a JPEG or its header cannot be read (the full-decode path then reports it).

    ``orientation`` is the EXIF orientation tag (1-8; 1 when absent or unreadable): 5-8 swap
    the displayed height and width.
    """
    size = len(data)
    if size < 4 or data[0] != 0xFF or data[1] != 0xD8:
        return None
    orientation = 1
    pos = 2
    while pos + 4 <= size:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # no length
            pos += 2
            continue
        length = (data[pos + 2] << 8) | data[pos + 3]
        if marker in _SOF:
            if pos + 9 > size:
                return None
            height = (data[pos + 5] << 8) | data[pos + 6]
            width = (data[pos + 7] << 8) | data[pos + 8]
            return (height, width, orientation) if height and width else None
        if marker in (0xD9, 0xDA) or length < 2:  # end or scan before any frame header
            return None
        if marker == 0xE1 and orientation == 1 and bytes(data[pos + 4 : pos + 10]) == b"Exif\0\0":
            orientation = _exif_orientation(bytes(data[pos + 10 : pos + 2 + length]))
        pos += 2 + length
    return None


def _exif_orientation(tiff: bytes) -> int:
    """The orientation tag (0x0112) of IFD0 of an EXIF block's TIFF data, 1 if absent."""
    order = {b"II": "little", b"MM": "big"}.get(tiff[:2])
    if order is None or len(tiff) < 8:
        return 1
    ifd = int.from_bytes(tiff[4:8], order)
    if ifd + 2 > len(tiff):
        return 1
    count = int.from_bytes(tiff[ifd : ifd + 2], order)
    for entry in range(ifd + 2, min(ifd + 2 + 12 * count, len(tiff) - 11), 12):
        if int.from_bytes(tiff[entry : entry + 2], order) == 0x0112:
            kind = int.from_bytes(tiff[entry + 2 : entry + 4], order)
            value = int.from_bytes(tiff[entry + 8 : entry + 10], order)
            return value if kind == 3 and 1 <= value <= 8 else 1
    return 1
