"""Writing records into shards: :func:`write_shards` (tar, Parquet or JSONL).

Records go into ``prefix-000000.<ext>``, ``prefix-000001.<ext>``, ... in ``out_dir``; a shard
is closed once the next record would take it past ``max_bytes`` (or it holds
``max_records``). Each shard is written to a hidden temporary name and renamed into place
when complete, so a shard that exists is whole (a crash leaves no half shard under a shard's
name, and a glob never picks one up).

* **tar**: WebDataset's layout, readable by ``webdataset.WebDataset`` and by this library
  (:mod:`datamodules.shards.tar`). A record is a dict with ``"__key__"`` (its name: no dot
  in the part after the last ``/``) and fields named by extension, encoded by
  :func:`~datamodules.shards.tar_fields.encode_field` (ints for ``cls``, str for ``txt``,
  any JSON value for ``json``, an array for ``npy``, ``X.gz`` compressed, bytes for the
  rest). Other ``__*__`` fields (such as ``__url__``
  of a record read from a shard) are not written. Member times and owners are fixed, so the
  same records always give the same bytes.
* **parquet**: one row per record, written in row groups of at most 16 MB (or 4,096 rows).
  A column of encoded images (bytes with a JPEG/PNG/WebP/GIF/BMP/TIFF signature, or Hugging
  Face's ``{"bytes", "path"}`` dicts) becomes ``struct<bytes, path>`` with Hugging Face's
  ``Image`` feature in the ``huggingface`` schema metadata, so ``datasets.load_dataset(
  "parquet", ...)`` gives PIL images; it is stored without compression or statistics (the
  bytes are compressed already).
* **jsonl**: one JSON object per line (bytes cannot be written: use tar or Parquet).

Beside the shards, ``{prefix}.index.json`` lists them with their record counts, sizes and seek
offsets (webdataset's wids shard index, :mod:`~datamodules.shards.dataset_index`), noted while
they were written: ``StreamingDataModule(train_files="out/shard.index.json")`` and
``wids.ShardListDataset("out/shard.index.json")`` read it instead of any shard.
"""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from datamodules.core.checks import check_choice, check_int, check_size, check_string, rejected
from datamodules.imaging.decoding import is_image_bytes
from datamodules.shards.dataset_index import write_dataset_index
from datamodules.shards.shard_index import ShardIndex
from datamodules.shards.tar import EVERY as TAR_EVERY
from datamodules.shards.tar import split_name
from datamodules.shards.tar_fields import encode_field

__all__ = ["index_path", "write_shard", "write_shards"]

#: A seek offset every this many JSONL records (as :mod:`~datamodules.shards.index` keeps).
LINE_EVERY = 1024


def index_path(out_dir: str | os.PathLike, prefix: str = "shard") -> Path:
    """Where :func:`write_shards` writes the dataset index: ``out_dir/{prefix}.index.json``."""
    return Path(out_dir) / f"{prefix}.index.json"


SHARD_FORMATS = ("tar", "parquet", "jsonl")
ROW_GROUP_BYTES = 16 << 20
ROW_GROUP_ROWS = 4096
BLOCK = 512


