"""Columnar batches: a stream worker's records held as decoded columns, a batch gathered per field.

With the default collate, a worker of a Parquet or JSONL stream never makes one Python dict
per record. Its reader gives *blocks*: a Parquet row group's Arrow record batch, or a few
thousand JSONL lines parsed at once by pyarrow's JSON reader
(:mod:`~datamodules.shards.jsonl`). Each block's columns are decoded once
(:class:`Block`): numbers to a NumPy array, lists of numbers to their values laid end to end
and each row's length, anything else (strings, nested lists, nulls, structs) to its Python
values. The shuffle buffer then holds row *positions* (:class:`RowStore`), and a batch is
gathered field by field (:mod:`~datamodules.stream_engine.gather`): one fancy index per field,
and variable-length lists padded in one scatter, as the record path pads them.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

__all__ = ["Block", "Field", "INT_KINDS", "RowStore", "arrow_numbers", "decode_column", "preload"]

NUMBERS, LISTS, VALUES, CONSTANT = "numbers", "lists", "values", "constant"
INT_KINDS = "iu"


def _numpy_kind_ok(array: np.ndarray) -> bool:
    kind = array.dtype.kind
    return kind in "bf" or (kind in INT_KINDS and array.dtype != np.uint64)


def arrow_numbers(array: Any) -> np.ndarray:
    """A numeric Arrow array without nulls as NumPy, straight from its data buffer (no copy,
    and without pyarrow's ``to_numpy``, which imports pandas on first use: a fresh worker's
    0.3 s); booleans (packed bits) through ``to_numpy``."""
    import pyarrow.types as pt

    kind = array.type
    if pt.is_boolean(kind):
        return array.to_numpy(zero_copy_only=False)
    code = "f" if pt.is_floating(kind) else "u" if pt.is_unsigned_integer(kind) else "i"
    dtype = np.dtype(f"{code}{kind.bit_width // 8}")
    data = array.buffers()[1]
    return np.frombuffer(data, dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)


def decode_column(column: Any) -> tuple:
    """One Arrow column as the stream gathers it: ``(NUMBERS, array)``, ``(LISTS, values,
    offsets)`` or ``(VALUES, python list)``."""
    import pyarrow as pa
    import pyarrow.types as pt

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    if column.null_count == 0:
        if pt.is_integer(kind) or pt.is_floating(kind) or pt.is_boolean(kind):
            array = arrow_numbers(column)
            if _numpy_kind_ok(array):
                return (NUMBERS, array)
        if pt.is_list(kind) or pt.is_large_list(kind):
            child = kind.value_type
            numeric = pt.is_integer(child) or pt.is_floating(child) or pt.is_boolean(child)
            values = column.flatten()
            if numeric and values.null_count == 0:
                array = arrow_numbers(values)
                if _numpy_kind_ok(array):
                    lengths = arrow_numbers(column.value_lengths())
                    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
                    np.cumsum(lengths, out=offsets[1:])
                    return (LISTS, array, offsets)
    return (VALUES, column.to_pylist())


def preload() -> None:
    """Imports what reading and decoding the first block needs: pyarrow, its JSON reader
    (:func:`~datamodules.shards.jsonl.preload`) and its Parquet reader."""
    import pyarrow.types  # noqa: F401

    from datamodules.shards.jsonl import preload as preload_jsonl
    from datamodules.shards.parquet import preload as preload_parquet

    preload_jsonl()
    preload_parquet()


class Block:
    """Consecutive records of one shard, decoded by column (or kept as records).

    Args:
        fields: Field name -> decoded column (see :func:`decode_column`); None for a block
            kept as records.
        n: Rows.
        shard: The shard's number in the stream.
        positions: Each row's position in its shard (for error messages).
        records: The records, for a block that is not decoded by column.
    """

    __slots__ = ("fields", "n", "shard", "positions", "records")

    def __init__(
        self,
        fields: dict[Hashable, tuple] | None,
        n: int,
        shard: int,
        positions: np.ndarray,
        records: list[Any] | None = None,
    ) -> None:
        self.fields, self.n, self.shard = fields, n, shard
        self.positions, self.records = positions, records

    @classmethod
    def from_arrow(cls, table: Any, shard: int, positions: np.ndarray) -> Block:
        """A block of an Arrow record batch or table, its columns decoded."""
        fields = {name: decode_column(table.column(name)) for name in table.column_names}
        return cls(fields, table.num_rows, shard, positions)

    def with_constant(self, key: Hashable, value: Any) -> Block:
        """This block with one more field, the same value in every row (``source_key``)."""
        if self.records is not None:
            for record in self.records:
                record[key] = value
        else:
            assert self.fields is not None
            self.fields[key] = (CONSTANT, value)
        return self

    def take(self, rows: np.ndarray) -> Block:
        """The block of only ``rows`` (ascending), for a worker that reads past unwanted
        records."""
        positions = self.positions[rows]
        if self.records is not None:
            return Block(None, len(rows), self.shard, positions, [self.records[i] for i in rows])
        assert self.fields is not None
        fields = {}
        for key, field in self.fields.items():
            if field[0] == NUMBERS:
                fields[key] = (NUMBERS, field[1][rows])
            elif field[0] == LISTS:
                values, offsets = _gather_lists(field[1], field[2], rows)
                fields[key] = (LISTS, values, offsets)
            elif field[0] == VALUES:
                fields[key] = (VALUES, [field[1][i] for i in rows])
            else:
                fields[key] = field
        return Block(fields, len(rows), self.shard, positions)

    def record(self, row: int) -> Any:
        """Row ``row`` as the record the record path gives."""
        if self.records is not None:
            return self.records[row]
        assert self.fields is not None
        return {key: _python_value(field, row) for key, field in self.fields.items()}


def _python_value(field: tuple, row: int) -> Any:
    if field[0] == NUMBERS:
        return field[1][row].item()
    if field[0] == LISTS:
        values, offsets = field[1], field[2]
        return values[offsets[row] : offsets[row + 1]].tolist()
    if field[0] == VALUES:
        return field[1][row]
    return field[1]


def _gather_lists(
    values: np.ndarray, offsets: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The values of ``rows`` (in that order) laid end to end, and their new offsets."""
    starts, lengths = offsets[rows], offsets[rows + 1] - offsets[rows]
    new = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new[1:])
    index = np.repeat(starts - new[:-1], lengths) + np.arange(new[-1])
    return values[index], new


