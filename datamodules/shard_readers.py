"""Record readers for data shards: JSONL, text, CSV and Parquet, local or remote.

A *shard* is one file of records. This module turns shards into records and knows how many
records each holds, which is what :class:`~datamodules.stream_dataset.ShardedStream` needs to
deliver every record exactly once:

* :func:`expand_files` turns a glob, a directory or a list of paths/URLs into a list of shards.
* :func:`index_shard` / :func:`index_shards` count the records of a shard (Parquet from its
  footer, line formats by one pass over the lines) and remember where every ``every``-th
  record starts, so a reader can seek to record ``i`` without reading the records before it.
  The result is cached on disk, keyed by path, size and modification time (ETag or
  Last-Modified for URLs), so each shard is scanned once.
* :func:`read_records` yields the records ``[start, stop)`` of a shard.

Formats, chosen by extension (``.gz`` / ``.zst`` compression allowed for the line formats):

* ``.jsonl`` / ``.ndjson``: one JSON value per line; blank lines are not records.
* ``.txt``: one record per line, the line without its line break (blank lines are records).
* ``.csv``: one dict per row, keyed by the header row; every value is a string; blank lines are
  not records; quoted fields may span lines.
* ``.parquet``: one dict per row, read a row group at a time (never the whole file).

Remote shards go through fsspec (``http(s)://``, ``s3://`` with s3fs installed, ...).

Bad records (invalid JSON or UTF-8, a CSV row with the wrong number of fields) raise
:class:`RecordError` naming the shard and the line. With ``on_error="skip"`` they are skipped
instead and left out of the count, so counting and reading always agree; the index lists
them and a :class:`SkipCounter` collects them for a report. A shard that cannot be opened or
decoded raises :class:`ShardError`; under ``"skip"`` it is reported and holds no records.
"""

from __future__ import annotations

import csv
import glob
import gzip
import hashlib
import io
import json
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from itertools import islice
from operator import itemgetter
from pathlib import Path
from typing import IO, Any, Literal

__all__ = [
    "FORMATS",
    "RecordError",
    "ShardError",
    "ShardIndex",
    "SkipCounter",
    "count_records",
    "detect_format",
    "expand_files",
    "index_shard",
    "index_shards",
    "read_records",
]

OnError = Literal["raise", "skip"]
FORMATS = ("jsonl", "txt", "csv", "parquet")
_EXTENSIONS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".txt": "txt",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}
_COMPRESSIONS = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd"}
_INDEX_VERSION = 1
_EVERY = 1024  # a seek offset is kept for every 1024th record
_BUFFER = 1 << 20
_KEEP_MESSAGES = 20


