"""The members of a tar archive, read from a byte offset: headers, data, truncation.

:class:`TarMembers` walks the regular-file members of a tar stream (ustar, pax and GNU long
names, as Python's ``tarfile`` and webdataset's ``ShardWriter`` write them) from any member's
first header, so a reader can start in the middle of a shard at an offset the index kept. It
reads each member's data or steps over it (a seek in a local file, a read elsewhere) and
knows the byte offset of every header, which is what the index stores.

Directories, links and other non-file members are stepped over; a pax global header is
ignored. A header whose checksum does not match, a size that does not parse, or an archive
that ends inside a header or a member's data raise :class:`TarDamage`, which says where.
"""

from __future__ import annotations

import os
import zlib
from typing import IO

__all__ = ["BLOCK", "Member", "TarDamage", "TarMembers"]

BLOCK = 512
_REGULAR = (b"0", b"\0", b"7")
_SKIP_CHUNK = 1 << 20


class TarDamage(Exception):
    """The archive cannot be read past ``offset``: a truncated or corrupt member.

    Attributes:
        offset: Byte offset (in the uncompressed archive) where the damage is.
        member: The member being read, if its header was read.
        reason: What is wrong.
        in_data: True when the damage is in the data of ``member`` (its header was whole).
    """

    def __init__(self, offset: int, member: str | None, reason: str, in_data: bool) -> None:
        self.offset, self.member, self.reason, self.in_data = offset, member, reason, in_data
        where = f"member {member!r}" if member is not None else f"byte {offset}"
        super().__init__(f"{where}: {reason}")


class Member:
    """One regular file of the archive.

    Attributes:
        name: Its path in the archive (a pax or GNU long name when one precedes it).
        size: Bytes of data.
        start: Offset of its first header block (a pax or long-name header, if any).
        data: Offset of its data.
    """

    __slots__ = ("name", "size", "start", "data")

    def __init__(self, name: str, size: int, start: int, data: int) -> None:
        self.name, self.size, self.start, self.data = name, size, start, data