class Field:
    """One field's values over a :class:`RowStore`'s rows: numbers, or lists of numbers laid
    end to end with each row's start and length, or Python values."""

    def __init__(self, kind: str, rows: int, dtype: Any = None) -> None:
        self.kind = kind
        if kind == NUMBERS:
            self.data: Any = np.zeros(rows, dtype=dtype)
        elif kind == LISTS:
            self.values = np.zeros(1024, dtype=dtype)
            self.fill = 0
            self.starts = np.zeros(rows, dtype=np.int64)
            self.lengths = np.zeros(rows, dtype=np.int64)
        else:
            self.data = [None] * rows

    def grow(self, rows: int) -> None:
        """Room for ``rows`` rows (placeholders past the filled ones)."""
        if self.kind == NUMBERS:
            self.data = np.concatenate(
                [self.data, np.zeros(rows - len(self.data), self.data.dtype)]
            )
        elif self.kind == LISTS:
            extra = rows - len(self.starts)
            self.starts = np.concatenate([self.starts, np.zeros(extra, np.int64)])
            self.lengths = np.concatenate([self.lengths, np.zeros(extra, np.int64)])
        else:
            self.data.extend([None] * (rows - len(self.data)))

    def python(self, row: int) -> Any:
        if self.kind == NUMBERS:
            return self.data[row].item()
        if self.kind == LISTS:
            start = self.starts[row]
            return self.values[start : start + self.lengths[row]].tolist()
        return self.data[row]

    def put(self, field: tuple, at: int, n: int) -> None:
        """Rows ``[at, at + n)`` from a block's decoded column (a kind that fits)."""
        if self.kind == NUMBERS:
            self._fit_dtype(field[1].dtype)
            self.data[at : at + n] = field[1]
        elif self.kind == LISTS:
            values, offsets = field[1], field[2]
            self._fit_dtype(values.dtype)
            if self.fill + len(values) > len(self.values):
                size = max(2 * len(self.values), self.fill + len(values))
                grown = np.zeros(size, dtype=self.values.dtype)
                grown[: self.fill] = self.values[: self.fill]
                self.values = grown
            self.values[self.fill : self.fill + len(values)] = values
            self.starts[at : at + n] = offsets[:-1] + self.fill
            self.lengths[at : at + n] = offsets[1:] - offsets[:-1]
            self.fill += len(values)
        elif field[0] == CONSTANT:
            self.data[at : at + n] = [field[1]] * n
        else:
            self.data[at : at + n] = [_python_value(field, i) for i in range(n)]

    def _fit_dtype(self, dtype: Any) -> None:
        arena = self.data if self.kind == NUMBERS else self.values
        wide = np.result_type(arena.dtype, dtype)
        if wide != arena.dtype:  # another shard's dtype: widen, as the record path would
            if self.kind == NUMBERS:
                self.data = self.data.astype(wide)
            else:
                self.values = self.values.astype(wide)

    def to_python(self, rows: int) -> None:
        """Turns the field into Python values (another kind of column came for it)."""
        data = [self.python(i) for i in range(rows)]
        self.kind, self.data = VALUES, data

    def compact(self, keep: np.ndarray) -> None:
        """Keeps only the rows ``keep`` (ascending), renumbered ``0, 1, ...``."""
        if self.kind == NUMBERS:
            self.data = self.data[keep]
        elif self.kind == LISTS:
            offsets = np.zeros(len(keep) + 1, dtype=np.int64)
            np.cumsum(self.lengths[keep], out=offsets[1:])
            starts = self.starts[keep]
            index = np.repeat(starts - offsets[:-1], self.lengths[keep]) + np.arange(offsets[-1])
            self.values = self.values[index]
            self.fill = int(offsets[-1])
            self.starts = offsets[:-1].copy()
            self.lengths = self.lengths[keep]
        else:
            self.data = [self.data[i] for i in keep.tolist()]