class RecordError(ValueError):
    """A record (or a whole shard) that cannot be read; the message names shard and line.

    ``RecordError(message)`` with a single argument is accepted too (that is how the
    DataLoader re-raises an error from a worker process, keeping its type).

    Attributes:
        shard: Path or URL of the shard.
        line: 1-based line number where the bad record starts (None for the whole shard).
        reason: What is wrong.
    """

    def __init__(self, shard: str, line: int | None = None, reason: str | None = None) -> None:
        self.shard, self.line, self.reason = shard, line, reason
        if reason is None:  # a ready message
            super().__init__(shard)
            return
        where = f"{shard}: line {line}" if line is not None else shard
        super().__init__(f"{where}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across worker processes
        return (type(self), (self.shard, self.line, self.reason))


class ShardError(RecordError):
    """A shard that cannot be opened, decompressed or parsed as a whole."""


def _check_on_error(on_error: str) -> None:
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error={on_error!r} is not accepted: use 'raise' or 'skip'.")


class SkipCounter:
    """Counts the records skipped under ``on_error="skip"``, per shard, for a report.

    Args:
        keep: How many messages to keep (the counts are always complete).
    """

    def __init__(self, keep: int = _KEEP_MESSAGES) -> None:
        self.keep = keep
        self.counts: dict[str, int] = {}
        self.unreadable: dict[str, str] = {}
        self.messages: list[str] = []
        self._lock = threading.Lock()

    def record(self, shard: str, line: int | None, reason: str) -> None:
        """Notes one skipped record (``line=None``: the whole shard was unreadable)."""
        with self._lock:
            if line is None:
                self.unreadable[shard] = reason
            else:
                self.counts[shard] = self.counts.get(shard, 0) + 1
            if len(self.messages) < self.keep:
                self.messages.append(str(RecordError(shard, line, reason)))

    def add_index(self, index: ShardIndex) -> None:
        """Adds what indexing a shard found (its skipped records, or that it was unreadable)."""
        with self._lock:
            if index.error is not None:
                self.unreadable[index.path] = index.error
            if index.skipped:
                self.counts[index.path] = self.counts.get(index.path, 0) + index.skipped
            room = self.keep - len(self.messages)
            msgs = ([index.error] if index.error else []) + list(index.problems)
            self.messages.extend(msgs[: max(room, 0)])

    @property
    def total(self) -> int:
        """Number of skipped records over all shards."""
        return sum(self.counts.values())

    def summary(self) -> str:
        """One line per shard with skipped records, then the first messages."""
        if not self.counts and not self.unreadable:
            return "no records skipped"
        lines = [f"skipped {self.total} bad record(s) in {len(self.counts)} shard(s)"]
        if self.unreadable:
            lines[0] += f" and {len(self.unreadable)} unreadable shard(s)"
        lines += [f"  {shard}: {n}" for shard, n in sorted(self.counts.items())]
        lines += [f"  {shard}: unreadable" for shard in sorted(self.unreadable)]
        lines += [f"  e.g. {m}" for m in self.messages]
        return "\n".join(lines)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


# ---------------------------------------------------------------------------- paths


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _local(path: str) -> str:
    return os.path.expanduser(path[len("file://") :] if path.startswith("file://") else path)


def detect_format(path: str, fmt: str | None = None) -> tuple[str, str | None]:
    """Returns ``(format, compression)`` of a shard from its extension.

    Args:
        path: Path or URL; a query string (``?...``) is ignored.
        fmt: Force the format (one of :data:`FORMATS`); compression is still inferred.

    Raises:
        ValueError: The extension (or ``fmt``) is not one of the supported formats.
    """
    name = str(path).split("?", 1)[0].lower()
    compression = None
    for ext, comp in _COMPRESSIONS.items():
        if name.endswith(ext):
            compression, name = comp, name[: -len(ext)]
            break
    if fmt is None:
        fmt = next((f for ext, f in _EXTENSIONS.items() if name.endswith(ext)), None)
        if fmt is None:
            raise ValueError(
                f"cannot tell the format of shard {path!r} from its extension: use one of "
                f"{', '.join(_EXTENSIONS)} (optionally + .gz or .zst), or pass fmt=."
            )
    elif fmt not in FORMATS:
        raise ValueError(f"fmt={fmt!r} is not accepted: use one of {FORMATS}.")
    if fmt == "parquet" and compression is not None:
        raise ValueError(f"shard {path!r}: Parquet compresses internally; drop the {compression}.")
    return fmt, compression


def _has_magic(spec: str) -> bool:
    return any(c in spec for c in "*?[")


def expand_files(spec: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str]:
    """Turns a shard specification into a list of shard paths/URLs.

    Args:
        spec: A path or URL; a glob (``"data/*.jsonl"``, ``"s3://b/train-*.parquet"``; local
            globs may use ``**``); a local directory (its files with a supported extension);
            or a list of any of those. Globs and directories expand sorted; a list keeps its
            order.

    Returns:
        The shards, each once.

    Raises:
        ValueError: Nothing matched, or a shard is listed twice (it would be read twice).
    """
    items = [spec] if isinstance(spec, (str, os.PathLike)) else list(spec)
    out: list[str] = []
    for item in items:
        item = os.fspath(item)
        if _is_remote(item):
            if _has_magic(item):
                import fsspec

                fs, _, paths = fsspec.get_fs_token_paths(item)
                found = sorted(fs.unstrip_protocol(p) if "://" not in p else p for p in paths)
            else:
                found = [item]
        else:
            local = _local(item)
            if _has_magic(local):
                found = sorted(p for p in glob.glob(local, recursive=True) if os.path.isfile(p))
            elif os.path.isdir(local):
                found = sorted(
                    str(p) for p in Path(local).rglob("*") if p.is_file() and _known(str(p))
                )
            else:
                found = [local]
        if not found:
            raise ValueError(f"no shard matches {item!r}.")
        out.extend(found)
    if not out:
        raise ValueError(f"no shards given: {spec!r}.")
    seen: set[str] = set()
    for path in out:
        key = path if _is_remote(path) else os.path.abspath(path)
        if key in seen:
            raise ValueError(f"shard {path!r} is listed twice; its records would be read twice.")
        seen.add(key)
    return out


def _known(path: str) -> bool:
    try:
        detect_format(path)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------- opening


def _open_binary(path: str, offset: int = 0) -> IO[bytes]:
    """Opens a shard for binary reading at ``offset`` (seeks when it can, else skips bytes)."""
    if not _is_remote(path):
        f = open(_local(path), "rb", buffering=_BUFFER)  # noqa: SIM115
        if offset:
            f.seek(offset)
        return f
    import fsspec

    fs, fpath = fsspec.core.url_to_fs(path)
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    is_http = bool({"http", "https"} & set(protocols))
    if offset == 0 and is_http:  # one streaming GET rather than a range request per block
        return io.BufferedReader(fs.open(fpath, "rb", block_size=0), _BUFFER)
    f = fs.open(fpath, "rb")
    if offset:
        try:
            f.seek(offset)
            f.read(1)
            f.seek(offset)
        except (ValueError, OSError):  # the server does not serve byte ranges: stream and skip
            f.close()
            f = fs.open(fpath, "rb", block_size=0) if is_http else fs.open(fpath, "rb")
            left = offset
            while left:
                chunk = f.read(min(left, _BUFFER))
                if not chunk:
                    break
                left -= len(chunk)
    return io.BufferedReader(f, _BUFFER)


def _decompress(raw: IO[bytes], compression: str | None) -> IO[bytes]:
    if compression is None:
        return raw
    if compression == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    try:
        import zstandard
    except ImportError as err:
        raise ImportError("reading .zst shards needs `pip install zstandard`.") from err
    reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    return io.BufferedReader(reader, _BUFFER)


class _Lines:
    """Binary lines of a (possibly compressed) shard, tracking byte offsets and line numbers.

    While a line is being handled, ``start`` is its byte offset, ``pos`` the offset of the
    next line and ``line`` its 1-based number.
    """

    def __init__(self, path: str, compression: str | None, offset: int = 0, line: int = 0):
        self.path = path
        try:
            self.raw = _open_binary(path, offset)
            self.f = _decompress(self.raw, compression)
        except Exception as err:
            raise ShardError(
                path, None, f"cannot open shard ({type(err).__name__}: {err})"
            ) from err
        self.start = self.pos = offset
        self.line = line

    def __iter__(self) -> Iterator[bytes]:
        try:
            for raw in self.f:
                self.start = self.pos
                self.pos += len(raw)
                self.line += 1
                yield raw
        except RecordError:
            raise
        except Exception as err:  # a corrupt or truncated stream, a dropped connection
            raise ShardError(
                self.path,
                self.line + 1,
                f"cannot read shard past this line ({type(err).__name__}: {err})",
            ) from err

    def close(self) -> None:
        self.f.close()
        self.raw.close()


# ---------------------------------------------------------------------------- parsing
# A reader's first ``check`` records are consumed without being yielded: they belong to
# another reader, which handles their errors, so under "raise" they are only told apart
# structurally, without parsing.


def _bad(path: str, line: int, reason: str, on_error: str, counter: SkipCounter | None) -> None:
    if on_error == "raise":
        raise RecordError(path, line, reason)
    if counter is not None:
        counter.record(path, line, reason)


def _json_reason(err: ValueError) -> str:
    if isinstance(err, json.JSONDecodeError):
        return f"invalid JSON: {err.msg} at character {err.pos + 1}"
    return f"invalid JSON: {err}"


def _decoded(lines: _Lines, bad: list[tuple[int, str]]) -> Iterator[str]:
    for raw in lines:
        try:  # a byte-order mark may open the file
            yield raw.decode("utf-8-sig" if lines.start == 0 else "utf-8")
        except UnicodeDecodeError as err:
            bad.append((lines.line, f"invalid UTF-8: {err}"))
            yield "\n"


def _csv(
    lines: _Lines,
    on_error: str,
    counter: SkipCounter | None,
    check: int = 0,
    header: list[str] | None = None,
):
    """CSV rows as dicts; the first non-blank row is the header unless ``header`` is given."""
    bad: list[tuple[int, str]] = []
    reader = csv.reader(_decoded(lines, bad))
    while True:
        line, offset = lines.line + 1, lines.pos  # csv.reader never reads ahead of a row
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            _bad(lines.path, line, f"malformed CSV: {err}", on_error, counter)
            continue
        if bad:
            _bad(lines.path, *bad.pop(), on_error, counter)
            continue
        if not row:
            continue
        if header is None:
            header = row
            continue
        if len(row) != len(header):
            reason = f"expected {len(header)} fields (as in the header), found {len(row)}"
            _bad(lines.path, line, reason, on_error, counter)
            continue
        if check:
            check -= 1
            continue
        yield line, offset, dict(zip(header, row, strict=False))


def _csv_header(path: str, compression: str | None) -> list[str] | None:
    lines = _Lines(path, compression)
    try:
        bad: list[tuple[int, str]] = []
        for row in csv.reader(_decoded(lines, bad)):
            if bad:
                raise RecordError(path, bad[0][0], f"header: {bad[0][1]}")
            if row:
                return row
        return None
    finally:
        lines.close()


_DECODE = json.JSONDecoder().decode
_BOM = b"\xef\xbb\xbf"
_third = itemgetter(2)


def _read_jsonl(lines: _Lines, on_error: str, counter: SkipCounter | None, check: int = 0):
    """JSONL records (blank lines are not records); line numbers only, for errors."""
    path, decode, line = lines.path, _DECODE, lines.line
    try:
        for line, raw in enumerate(lines.f, lines.line + 1):  # noqa: B007
            if line == 1 and raw.startswith(_BOM):
                raw = raw[3:]
            if raw.isspace() or not raw:
                continue
            if check and on_error == "raise":
                check -= 1
                continue
            try:
                rec = decode(raw.decode())
            except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
                _bad(path, line, _json_reason(err), on_error, counter)
                continue
            if check:
                check -= 1
                continue
            yield rec
    except RecordError:
        raise
    except Exception as err:  # a corrupt or truncated stream, a dropped connection
        raise ShardError(path, line + 1, f"cannot read shard past this line ({err!r})") from err


def _read_txt(lines: _Lines, on_error: str, counter: SkipCounter | None, check: int = 0):
    """Text records: each line without its line break."""
    path, line = lines.path, lines.line
    try:
        for line, raw in enumerate(lines.f, lines.line + 1):  # noqa: B007
            if check and on_error == "raise":
                check -= 1
                continue
            if line == 1 and raw.startswith(_BOM):
                raw = raw[3:]
            try:
                text = raw.decode()
            except UnicodeDecodeError as err:
                _bad(path, line, f"invalid UTF-8: {err}", on_error, counter)
                continue
            if check:
                check -= 1
                continue
            if text.endswith("\n"):
                text = text[:-2] if text.endswith("\r\n") else text[:-1]
            yield text
    except RecordError:
        raise
    except Exception as err:
        raise ShardError(path, line + 1, f"cannot read shard past this line ({err!r})") from err


# ---------------------------------------------------------------------------- index


@dataclass(frozen=True)
class ShardIndex:
    """How many records a shard holds and where to seek to reach one.

    Attributes:
        path: Path or URL of the shard.
        fmt: Its format (one of :data:`FORMATS`).
        compression: ``"gzip"``, ``"zstd"`` or None.
        on_error: The policy the count was made under: under ``"skip"`` bad records are not
            counted (nor read), under ``"raise"`` every structural record is counted.
        count: Number of records a reader yields under ``on_error``.
        every: Seek granularity: ``offsets[i]`` is the byte offset of record ``i * every``
            (0 and empty offsets when the shard cannot seek: compressed, Parquet).
        offsets: Byte offsets, see ``every``.
        lines: 1-based line number of each offset, for error messages.
        skipped: Bad records left out of the count (``on_error="skip"``).
        problems: The first few of those, as messages naming shard and line.
        error: Why the shard could not be read (``on_error="skip"`` only; ``count`` is 0).
    """

    path: str
    fmt: str
    compression: str | None
    on_error: str
    count: int
    every: int = 0
    offsets: tuple[int, ...] = ()
    lines: tuple[int, ...] = ()
    skipped: int = 0
    problems: tuple[str, ...] = ()
    error: str | None = None


def default_cache_dir() -> str:
    """``$DATAMODULES_CACHE`` or ``$XDG_CACHE_HOME/datamodules`` (``~/.cache/datamodules``)."""
    root = os.environ.get("DATAMODULES_CACHE")
    if root:
        return os.path.join(root, "shard_index")
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "datamodules", "shard_index")


