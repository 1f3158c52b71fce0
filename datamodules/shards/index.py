"""Counting the records of shards and remembering where to seek, cached on disk.

:func:`index_shard` / :func:`index_shards` count the records of a shard (Parquet from its
footer, Arrow IPC from its record batches' lengths, line formats by one pass over the lines,
tar by one over the member headers) and note the byte offset of every ``every``-th record,
so a reader can seek to record ``i`` without reading the records before it. The result
(:class:`ShardIndex`) is cached on disk, keyed by path, size and modification time (ETag or
Last-Modified for URLs), so each shard is scanned once per machine; an in-process memo avoids
even that file read. A remote shard's index is also remembered by its URL alone and trusted at
setup without a request: its version is checked when a reader opens it
(:mod:`datamodules.remote.versions`), and a changed shard has that entry dropped.
:func:`remember` keeps an index another rank made.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

from datamodules.core.skipped import Skipped
from datamodules.remote.files import is_remote
from datamodules.remote.listing import cache_root, file_version
from datamodules.remote.retrying import RemoteOptions
from datamodules.remote.versions import expect
from datamodules.shards.arrow import arrow_shape
from datamodules.shards.delimited import DELIMITERS, csv_rows
from datamodules.shards.errors import OnError, ShardError, check_on_error
from datamodules.shards.formats import TABLE_FORMATS, detect_format
from datamodules.shards.jsonl import json_reason, parse_line
from datamodules.shards.lines import BOM, LOST, ShardLines, is_blank, stop_at_damage
from datamodules.shards.parquet import parquet_file
from datamodules.shards.shard_index import ShardIndex
from datamodules.shards.tar import scan_tar

__all__ = [
    "count_records",
    "default_cache_dir",
    "index_from_json",
    "index_shard",
    "index_shards",
    "remember",
    "scan_lines",
    "trusted_index_file",
]

_INDEX_VERSION = 6  # 2: size and version of the file; 3: blank .txt lines are not records;
# 4: nor are CSV / TSV lines of only whitespace; 5: a tar without its end-of-archive blocks is
# damaged, tar members decode as webdataset does; 6: the records of a compressed line shard
# before its damage are counted, and where a damaged shard stops is kept (``damage``)
_EVERY = 1024  # a seek offset is kept for every 1024th record


# ---------------------------------------------------------------------------- index


def default_cache_dir() -> str:
    """``$DATAMODULES_CACHE/shard_index`` or ``~/.cache/datamodules/shard_index``."""
    return cache_root("shard_index")


_MEMO: dict[str, ShardIndex] = {}


def index_shard(
    path: str,
    fmt: str | None = None,
    on_error: OnError = "raise",
    cache_dir: str | os.PathLike | bool | None = None,
    counter: Skipped | None = None,
    options: RemoteOptions | None = None,
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
        options: How a remote shard is opened: storage options, retries, timeout.

    Returns:
        The shard's :class:`ShardIndex`.

    Raises:
        ShardError: The shard cannot be read (``on_error="raise"``).
        RecordError: A bad CSV row or tar record under ``"raise"`` (both are parsed while
            counting, so they fail here, early; JSONL and text records fail when read).
    """
    check_on_error(on_error)
    fmt, compression = detect_format(path, fmt)
    mode = on_error if fmt not in TABLE_FORMATS else "raise"
    trusted = _trusted_file(path, fmt, compression, mode, cache_dir)
    if trusted is not None:  # a remote shard indexed before: no request (checked when opened)
        index = _load_file(trusted, path)
        if index is not None and index.version is not None:
            if counter is not None:
                counter.add(index.path, index.skipped, index.problems, index.error)
            return index
    try:
        fp = file_version(path, options)
    except Exception as err:  # missing file, no such URL, no permission
        return _unreadable(path, fmt, compression, on_error, err, counter)
    key = None
    if fp is not None:
        identity = {"version": json.dumps(fp, sort_keys=True), "size": int(fp["size"])}
        key = _version_key(fp, fmt, compression, mode)
        index = _MEMO.get(key) or _load_cached(key, cache_dir, path)
        if index is not None:
            _MEMO[key] = index
            if trusted is not None:
                _store_file(trusted, index)
            if counter is not None:
                counter.add(index.path, index.skipped, index.problems, index.error)
            return index
    expect(path, None)  # what a reader expected of an older version does not bind the scan
    try:
        index = _scan(path, fmt, compression, mode, options)
    except ShardError as err:
        return _unreadable(path, fmt, compression, on_error, err, counter)
    if key is not None:
        index = dataclasses.replace(index, **identity)
        _MEMO[key] = index
        _store_cached(key, cache_dir, index)
        if trusted is not None:
            _store_file(trusted, index)
    if counter is not None:
        counter.add(index.path, index.skipped, index.problems, index.error)
    return index