def _kind_of(field: tuple) -> str:
    return VALUES if field[0] == CONSTANT else field[0]


class RowStore:
    """A worker's records, decoded by field, for the rows its shuffle buffer may still emit.

    The worker numbers its records ``0, 1, ...`` in reading order and the shuffle buffer holds
    those numbers (*positions*); blocks are added in that order. Each field is one array over
    the rows (or a list), so a batch is one fancy index per field, whichever blocks its
    records came from. A position finds its row through a small table (4 bytes a position
    still covered). Once half the rows (and at least 4,096) have been emitted, the live ones
    are copied together: a shuffle buffer's stragglers, which live for several buffers' worth
    of draws, then keep only their own rows, not every row read since.
    """

    def __init__(self) -> None:
        self._origin = 0  # position of _row_of[0]
        self._span = 0  # positions covered by _row_of
        self._row_of = np.zeros(0, dtype=np.int32)  # position - origin -> row, or -1
        self._rows = 0  # rows filled
        self._dead = 0  # rows emitted since the last compaction
        self._capacity = 0
        self._fields: dict[Hashable, Field] = {}
        self._schemas: dict[tuple, int] = {}
        self._keys: list[tuple] = []
        self._schema = np.zeros(0, dtype=np.int32)  # per row; -1: a record (not columns)
        self._alive = np.zeros(0, dtype=bool)
        self._shard = np.zeros(0, dtype=np.int64)
        self._position = np.zeros(0, dtype=np.int64)  # in its shard
        self._at = np.zeros(0, dtype=np.int64)  # its position here
        self._records: dict[int, Any] = {}

    def _grow(self, rows: int) -> None:
        if rows <= self._capacity:
            return
        size = max(rows, 2 * self._capacity, 4096)
        extra = size - self._capacity
        self._schema = np.concatenate([self._schema, np.full(extra, -1, np.int32)])
        self._alive = np.concatenate([self._alive, np.zeros(extra, bool)])
        self._shard = np.concatenate([self._shard, np.zeros(extra, np.int64)])
        self._position = np.concatenate([self._position, np.zeros(extra, np.int64)])
        self._at = np.concatenate([self._at, np.zeros(extra, np.int64)])
        for field in self._fields.values():
            field.grow(size)
        self._capacity = size

    def _cover(self, start: int, n: int) -> None:
        """Rows ``rows, rows + 1, ...`` for the positions ``[start, start + n)``."""
        if not self._span and not self._rows:
            self._origin = start
        lo, hi = start - self._origin, start - self._origin + n
        if hi > len(self._row_of):
            grown = np.full(max(hi, 2 * len(self._row_of), 4096), -1, dtype=np.int32)
            grown[: self._span] = self._row_of[: self._span]
            self._row_of = grown
        self._row_of[self._span : lo] = -1
        self._row_of[lo:hi] = np.arange(self._rows, self._rows + n, dtype=np.int32)
        self._span = hi

    def add(self, block: Block, start: int) -> None:
        """Adds a block whose first row is record ``start`` (blocks come in reading order)."""
        n = block.n
        self._cover(start, n)
        at = self._rows
        self._grow(at + n)
        self._alive[at : at + n] = True
        self._shard[at : at + n] = block.shard
        self._position[at : at + n] = block.positions
        self._at[at : at + n] = np.arange(start, start + n)
        if block.fields is None:
            self._schema[at : at + n] = -1
            for i, record in enumerate(block.records or ()):
                self._records[start + i] = record
        else:
            keys = tuple(block.fields)
            sid = self._schemas.setdefault(keys, len(self._schemas))
            if sid == len(self._keys):
                self._keys.append(keys)
            self._schema[at : at + n] = sid
            for key, field in block.fields.items():
                arena = self._fields.get(key)
                if arena is None:
                    dtype = field[1].dtype if field[0] in (NUMBERS, LISTS) else None
                    arena = self._fields[key] = Field(_kind_of(field), self._capacity, dtype)
                elif arena.kind != _kind_of(field) and arena.kind != VALUES:
                    arena.to_python(at)
                arena.put(field, at, n)
        self._rows = at + n

    def _index(self, positions: Sequence[int]) -> np.ndarray:
        """The rows of ``positions``."""
        return self._row_of[np.asarray(positions, dtype=np.int64) - self._origin].astype(np.int64)

    def where(self, position: int) -> tuple[int, int]:
        """``(shard, position in the shard)`` of a record."""
        row = int(self._row_of[position - self._origin])
        return int(self._shard[row]), int(self._position[row])

    def record(self, position: int) -> Any:
        """The record at a relative position, as the record path gives it."""
        if position in self._records:
            return self._records[position]
        row = int(self._row_of[position - self._origin])
        keys = self._keys[int(self._schema[row])]
        return {key: self._fields[key].python(row) for key in keys}

    def release(self, positions: Sequence[int]) -> None:
        """Records emitted (or read but not wanted): their rows go at the next compaction."""
        rows = self._index(positions)
        self._alive[rows] = False
        self._dead += len(rows)
        if self._records:
            for position in np.asarray(positions).tolist():
                self._records.pop(position, None)
        if self._dead >= 4096 and 2 * self._dead >= self._rows:
            self._compact()

    def _compact(self) -> None:
        """Copies the live rows together, in order, and renumbers them."""
        keep = np.flatnonzero(self._alive[: self._rows])
        for field in self._fields.values():
            field.compact(keep)
        for name in ("_schema", "_alive", "_shard", "_position", "_at"):
            setattr(self, name, getattr(self, name)[keep])
        at = self._at
        end = self._origin + self._span
        origin = int(at[0]) if len(keep) else end
        self._row_of = np.full(end - origin, -1, dtype=np.int32)
        self._row_of[at - origin] = np.arange(len(keep), dtype=np.int32)
        self._origin, self._span = origin, end - origin
        self._rows = self._capacity = len(keep)
        self._dead = 0

    def __len__(self) -> int:
        return self._rows