_MEMO: dict[str, ShardIndex] = {}
_VALIDATORS = (
    "ETag",
    "etag",
    "md5Hash",
    "LastModified",
    "Last-Modified",
    "last_modified",
    "updated",
    "mtime",
    "generation",
)


def _fingerprint(path: str) -> dict[str, Any] | None:
    """What identifies this version of the shard; None if it cannot be told apart."""
    if not _is_remote(path):
        st = os.stat(_local(path))
        return {"path": os.path.abspath(_local(path)), "size": st.st_size, "mtime": st.st_mtime_ns}
    import fsspec

    fs, fpath = fsspec.core.url_to_fs(path)
    info = fs.info(fpath)
    found = {k: str(info[k]) for k in _VALIDATORS if info.get(k)}
    if not found or info.get("size") is None:
        return None
    return {"path": path, "size": info["size"], **found}


def index_shard(
    path: str,
    fmt: str | None = None,
    on_error: OnError = "raise",
    cache_dir: str | os.PathLike | bool | None = None,
    counter: SkipCounter | None = None,
) -> ShardIndex:
    """Counts the records of one shard and notes seek offsets; cached, so done once.

    Args:
        path: Path or URL of the shard.
        fmt: Format; inferred from the extension if None.
        on_error: ``"raise"``: a structural count (lines, rows) without parsing, and an
            unreadable shard raises. ``"skip"``: records are parsed so bad ones are left out
            of the count (as the reader will skip them); an unreadable shard counts 0.
        cache_dir: Where to keep the index; None: :func:`default_cache_dir`; False: nowhere
            (an in-process memo is still used).
        counter: Receives the skipped records / unreadable shard, also when cached.

    Returns:
        The shard's :class:`ShardIndex`.

    Raises:
        ShardError: The shard cannot be read (``on_error="raise"``).
        RecordError: A bad CSV row under ``"raise"`` (CSV rows are parsed while counting,
            so they fail here, early; JSONL and text records fail when read).
    """
    _check_on_error(on_error)
    fmt, compression = detect_format(path, fmt)
    mode = on_error if fmt != "parquet" else "raise"
    try:
        fp = _fingerprint(path)
    except Exception as err:  # missing file, no such URL, no permission
        return _unreadable(path, fmt, compression, on_error, err, counter)
    key = None
    if fp is not None:
        fp.update(fmt=fmt, compression=compression, on_error=mode, version=_INDEX_VERSION)
        key = hashlib.sha1(json.dumps(fp, sort_keys=True).encode()).hexdigest()
        index = _MEMO.get(key) or _load_cached(key, cache_dir, path)
        if index is not None:
            _MEMO[key] = index
            if counter is not None:
                counter.add_index(index)
            return index
    try:
        index = _scan(path, fmt, compression, mode)
    except ShardError as err:
        return _unreadable(path, fmt, compression, on_error, err, counter)
    if key is not None:
        _MEMO[key] = index
        _store_cached(key, cache_dir, index)
    if counter is not None:
        counter.add_index(index)
    return index


