"""The members of a tar archive, read from a byte offset: headers, data, truncation.

:class:`TarMembers` walks the regular-file members of a tar stream (ustar, pax and GNU long
names, as Python's ``tarfile`` and webdataset's ``ShardWriter`` write them) from any member's
first header, so a reader can start in the middle of a shard at an offset the index kept. It
reads each member's data or steps over it (a seek in a local file, a read elsewhere) and
knows the byte offset of every header, which is what the index stores.

Directories, links and other non-file members are stepped over; a pax global header is
ignored. A header whose checksum does not match, a size that does not parse, or an archive
that ends anywhere but after its two end-of-archive zero blocks (inside a header, a member's
data or padding, right after a member, or inside the end blocks) raise :class:`TarDamage`,
which says where. GNU tar and webdataset accept a file that simply stops after a member's
padding; it is also what a copy cut at a block boundary looks like, so it is damage here too.
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
        in_data: True when the damage is in the data or padding of ``member`` (its header
            was whole).
        at_end: True when the damage is in the end-of-archive blocks: every member before
            it is whole.
        counted: Set by a reader once a record lost to this damage was reported (so that
            the damage itself is not counted again).
    """

    def __init__(
        self, offset: int, member: str | None, reason: str, in_data: bool, at_end: bool = False
    ) -> None:
        self.offset, self.member, self.reason, self.in_data = offset, member, reason, in_data
        self.at_end = at_end
        self.counted = False
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

    def _exact(self, n: int, part: str, member: str) -> bytes:
        data = self._read(n, member, True)
        if len(data) != n:
            raise TarDamage(self.pos + len(data), member, _cut(member, part, len(data), n), True)
        self.pos += n
        return data

    def _after(self) -> str:
        return f" after member {self.previous!r}" if self.previous else ""

    def _header(self) -> bytes | None:
        """The next header block; None at the end-of-archive blocks (two zero blocks)."""
        block = self._read(BLOCK, None, False)
        if len(block) != BLOCK:
            if not block:
                reason = f"the archive ends{self._after()} without its end-of-archive blocks"
            elif block.count(0) == len(block):  # a header's name starts with a non-zero byte
                reason = f"the archive ends inside its end-of-archive blocks{self._after()}"
                raise TarDamage(self.pos, None, reason, False, at_end=True)
            else:
                got = f"{len(block)} of {BLOCK} bytes"
                reason = f"the archive ends inside a header{self._after()} ({got})"
            raise TarDamage(self.pos, None, reason, False)
        if block.count(0) == BLOCK:  # the end-of-archive marker: a second zero block follows
            second = self._read(BLOCK, None, False)
            if len(second) != BLOCK or second.count(0) != BLOCK:
                reason = (
                    f"the archive ends inside its end-of-archive blocks{self._after()}"
                    if len(second) < BLOCK
                    else f"a lone zero block{self._after()}, not the two end-of-archive blocks"
                )
                raise TarDamage(self.pos + BLOCK, None, reason, False, at_end=True)
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
                data = self._exact(size, "extended header", name)
                self._padding(size, name)
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
        data = self._exact(member.size, "data", member.name)
        self._padding(member.size, member.name)
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
                raise TarDamage(self.size, name, _cut(name, "data", got, size), True)
            if self.pos + padded > self.size:
                got = self.size - self.pos - size
                raise TarDamage(self.size, name, _cut(name, "padding", got, padded - size), True)
            self.stream.seek(padded, os.SEEK_CUR)
            self.pos += padded
            return
        left = size
        while left:
            chunk = self._read(min(left, _SKIP_CHUNK), name, True)
            if not chunk:
                raise TarDamage(self.pos, name, _cut(name, "data", size - left, size), True)
            left -= len(chunk)
            self.pos += len(chunk)
        self._padding(size, name)

    def _padding(self, size: int, name: str) -> None:
        pad = -size % BLOCK
        if pad:
            got = len(self._read(pad, name, True))
            self.pos += got
            if got != pad:  # cut after the data: the record's later members are gone
                raise TarDamage(self.pos, name, _cut(name, "padding", got, pad), True)


def _cut(member: str, part: str, got: int, size: int) -> str:
    return f"the archive ends inside member {member!r} (in its {part}, {got} of {size} bytes)"