def _version_key(fp: dict[str, Any], fmt: str, compression: str | None, mode: str) -> str:
    """The cache key of one version of a shard (its path, size and mtime or ETag), indexed
    for ``fmt`` / ``compression`` / ``mode``."""
    keyed = dict(fp, fmt=fmt, compression=compression, on_error=mode, version=_INDEX_VERSION)
    return hashlib.sha1(json.dumps(keyed, sort_keys=True).encode()).hexdigest()


def _trusted_file(
    path: str, fmt: str, compression: str | None, mode: str, cache_dir: Any
) -> str | None:
    """Where the index of a remote shard is remembered by its URL alone (None: local shards,
    which a ``stat`` identifies for free, or no disk cache)."""
    if not is_remote(path):
        return None
    keyed = {"url": path, "fmt": fmt, "compression": compression, "on_error": mode}
    key = hashlib.sha1(json.dumps(dict(keyed, version=_INDEX_VERSION)).encode()).hexdigest()
    file = _cache_file(key, cache_dir)
    return None if file is None else os.path.join(os.path.dirname(file), "url-" + key + ".json")


def trusted_index_file(index: ShardIndex, cache_dir: Any = None) -> str | None:
    """The cache file that remembers a remote shard's index by URL, trusted at setup without a
    request: a reader that finds the shard changed deletes it (see
    :mod:`datamodules.remote.versions`)."""
    return _trusted_file(index.path, index.fmt, index.compression, index.on_error, cache_dir)


def remember(index: ShardIndex, cache_dir: str | os.PathLike | bool | None = None) -> None:
    """Keeps an index made elsewhere (by another rank) in this machine's cache, as if this
    process had scanned the shard: under its version, and for a remote shard by its URL."""
    if index.version is None or index.error is not None:
        return
    try:
        fp = json.loads(index.version)
    except ValueError:
        return
    key = _version_key(fp, index.fmt, index.compression, index.on_error)
    _MEMO[key] = index
    _store_cached(key, cache_dir, index)
    trusted = trusted_index_file(index, cache_dir)
    if trusted is not None:
        _store_file(trusted, index)


def _unreadable(path, fmt, compression, on_error, err, counter) -> ShardIndex:
    if isinstance(err, ShardError):
        shard_err = err
    else:
        shard_err = ShardError(path, None, f"cannot read shard ({type(err).__name__}: {err})")
    if on_error == "raise":
        raise shard_err from err
    index = ShardIndex(path, fmt, compression, on_error, 0, error=str(shard_err))
    if counter is not None:
        counter.add(index.path, index.skipped, index.problems, index.error)
    return index


def _cache_file(key: str, cache_dir: Any) -> str | None:
    if cache_dir is False:
        return None
    root = default_cache_dir() if cache_dir in (None, True) else os.fspath(cache_dir)
    return os.path.join(root, key[:2], key + ".json")


def _load_cached(key: str, cache_dir: Any, path: str) -> ShardIndex | None:
    file = _cache_file(key, cache_dir)
    return None if file is None else _load_file(file, path)


def _load_file(file: str, path: str) -> ShardIndex | None:
    if not os.path.exists(file):
        return None
    try:
        with open(file) as f:
            return index_from_json(json.load(f), path)
    except (OSError, ValueError, TypeError):
        return None