def _unreadable(path, fmt, compression, on_error, err, counter) -> ShardIndex:
    if isinstance(err, ShardError):
        shard_err = err
    else:
        shard_err = ShardError(path, None, f"cannot read shard ({type(err).__name__}: {err})")
    if on_error == "raise":
        raise shard_err from err
    index = ShardIndex(path, fmt, compression, on_error, 0, error=str(shard_err))
    if counter is not None:
        counter.add_index(index)
    return index


def _cache_file(key: str, cache_dir: Any) -> str | None:
    if cache_dir is False:
        return None
    root = default_cache_dir() if cache_dir in (None, True) else os.fspath(cache_dir)
    return os.path.join(root, key[:2], key + ".json")


def _load_cached(key: str, cache_dir: Any, path: str) -> ShardIndex | None:
    file = _cache_file(key, cache_dir)
    if file is None or not os.path.exists(file):
        return None
    try:
        with open(file) as f:
            data = json.load(f)
        data["path"] = path
        for name in ("offsets", "lines", "problems"):
            data[name] = tuple(data[name])
        return ShardIndex(**data)
    except (OSError, ValueError, TypeError):
        return None


def _store_cached(key: str, cache_dir: Any, index: ShardIndex) -> None:
    file = _cache_file(key, cache_dir)
    if file is None:
        return
    try:
        os.makedirs(os.path.dirname(file), exist_ok=True)
        tmp = f"{file}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as f:
            json.dump(asdict(index), f)
        os.replace(tmp, file)
    except OSError:  # a read-only cache is only slower
        pass