def write_shards(
    records: Iterable[Mapping[str, Any]],
    out_dir: str | os.PathLike,
    *,
    fmt: str = "tar",
    max_bytes: int | str = "256MB",
    max_records: int | None = None,
    prefix: str = "shard",
) -> list[str]:
    """Writes records into shards of at most ``max_bytes``, and their dataset index
    ``{prefix}.index.json`` (:func:`index_path`); returns the shards' paths.

    Args:
        records: Dicts. tar: ``"__key__"`` plus fields named by extension (``"jpg"``,
            ``"cls"``, ...); Parquet and JSONL: any fields, the same in every record.
        out_dir: The folder (made if missing).
        fmt: ``"tar"``, ``"parquet"`` or ``"jsonl"``.
        max_bytes: Bytes per shard (an int or ``"256MB"``, ``"1GiB"``): a shard is closed
            before the record that would take it past this; a record larger than it gets a
            shard of its own. Counts the data written (tar: headers and padding too;
            Parquet: the values before encoding).
        max_records: At most this many records per shard (None: no limit).
        prefix: Shards are named ``{prefix}-{k:06d}.{fmt}``.

    Returns:
        The paths written, in order (an empty list for no records, and no index).

    Raises:
        ValueError, TypeError: A bad argument, or a record that cannot be written (naming
            the record and the field).
    """
    check_choice(fmt, "fmt", SHARD_FORMATS)
    limit = check_size(max_bytes, "max_bytes")
    assert limit is not None
    check_int(max_records, "max_records", 1, allow_none=True)
    check_string(prefix, "prefix", "a file name prefix")
    if "/" in prefix or os.sep in prefix:
        raise rejected("prefix", prefix, "a file name prefix")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    writer_class = _SHARDS[fmt]
    paths: list[str] = []
    indexes: list[ShardIndex] = []
    shard: Shard | None = None
    try:
        for number, record in enumerate(records):
            if not isinstance(record, Mapping):
                raise TypeError(f"record {number} is a {type(record).__name__}: give dicts.")
            encoded, size = writer_class.encode(record, number)
            full = shard is not None and (
                (max_records is not None and shard.records >= max_records)
                or (shard.records and shard.bytes + size + shard.overhead > limit)
            )
            if shard is not None and full:
                paths.append(shard.close())
                indexes.append(shard.index())
                shard = None
            if shard is None:
                shard = writer_class(out / f"{prefix}-{len(paths):06d}.{fmt}")
            shard.add(encoded, size, number)
        if shard is not None:
            paths.append(shard.close())
            indexes.append(shard.index())
            shard = None
    finally:
        if shard is not None:
            shard.abort()
    if indexes:
        write_dataset_index(index_path(out, prefix), indexes, prefix)
    return paths


def write_shard(records: Iterable[Mapping[str, Any]], path: str | os.PathLike, fmt: str) -> str:
    """Writes all ``records`` into the one shard ``path`` (renamed into place when whole), as
    :func:`write_shards` writes each of its shards; returns the path."""
    shard = _SHARDS[fmt](Path(path))
    try:
        for number, record in enumerate(records):
            encoded, size = shard.encode(record, number)
            shard.add(encoded, size, number)
        return shard.close()
    except BaseException:
        shard.abort()
        raise


class Shard:
    """One shard being written under a temporary name; :meth:`close` renames it into place.

    Subclasses encode a record (:meth:`encode`, also its size in bytes) and write it
    (:meth:`write`).
    """

    #: Bytes the format adds once per shard (counted against ``max_bytes``).
    overhead = 0
    #: Its format, and a seek offset every this many records (0: none kept).
    fmt = ""
    every = 0

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self.file = open(self.tmp, "wb", buffering=1 << 20)  # noqa: SIM115 (closed by close / abort)
        self.records = 0
        self.bytes = 0
        #: Byte offsets of every ``every``-th record, as a reader's index keeps them.
        self.offsets: list[int] = []

    def note_start(self) -> None:
        """Notes where the record about to be written starts (for its seek offset)."""
        if self.every and self.records % self.every == 0:
            self.offsets.append(self.file.tell())

    def index(self) -> ShardIndex:
        """The closed shard's index, as :func:`~datamodules.shards.index.index_shard` would
        find it (its records are all good: the writer checked them)."""
        every = self.every if len(self.offsets) > 1 else 0
        return ShardIndex(
            str(self.path), self.fmt, None, "raise", self.records, every=every,
            offsets=tuple(self.offsets) if every else (), lines=self.lines() if every else (),
            size=self.path.stat().st_size, columns=self.columns(),
        )  # fmt: skip

    def lines(self) -> tuple[int, ...]:
        """The line of each offset (line formats)."""
        return ()

    def columns(self) -> tuple[str, ...]:
        """The columns (Parquet)."""
        return ()

    @staticmethod
    def encode(record: Mapping[str, Any], number: int) -> tuple[Any, int]:
        raise NotImplementedError

    def add(self, encoded: Any, size: int, number: int) -> None:
        self.write(encoded, number)
        self.records += 1
        self.bytes += size

    def write(self, encoded: Any, number: int) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """Writes what the format needs at the end (before the file is closed)."""

    def close(self) -> str:
        self.finish()
        self.file.close()
        os.replace(self.tmp, self.path)
        return str(self.path)

    def abort(self) -> None:
        self.file.close()
        self.tmp.unlink(missing_ok=True)


