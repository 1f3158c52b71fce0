"""What a tar member's bytes mean: webdataset's decoders, by extension, with nothing unpickled.

A member is decoded by the last part of its extension, as ``webdataset.WebDataset(...)
.decode()`` decodes it (its ``gzfilter`` and ``basichandlers``):

* ``X.gz``: decompressed, then decoded as ``X`` (``txt.gz`` -> str, ``npy.gz`` -> array); the
  record's key stays ``X.gz``. A ``.gz`` alone gives the decompressed bytes.
* ``cls cls2 class count index inx id`` -> int; ``txt text transcript`` -> str;
  ``json jsn`` -> the parsed value.
* ``npy`` -> a NumPy array, read with ``allow_pickle=False`` (an object array is refused).
* ``mp msg msgpack`` -> the unpacked value (``msgpack.unpackb``) when the ``msgpack`` package
  is installed; else the bytes, as they are.
* ``pyd pickle pkl pth`` are refused: webdataset would unpickle them (``torch.load`` for
  ``pth``); nothing is ever unpickled here.
* Anything else stays bytes (images, audio, ``pt``, ``npz``, ``cbor``, ``ten``).

webdataset 1.0 leaves ``class`` and ``count`` as bytes although its docstring (and its 0.2
releases) list them as ints; they are ints here. :func:`encode_field` is the encoding in
reverse, for :func:`~datamodules.shards.writer.write_shards`.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import zlib
from typing import Any

import numpy as np

from datamodules.core.checks import is_int

__all__ = [
    "INT_EXTENSIONS",
    "JSON_EXTENSIONS",
    "MSGPACK_EXTENSIONS",
    "REFUSED_EXTENSIONS",
    "TEXT_EXTENSIONS",
    "decode_field",
    "encode_field",
    "field_kind",
    "typed",
]

INT_EXTENSIONS = ("cls", "cls2", "class", "count", "index", "inx", "id")
TEXT_EXTENSIONS = ("txt", "text", "transcript")
JSON_EXTENSIONS = ("json", "jsn")
MSGPACK_EXTENSIONS = ("mp", "msg", "msgpack")
REFUSED_EXTENSIONS = ("pyd", "pickle", "pkl", "pth")


@functools.cache
def _msgpack() -> Any:
    """The ``msgpack`` module, or None when it is not installed."""
    try:
        import msgpack
    except ImportError:
        return None
    return msgpack


def _inner(ext: str) -> tuple[str, bool]:
    """The extension a ``.gz`` member is decoded as, and whether it is one."""
    if ext == "gz":
        return "", True
    if ext.endswith(".gz"):
        return ext[:-3], True
    return ext, False


def field_kind(ext: str) -> str:
    """``"int"``, ``"text"``, ``"json"``, ``"npy"``, ``"msgpack"``, ``"refused"`` or
    ``"bytes"``: how a member of extension ``ext`` decodes (a ``.gz`` one: once decompressed)."""
    last = _inner(ext)[0].rsplit(".", 1)[-1]
    if last in INT_EXTENSIONS:
        return "int"
    if last in TEXT_EXTENSIONS:
        return "text"
    if last in JSON_EXTENSIONS:
        return "json"
    if last == "npy":
        return "npy"
    if last in MSGPACK_EXTENSIONS and _msgpack() is not None:
        return "msgpack"
    if last in REFUSED_EXTENSIONS:
        return "refused"
    return "bytes"


def typed(ext: str) -> bool:
    """Whether decoding a member of extension ``ext`` can fail (so indexing a shard reads it):
    all but plain bytes."""
    return field_kind(ext) != "bytes" or _inner(ext)[1]


def decode_field(ext: str, data: bytes) -> Any:
    """A member's value from its bytes (see the module docstring).

    Raises:
        ValueError: The bytes do not decode (the message says why), or the extension is a
            pickle one (refused).
    """
    kind = field_kind(ext)
    if kind == "refused":
        raise ValueError(f"a .{ext} member would be unpickled; pickled data is refused")
    if _inner(ext)[1]:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as err:
            raise ValueError(f"not gzip data ({err})") from None
    if kind == "bytes":
        return data
    if kind == "int":
        try:
            return int(data)
        except ValueError:
            raise ValueError(f"not an integer: {data[:40]!r}") from None
    if kind == "npy":
        try:
            return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
        except Exception as err:  # noqa: BLE001 - any parse error of the header or data
            raise ValueError(f"not a .npy array ({type(err).__name__}: {err})") from None
    if kind == "msgpack":
        try:
            return _msgpack().unpackb(data)
        except Exception as err:  # noqa: BLE001 - msgpack's errors have no common base
            raise ValueError(f"not msgpack data ({type(err).__name__}: {err})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"invalid UTF-8: {err}") from None
    if kind == "text":
        return text
    try:
        return json.loads(text)
    except ValueError as err:
        raise ValueError(f"invalid JSON: {err}") from None


def encode_field(ext: str, value: Any) -> bytes:
    """The bytes of a member with extension ``ext`` holding ``value`` (:func:`decode_field`
    in reverse): ints for the int extensions, str for the text ones, any JSON value for
    ``json``/``jsn``, an array for ``npy``, a msgpack value for ``mp``/``msg``/``msgpack``
    (bytes: packed already), and for ``X.gz`` what ``X`` takes, compressed; other extensions
    take bytes, a str (UTF-8) or a Hugging Face image ``{"bytes": ..., "path": ...}``.

    Raises:
        TypeError: The value does not fit the extension.
        ValueError: A pickle extension (refused), an object array.
    """
    inner, compressed = _inner(ext)
    if compressed:
        return gzip.compress(encode_field(inner, value), mtime=0)
    kind = field_kind(ext)
    if kind == "int":
        if not is_int(value):
            raise TypeError(f"a .{ext} field holds an int, got {type(value).__name__}")
        return str(int(value)).encode("ascii")
    if kind == "json":
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    if kind == "refused":
        raise ValueError(f".{ext} fields would need pickling; pickled data is refused")
    if kind == "npy" and isinstance(value, np.ndarray):
        out = io.BytesIO()
        np.lib.format.write_array(out, value, allow_pickle=False)
        return out.getvalue()
    if kind == "msgpack" and not isinstance(value, (bytes, bytearray, memoryview)):
        return _msgpack().packb(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    if kind == "text":
        raise TypeError(f"a .{ext} field holds a str, got {type(value).__name__}")
    if isinstance(value, dict) and isinstance(value.get("bytes"), (bytes, bytearray)):
        value = value["bytes"]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"a .{ext} field holds bytes or a str, got {type(value).__name__}")