def _scan_lines(lines: _Lines, fmt: str, on_error: str, skips: SkipCounter):
    """Yields ``(line, offset)`` of each JSONL / text record, as the readers will see them:
    under "raise" structurally (JSONL: non-blank lines), under "skip" only the valid ones."""
    for raw in lines:
        if lines.line == 1 and raw.startswith(_BOM):
            raw = raw[3:]
        if fmt == "jsonl":
            if raw.isspace() or not raw:
                continue
            if on_error == "skip":
                try:
                    _DECODE(raw.decode())
                except ValueError as err:
                    skips.record(lines.path, lines.line, _json_reason(err))
                    continue
        elif on_error == "skip":
            try:
                raw.decode()
            except UnicodeDecodeError as err:
                skips.record(lines.path, lines.line, f"invalid UTF-8: {err}")
                continue
        yield lines.line, lines.start


def _scan(path: str, fmt: str, compression: str | None, on_error: str) -> ShardIndex:
    if fmt == "parquet":
        with _parquet_file(path) as pf:
            count = pf.metadata.num_rows
        return ShardIndex(path, fmt, None, "raise", count)
    skips = SkipCounter(keep=_KEEP_MESSAGES)
    every = _EVERY if compression is None else 0
    offsets: list[int] = []
    line_nos: list[int] = []
    count = 0
    lines = _Lines(path, compression)
    try:
        if fmt == "csv":  # rows may span lines: parse
            records = ((line, offset) for line, offset, _ in _csv(lines, on_error, skips))
        else:
            records = _scan_lines(lines, fmt, on_error, skips)
        for line, offset in records:
            if every and count % every == 0:
                offsets.append(offset)
                line_nos.append(line)
            count += 1
    finally:
        lines.close()
    return ShardIndex(
        path,
        fmt,
        compression,
        on_error,
        count,
        every=every if offsets else 0,
        offsets=tuple(offsets),
        lines=tuple(line_nos),
        skipped=skips.total,
        problems=tuple(skips.messages),
    )