def _record_name(record: Mapping[str, Any], number: int) -> str:
    key = record.get("__key__")
    return f"record {number} (key {key!r})" if key is not None else f"record {number}"


_USTAR_TAIL = b"0" + bytes(100) + b"ustar\x0000" + bytes(64 + 16 + 167)  # no device numbers


def tar_header(name: str, size: int) -> bytes:
    """The header of a member ``name`` of ``size`` bytes (mode 0444, owner 0, time 0): the bytes
    Python's ``tarfile`` writes in its pax format, built directly for a short ASCII name."""
    raw = name.encode("ascii", "replace")
    if len(raw) > 100 or not name.isascii() or size >= 8**11:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = size, 0o444, 0
        return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    head = raw.ljust(100, b"\0") + b"0000444\x000000000\x000000000\x00" + b"%011o\x00" % size
    head += b"00000000000\x00"
    checksum = sum(head) + 8 * 32 + sum(_USTAR_TAIL)
    return head + b"%06o\x00 " % checksum + _USTAR_TAIL


class TarShard(Shard):
    """A WebDataset tar shard (pax headers, as Python's ``tarfile`` writes them)."""

    overhead = 2 * BLOCK  # the end-of-archive marker
    fmt, every = "tar", TAR_EVERY

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.keys: set[str] = set()

    @staticmethod
    def encode(record: Mapping[str, Any], number: int) -> tuple[Any, int]:
        key = record.get("__key__")
        if not isinstance(key, str) or not key:
            raise ValueError(f"record {number} has no '__key__' (a non-empty str) to name it.")
        if split_name(f"{key}.x") != (key, "x"):
            raise ValueError(
                f"record {number}: __key__={key!r} cannot name tar members (no dot after the "
                "last '/', not '__*__')."
            )
        members = []
        size = 0
        for field, value in record.items():
            if field.startswith("__") or value is None:
                continue
            if not isinstance(field, str) or not field or field != field.lower() or "/" in field:
                raise ValueError(
                    f"{_record_name(record, number)}: field {field!r} is not a tar extension "
                    "(lower-case, no '/'; tar readers lower-case extensions)."
                )
            try:
                data = encode_field(field, value)
            except (TypeError, ValueError) as err:
                raise type(err)(f"{_record_name(record, number)}, field {field!r}: {err}") from None
            header = tar_header(f"{key}.{field}", len(data))
            members.append((header, data))
            size += len(header) + -(-len(data) // BLOCK) * BLOCK
        if not members:
            raise ValueError(f"{_record_name(record, number)} has no field to write.")
        return (key, members), size

    def write(self, encoded: Any, number: int) -> None:
        key, members = encoded
        if key in self.keys:
            raise ValueError(
                f"record {number}: __key__={key!r} is already in {self.path.name}; tar readers "
                "would refuse the shard."
            )
        self.keys.add(key)
        self.note_start()
        write = self.file.write
        for header, data in members:
            write(header)
            write(data)
            if len(data) % BLOCK:
                write(bytes(BLOCK - len(data) % BLOCK))

    def finish(self) -> None:
        self.file.write(bytes(self.overhead))


class JsonlShard(Shard):
    """A JSON Lines shard."""

    fmt, every = "jsonl", LINE_EVERY

    @staticmethod
    def encode(record: Mapping[str, Any], number: int) -> tuple[Any, int]:
        try:
            line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        except (TypeError, ValueError) as err:
            raise TypeError(
                f"{_record_name(record, number)} cannot be written as JSON ({err}); bytes "
                "fit in tar or Parquet shards (fmt='tar' or 'parquet')."
            ) from None
        return line, len(line)

    def write(self, encoded: Any, number: int) -> None:
        self.note_start()
        self.file.write(encoded)

    def lines(self) -> tuple[int, ...]:
        return tuple(k * self.every + 1 for k in range(len(self.offsets)))


def _value_size(value: Any) -> int:
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        return len(value)
    if isinstance(value, Mapping):
        return sum(_value_size(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_value_size(v) for v in value) + 8
    return 8


def _image_column(values: list[Any]) -> bool:
    """Whether a column holds encoded images (every value bytes with an image signature, or
    a ``{"bytes", "path"}`` dict)."""
    first = next((v for v in values if v is not None), None)
    if isinstance(first, Mapping):
        return all(v is None or (isinstance(v, Mapping) and set(v) == {"bytes", "path"})
                   for v in values)  # fmt: skip
    return first is not None and all(
        v is None or (isinstance(v, (bytes, bytearray)) and is_image_bytes(v)) for v in values
    )


class ParquetShard(Shard):
    """A Parquet shard, written a row group at a time; image columns as Hugging Face's."""

    fmt = "parquet"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.rows: list[dict[str, Any]] = []
        self.pending = 0
        self.writer: Any = None
        self.schema: Any = None
        self.images: list[str] = []

    @staticmethod
    def encode(record: Mapping[str, Any], number: int) -> tuple[Any, int]:
        row = {k: v for k, v in record.items() if k != "__url__"}
        return row, sum(_value_size(v) for v in row.values())

    def add(self, encoded: Any, size: int, number: int) -> None:
        super().add(encoded, size, number)
        self.pending += size
        if self.pending >= ROW_GROUP_BYTES or len(self.rows) >= ROW_GROUP_ROWS:
            self._flush()

    def write(self, encoded: Any, number: int) -> None:
        if self.rows and set(encoded) != set(self.rows[0]):
            raise ValueError(
                f"record {number} has the fields {sorted(encoded)}, but the shard's first "
                f"record has {sorted(self.rows[0])}: Parquet rows share one schema."
            )
        self.rows.append(encoded)

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self.rows:
            return
        columns = {name: [row[name] for row in self.rows] for name in self.rows[0]}
        if self.writer is None:
            self.images = [name for name, values in columns.items() if _image_column(values)]
        for name in self.images:
            keys = columns.get("__key__")
            columns[name] = [
                v if v is None or isinstance(v, Mapping)
                else {"bytes": bytes(v), "path": f"{keys[i]}.{name}" if keys else None}
                for i, v in enumerate(columns[name])
            ]  # fmt: skip
        image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
        try:
            if self.schema is None:
                types = {name: image_type for name in self.images}
            else:
                types = {field.name: field.type for field in self.schema}
            table = pa.table({n: pa.array(v, type=types.get(n)) for n, v in columns.items()})
        except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
            raise TypeError(
                f"{self.path.name}: records {self.records - len(self.rows)}.."
                f"{self.records - 1} do not fit one Parquet schema ({err})."
            ) from None
        if self.schema is None:
            features = {name: {"_type": "Image"} for name in self.images}
            meta = {"huggingface": json.dumps({"info": {"features": features}})}
            self.schema = table.schema.with_metadata(meta) if features else table.schema
            leaves = {n: [f"{n}.bytes", f"{n}.path"] if n in self.images else [n] for n in columns}
            plain = [leaf for n in columns if n not in self.images for leaf in leaves[n]]
            self.writer = pq.ParquetWriter(
                self.file,
                self.schema,
                compression={
                    leaf: "NONE" if n in self.images else "SNAPPY"
                    for n in columns
                    for leaf in leaves[n]
                },  # fmt: skip
                use_dictionary=plain,
                write_statistics=plain,
            )
        table = table.replace_schema_metadata(self.schema.metadata)
        self.writer.write_table(table)
        self.rows, self.pending = [], 0

    def finish(self) -> None:
        self._flush()
        if self.writer is not None:
            self.writer.close()

    def columns(self) -> tuple[str, ...]:
        return tuple(self.schema.names) if self.schema is not None else ()


_SHARDS: dict[str, type[Shard]] = {"tar": TarShard, "parquet": ParquetShard, "jsonl": JsonlShard}