def index_from_json(data: dict[str, Any], path: str | None = None) -> ShardIndex:
    """A :class:`ShardIndex` from its JSON form (``dataclasses.asdict``), named ``path``.

    Raises:
        TypeError: Not such a form.
    """
    data = dict(data)
    if path is not None:
        data["path"] = path
    for name in ("offsets", "lines", "columns", "bad_offsets"):
        data[name] = tuple(data.get(name, ()))
    data["problems"] = tuple(tuple(pair) for pair in data.get("problems", ()))
    return ShardIndex(**data)


def _store_cached(key: str, cache_dir: Any, index: ShardIndex) -> None:
    file = _cache_file(key, cache_dir)
    if file is not None:
        _store_file(file, index)


def _store_file(file: str, index: ShardIndex) -> None:
    try:
        os.makedirs(os.path.dirname(file), exist_ok=True)
        tmp = f"{file}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as f:
            json.dump(asdict(index), f)
        os.replace(tmp, file)
    except OSError:  # a read-only cache is only slower
        pass


def scan_lines(lines: ShardLines, fmt: str, on_error: str, skips: Skipped):
    """Yields ``(line, offset)`` of each JSONL / text record, as the readers will see them:
    under "raise" structurally (non-blank lines), under "skip" only the valid ones."""
    for raw in lines:
        if lines.line == 1 and raw.startswith(BOM):
            raw = raw[3:]
        if is_blank(raw):  # a blank line is not a record (JSONL and text)
            continue
        if fmt == "jsonl":
            if on_error == "skip":
                try:
                    parse_line(raw)
                except ValueError as err:
                    skips.record(lines.path, lines.line, json_reason(err, raw))
                    continue
        elif on_error == "skip":
            try:
                raw.decode()
            except UnicodeDecodeError as err:
                skips.record(lines.path, lines.line, f"invalid UTF-8: {err}")
                continue
        yield lines.line, lines.start


def _scan(
    path: str,
    fmt: str,
    compression: str | None,
    on_error: str,
    options: RemoteOptions | None = None,
) -> ShardIndex:
    if fmt == "parquet":
        with parquet_file(path, options) as pf:
            count = pf.metadata.num_rows
            names = tuple(pf.schema_arrow.names)
        return ShardIndex(path, fmt, None, "raise", count, columns=names)
    if fmt == "arrow":
        count, names = arrow_shape(path, options)
        return ShardIndex(path, fmt, None, "raise", count, columns=names)
    if fmt == "tar":
        return scan_tar(path, compression, on_error, options)
    skips = Skipped()
    every = _EVERY if compression is None else 0
    offsets: list[int] = []
    line_nos: list[int] = []
    count = 0
    damage = None
    lines = ShardLines(path, compression, options=options)
    try:
        if fmt in DELIMITERS:  # rows may span lines: parse
            rows = csv_rows(lines, on_error, skips, delimiter=DELIMITERS[fmt])
            records = ((line, offset) for line, offset, _ in rows)
        else:
            records = scan_lines(lines, fmt, on_error, skips)
        for line, offset in records:
            if every and count % every == 0:
                offsets.append(offset)
                line_nos.append(line)
            count += 1
    except ShardError as error:  # damaged past a line: under "skip" the records before stand
        if not stop_at_damage(error, on_error, skips):
            raise
        damage = f"{error}; {LOST}"
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
        skipped=skips.records,
        problems=tuple(skips),
        damage=damage,
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
    counter: Skipped | None = None,
    max_threads: int = 8,
    options: RemoteOptions | None = None,
) -> list[ShardIndex]:
    """:func:`index_shard` for many shards, a few at a time (remote shards overlap I/O)."""
    threads = max(1, min(max_threads, len(paths)))
    if threads == 1:
        return [index_shard(p, fmt, on_error, cache_dir, counter, options) for p in paths]
    with ThreadPoolExecutor(threads) as pool:
        return list(
            pool.map(lambda p: index_shard(p, fmt, on_error, cache_dir, counter, options), paths)
        )