def count_records(
    path: str,
    fmt: str | None = None,
    on_error: OnError = "raise",
    cache_dir: str | os.PathLike | bool | None = None,
) -> int:
    """Number of records :func:`read_records` yields from the shard (see :func:`index_shard`)."""
    return index_shard(path, fmt, on_error, cache_dir).count


def index_shards(
    paths: Sequence[str],
    fmt: str | None = None,
    on_error: OnError = "raise",
    cache_dir: str | os.PathLike | bool | None = None,
    counter: SkipCounter | None = None,
    max_threads: int = 8,
) -> list[ShardIndex]:
    """:func:`index_shard` for many shards, a few at a time (remote shards overlap I/O)."""
    threads = max(1, min(max_threads, len(paths)))
    if threads == 1:
        return [index_shard(p, fmt, on_error, cache_dir, counter) for p in paths]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda p: index_shard(p, fmt, on_error, cache_dir, counter), paths))


# ---------------------------------------------------------------------------- reading


class _parquet_file:
    """Context manager: a pyarrow ParquetFile over a local path or an fsspec file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.handle: Any = None

    def __enter__(self) -> Any:
        import pyarrow.parquet as pq

        try:
            if _is_remote(self.path):
                self.handle = _open_seekable_remote(self.path)
                return pq.ParquetFile(self.handle)
            return pq.ParquetFile(_local(self.path))
        except Exception as err:
            if self.handle is not None:
                self.handle.close()
            raise ShardError(
                self.path, None, f"cannot open Parquet shard ({type(err).__name__}: {err})"
            ) from err

    def __exit__(self, *exc: Any) -> None:
        if self.handle is not None:
            self.handle.close()


def _open_seekable_remote(path: str) -> IO[bytes]:
    """A random-access remote file; if the server ignores byte ranges, a local spooled copy
    (on disk past 64 MiB, so memory stays bounded)."""
    import tempfile

    import fsspec

    fs, fpath = fsspec.core.url_to_fs(path)
    f = fs.open(fpath, "rb")
    try:
        size = f.size
        if size:
            f.seek(max(size - 8, 0))
            f.read(8)
            f.seek(0)
        return f
    except (ValueError, OSError):
        f.close()
    spool = tempfile.SpooledTemporaryFile(max_size=64 << 20)  # noqa: SIM115
    with fs.open(fpath, "rb", block_size=0) as src:
        while chunk := src.read(_BUFFER):
            spool.write(chunk)
    spool.seek(0)
    return spool  # type: ignore[return-value]


def _read_parquet(path: str, start: int, stop: int | None, columns: Sequence[str] | None):
    with _parquet_file(path) as pf:
        meta = pf.metadata
        stop = meta.num_rows if stop is None else min(stop, meta.num_rows)
        if start >= stop:
            return
        first, row = 0, 0
        groups = []
        for g in range(meta.num_row_groups):
            n = meta.row_group(g).num_rows
            if row + n > start and row < stop:
                if not groups:
                    first = row
                groups.append(g)
            row += n
        skip, left = start - first, stop - start
        try:
            for batch in pf.iter_batches(
                batch_size=4096, row_groups=groups, columns=columns, use_threads=False
            ):
                if skip >= batch.num_rows:
                    skip -= batch.num_rows
                    continue
                if skip or batch.num_rows - skip > left:
                    batch = batch.slice(skip, left)
                    skip = 0
                left -= batch.num_rows
                yield from batch.to_pylist()
                if left <= 0:
                    return
        except ShardError:
            raise
        except Exception as err:
            raise ShardError(
                path, None, f"cannot read Parquet row groups ({type(err).__name__}: {err})"
            ) from err


def read_records(
    path: str,
    fmt: str | None = None,
    on_error: OnError = "raise",
    start: int = 0,
    stop: int | None = None,
    index: ShardIndex | None = None,
    counter: SkipCounter | None = None,
    columns: Sequence[str] | None = None,
) -> Iterator[Any]:
    """Yields the records ``[start, stop)`` of a shard, reading only what it must.

    Record ``i`` is the ``i``-th record a full read yields under ``on_error`` (so under
    ``"skip"`` bad records do not take a position). With an ``index`` from
    :func:`index_shard` a reader of an uncompressed line format seeks close to ``start``;
    Parquet skips whole row groups; compressed shards decompress from the beginning.

    Args:
        path: Path or URL.
        fmt: Format; inferred from the extension if None.
        on_error: ``"raise"`` or ``"skip"`` bad records.
        start: First record.
        stop: One past the last record (None: to the end).
        index: The shard's index (same ``on_error``), for seeking.
        counter: Receives skipped records.
        columns: Parquet only: the columns to read (None: all).

    Yields:
        dicts (JSON objects, CSV rows, Parquet rows), any JSON value, or strings (text).

    Raises:
        RecordError: A bad record under ``"raise"``.
        ShardError: The shard cannot be opened or decoded.
    """
    _check_on_error(on_error)
    fmt, compression = detect_format(path, fmt)
    if start < 0 or (stop is not None and stop < start):
        raise ValueError(f"read_records({path!r}): bad range start={start}, stop={stop}.")
    if stop == start:
        return
    if fmt == "parquet":
        yield from _read_parquet(path, start, stop, columns)
        return
    if index is not None and index.on_error != on_error:
        raise ValueError(
            f"the index of {path!r} was made with on_error={index.on_error!r}, not "
            f"{on_error!r}; the record positions differ."
        )
    offset, line, skip = 0, 0, start
    header = None
    if index is not None and index.every and start >= index.every and index.offsets:
        slot = min(start // index.every, len(index.offsets) - 1)
        offset, line = index.offsets[slot], index.lines[slot] - 1
        skip = start - slot * index.every
        if fmt == "csv":
            header = _csv_header(path, compression)
    lines = _Lines(path, compression, offset, line)
    try:
        n = None if stop is None else stop - start
        if fmt == "csv":
            yield from islice(map(_third, _csv(lines, on_error, counter, skip, header)), n)
        else:
            reader = _read_jsonl if fmt == "jsonl" else _read_txt
            yield from islice(reader(lines, on_error, counter, skip), n)
    finally:
        lines.close()