def _number(field: bytes) -> int:
    """A numeric header field: octal text, or GNU base-256 (first byte 0x80 or 0xff)."""
    if field[:1] in (b"\x80", b"\xff"):
        value = int.from_bytes(field[1:], "big")
        return value - (1 << (8 * len(field) - 8)) if field[:1] == b"\xff" else value
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _pax(data: bytes) -> dict[str, str]:
    """The ``length key=value\\n`` records of a pax extended header."""
    out: dict[str, str] = {}
    at = 0
    while at < len(data):
        space = data.index(b" ", at)
        length = int(data[at:space])
        key, _, value = data[space + 1 : at + length - 1].partition(b"=")
        out[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        at += length
    return out


def _cut_stream(err: Exception) -> bool:
    """A decompressor's error for a cut or corrupt compressed stream (gzip, zstd)."""
    return isinstance(err, (EOFError, zlib.error)) or type(err).__name__ in (
        "BadGzipFile",
        "ZstdError",
    )


class TarMembers:
    """The regular-file members of a tar stream, from ``offset`` (a member's first header).

    Call :meth:`next` for the next member (None at the end of the archive), then exactly one
    of :meth:`read` or :meth:`skip` for its data.

    Args:
        stream: A binary stream positioned at ``offset``.
        offset: Its position in the (uncompressed) archive.
        size: The archive's size when known and ``stream`` seeks cheaply (a local file):
            data is then stepped over by seeking; otherwise it is read and dropped.
        verify: Check each header's checksum (a reader of a shard already indexed, whose
            headers the index checked, may skip it: it costs about as much as the rest of
            the header's parsing).
    """

    def __init__(
        self, stream: IO[bytes], offset: int = 0, size: int | None = None, verify: bool = True
    ) -> None:
        self.stream = stream
        self.verify = verify
        self.pos = offset
        self.size = size
        self.member: Member | None = None
        #: The last member whose data was read or skipped whole (for error messages).
        self.previous: str | None = None

    def _read(self, n: int, member: str | None, in_data: bool) -> bytes:
        try:
            return self.stream.read(n)
        except Exception as err:
            if not _cut_stream(err):
                raise
            reason = f"the compressed stream is cut or corrupt ({type(err).__name__}: {err})"
            raise TarDamage(self.pos, member, reason, in_data) from err

    def _exact(self, n: int, what: str, member: str | None, in_data: bool) -> bytes:
        data = self._read(n, member, in_data)
        if len(data) != n:
            raise TarDamage(
                self.pos + len(data),
                member,
                f"the archive ends inside {what} ({len(data)} of {n} bytes)",
                in_data,
            )
        self.pos += n
        return data

    def _after(self) -> str:
        return f" after member {self.previous!r}" if self.previous else ""

    def _header(self) -> bytes | None:
        """The next header block; None at a clean end (end-of-archive blocks or end of file)."""
        block = self._read(BLOCK, None, False)
        if len(block) != BLOCK:
            if not block:
                return None
            reason = (
                f"the archive ends inside a header{self._after()} ({len(block)} of {BLOCK} bytes)"
            )
            raise TarDamage(self.pos, None, reason, False)
        if block.count(0) == BLOCK:  # the end-of-archive marker
            return None
        if self.verify:
            stored = block[148:156]
            try:
                expected = _number(stored)
            except ValueError:
                expected = -1
            if expected != sum(block) - sum(stored) + 8 * 32:  # its own field counts as spaces
                reason = f"corrupt header{self._after()} (checksum mismatch)"
                raise TarDamage(self.pos, None, reason, False)
        self.pos += BLOCK
        return block

    def next(self) -> Member | None:
        """The next regular file (its header read), or None at the end of the archive."""
        start = self.pos
        long_name: str | None = None
        pax: dict[str, str] = {}
        while True:
            header_at = self.pos
            block = self._header()
            if block is None:
                return None
            kind = block[156:157]
            name = _text(block[:100])
            if block[257:262] == b"ustar" and block[345:346] != b"\0":
                name = _text(block[345:500]) + "/" + name
            try:
                size = _number(block[124:136])
            except ValueError:
                size = -1
            if size < 0:
                self.pos = header_at
                raise TarDamage(header_at, name, "corrupt header (bad size field)", False)
            if kind in (b"x", b"L", b"g", b"K"):
                data = self._exact(size, f"the extended header of {name!r}", name, True)
                self._padding(size)
                if kind == b"x":
                    pax = _pax(data)
                elif kind == b"L":
                    long_name = _text(data)
                continue
            name = pax.get("path", long_name or name)
            if "size" in pax:
                size = int(pax["size"])
            if kind not in _REGULAR:  # a directory, a link, a device: no record data
                self._step(size, name)
                start, long_name, pax = self.pos, None, {}
                continue
            self.member = Member(name, size, start, self.pos)
            return self.member

    def read(self) -> bytes:
        """The current member's data."""
        member = self.member
        assert member is not None
        data = self._exact(member.size, f"the data of {member.name!r}", member.name, True)
        self._padding(member.size)
        self.previous = member.name
        return data

    def skip(self) -> None:
        """Steps over the current member's data."""
        member = self.member
        assert member is not None
        self._step(member.size, member.name)
        self.previous = member.name

    def _step(self, size: int, name: str) -> None:
        padded = -(-size // BLOCK) * BLOCK
        if self.size is not None:
            if self.pos + size > self.size:
                got = max(self.size - self.pos, 0)
                raise TarDamage(
                    self.size,
                    name,
                    f"the archive ends inside the data of {name!r} ({got} of {size} bytes)",
                    True,
                )
            padded = min(padded, self.size - self.pos)
            self.stream.seek(padded, os.SEEK_CUR)
            self.pos += padded
            return
        left = size
        while left:
            chunk = self._read(min(left, _SKIP_CHUNK), name, True)
            if not chunk:
                got = f"{size - left} of {size} bytes"
                reason = f"the archive ends inside the data of {name!r} ({got})"
                raise TarDamage(self.pos, name, reason, True)
            left -= len(chunk)
            self.pos += len(chunk)
        self._padding(size)

    def _padding(self, size: int) -> None:
        # A file cut right after a member's data (its padding missing) ends there cleanly.
        pad = -size % BLOCK
        if pad:
            self.pos += len(self._read(pad, self.previous, True))
