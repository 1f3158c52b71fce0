"""Dataset indexes: one file beside the shards that says what each holds, so setup reads no shard.

The format is webdataset's ``wids`` shard index, so ``wids.ShardListDataset(path)`` reads ours
and we read one that ``widsindex`` wrote::

    {"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": "train",
     "shardlist": [{"url": "train-000000.tar", "nsamples": 1000, "filesize": 52428800}, ...],
     "datamodules": {"version": 1, "records": ...}}

``url`` is relative to the index file's location (wids resolves it against the index's
directory); a ``base_path`` (or ``widsindex``'s ``base``) key names another base. Our extra
keys, which wids ignores, let a reader start inside a shard without reading up to there:
``every`` / ``offsets`` (and ``lines`` for line formats: the byte offset and line of every
``every``-th record), ``bad_offsets`` / ``skipped`` / ``problems`` (records left out under
``on_error="skip"``), ``columns`` (Parquet) and ``format`` (when the extension does not say).
Counts are made by parsing every record, so an entry without ``skipped`` holds the same
records under ``on_error="raise"`` and ``"skip"``.

Seek offsets are kept within a budget of :data:`SEEK_BUDGET` numbers per index (spread over
the shards), so an index of a million shards stays as small as wids' (a reader then starts a
shard's first piece from its beginning: one shard per worker and epoch).

* :func:`write_dataset_index`: shard indexes -> ``*.index.json`` (atomic).
* :func:`parse_dataset_index`: an index's bytes -> a :class:`ShardTable` of its shards.
* :class:`ShardTable`: shard indexes kept as columns (paths, counts), each
  :class:`~datamodules.shards.shard_index.ShardIndex` made only when asked, so that setup over
  a million shards builds a million objects of nobody's.
"""

from __future__ import annotations

import bisect
import json
import os
import posixpath
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter, methodcaller
from typing import Any
from urllib.parse import urlparse, urlunparse

from datamodules.core.gc_pause import paused_gc
from datamodules.remote.files import is_remote, local_path
from datamodules.shards.formats import TABLE_FORMATS, detect_format
from datamodules.shards.shard_index import ShardIndex

__all__ = [
    "KIND",
    "SEEK_BUDGET",
    "ShardTable",
    "dataset_index_json",
    "is_index_spec",
    "parse_dataset_index",
    "resolve_url",
    "shard_formats",
    "write_dataset_index",
]

KIND = "wids-shard-index-v1"
#: Our key at the top of an index (wids ignores it): ``{"version": 1, "records": N}``.
OURS = "datamodules"
VERSION = 1
#: Seek offsets (and line numbers) kept over a whole index, spread over its shards.
SEEK_BUDGET = 1 << 20
#: Problems (bad records) kept per shard entry.
PROBLEMS = 5
#: Keys of a wids entry that are not ours.
_WIDS_KEYS = {"url", "nsamples", "filesize", "md5sum", "name", "weight", "dataset", "source_url"}
#: What makes a URL not simply appended to its base: a scheme, an absolute path, ``.`` / ``..``.
_NOT_SIMPLE = (":", "//", "\\", "/.", "\n.", "\n/")


def is_index_spec(spec: str) -> bool:
    """Whether a file spec names dataset index files (``*.json``; shards never are)."""
    return str(spec).split("?", 1)[0].lower().endswith(".json")


# ---------------------------------------------------------------------------- writing


def _relative(shard: str, index_dir: str) -> str:
    """A shard's URL in an index written into ``index_dir``: relative for a local shard."""
    if is_remote(shard):
        return shard
    rel = os.path.relpath(os.path.abspath(local_path(shard)), os.path.abspath(index_dir))
    return rel.replace(os.sep, "/")


def _entry(shard: ShardIndex, url: str, keep: int) -> dict[str, Any]:
    """One shard's entry: wids' three keys, then ours."""
    entry: dict[str, Any] = {"url": url, "nsamples": shard.count, "filesize": shard.size}
    try:
        implied = detect_format(url)
    except ValueError:
        implied = None
    if implied != (shard.fmt, shard.compression):
        entry["format"] = shard.fmt
        if shard.compression:
            entry["compression"] = shard.compression
    offsets, lines, every = list(shard.offsets), list(shard.lines), shard.every
    if every and len(offsets) > keep:  # within the index's budget: every step-th of them
        step = -(-len(offsets) // max(keep, 1))
        offsets, lines, every = offsets[::step], lines[::step], every * step
    if every and keep >= 2 and len(offsets) > 1:
        entry["every"], entry["offsets"] = every, offsets
        if lines:
            entry["lines"] = lines
    if shard.bad_offsets:
        entry["bad_offsets"] = list(shard.bad_offsets)
    if shard.skipped:
        entry["skipped"] = shard.skipped
        prefix = f"{shard.path}: "
        entry["problems"] = [
            [where[len(prefix) :] if where.startswith(prefix) else where, why]
            for where, why in shard.problems[:PROBLEMS]
        ]
    if shard.columns:
        entry["columns"] = list(shard.columns)
    return entry


def dataset_index_json(
    shards: Sequence[ShardIndex], index_path: str | os.PathLike, name: str | None = None
) -> dict[str, Any]:
    """The index of ``shards`` to be written at ``index_path`` (URLs relative to it).

    Raises:
        ValueError: A shard could not be read (its index holds an error) or has no size.
    """
    index_dir = os.path.dirname(os.path.abspath(os.fspath(index_path)))
    keep = SEEK_BUDGET // max(len(shards), 1)
    entries = []
    for shard in shards:
        if shard.error is not None:
            raise ValueError(f"shard {shard.path!r} cannot be indexed: {shard.error}")
        if shard.size is None:
            raise ValueError(f"shard {shard.path!r}: its size is not known.")
        entries.append(_entry(shard, _relative(shard.path, index_dir), keep))
    if name is None:
        name = os.path.basename(os.fspath(index_path)).split(".", 1)[0]
    return {
        "__kind__": KIND,
        "wids_version": 1,
        "name": name,
        "shardlist": entries,
        OURS: {"version": VERSION, "records": sum(s.count for s in shards)},
    }


def write_dataset_index(
    path: str | os.PathLike, shards: Sequence[ShardIndex], name: str | None = None
) -> str:
    """Writes the dataset index of ``shards`` to ``path`` (renamed into place when whole);
    returns the path. ``name`` defaults to the file name up to its first dot."""
    path = os.fspath(path)
    data = dataset_index_json(shards, path, name)
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, separators=(",", ":"))
        f.write("\n")
    os.replace(tmp, path)
    return path


# ---------------------------------------------------------------------------- reading


def urldir(url: str) -> str:
    """The directory of a URL or path, as wids takes it (``wids_specs.urldir``)."""
    parsed = urlparse(url)
    return parsed._replace(path=os.path.dirname(parsed.path)).geturl()


def resolve_url(base: str, url: str) -> str:
    """``url`` resolved against ``base`` as wids does (``wids_specs.urlmerge``): an absolute
    URL or path stays, a relative one is joined to ``base``'s path and normalised."""
    parsed_base, parsed = urlparse(base), urlparse(url)
    if parsed.scheme and len(parsed.scheme) > 1:  # a URL of its own (not a Windows drive)
        return url
    if parsed.path.startswith("/"):
        path = parsed.path
    else:
        path = posixpath.normpath(posixpath.join(parsed_base.path, parsed.path))
    return urlunparse(
        (
            parsed_base.scheme,
            parsed_base.netloc,
            path,
            parsed.params,
            parsed.query,
            parsed.fragment,
        )
    )


def _base(spec: str, doc: dict[str, Any]) -> str:
    """Where the index's relative URLs start: its ``base_path`` / ``base``, else its folder."""
    here = urldir(spec)
    given = doc.get("base_path") or doc.get("base")
    if isinstance(given, str) and given:
        return given if "://" in given or given.startswith("/") else resolve_url(here, given)
    return here


def _loads(data: bytes) -> Any:
    try:
        import orjson
    except ImportError:  # the streaming extra brings it; json is slower, not different
        return json.loads(data)
    return orjson.loads(data)


def parse_dataset_index(
    data: bytes,
    spec: str,
    fmt: str | None = None,
    on_error: str = "raise",
) -> ShardTable:
    """The shards a dataset index lists, as a :class:`ShardTable`.

    Args:
        data: The index file's bytes.
        spec: Where it was read from (a path or URL): relative URLs resolve against it.
        fmt: Force the format of every shard (None: from each URL's extension).
        on_error: How the shards will be read; an entry with bad records (``skipped``) needs
            ``"skip"``.

    Raises:
        ValueError: Not a wids shard index (naming the file and what it lacks), an entry
            without ``url`` / ``nsamples``, or bad records under ``on_error="raise"``.
    """
    with paused_gc():
        return _parse(data, spec, fmt, on_error)


def _parse(data: bytes, spec: str, fmt: str | None, on_error: str) -> ShardTable:
    try:
        doc = _loads(data)
    except ValueError as err:
        raise ValueError(f"dataset index {spec}: not JSON ({err}).") from None
    kind = doc.get("__kind__") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or (kind != KIND and "wids_version" not in doc):
        raise ValueError(
            f"{spec} is not a dataset index: a .json file in *_files must be a wids shard "
            f'index ({{"__kind__": "{KIND}", "wids_version": 1, "shardlist": [...]}}), as '
            "write_shards and `python -m datamodules index` write it."
        )
    if doc.get("datasets"):
        raise ValueError(
            f"dataset index {spec} lists sub-datasets ('datasets'): give each of their "
            "indexes as a Source(files=...) instead."
        )
    entries = doc.get("shardlist")
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"dataset index {spec} lists no shards ('shardlist' is empty).")
    # Column by column, in C loops (map, itemgetter): a million entries in well under a second.
    try:
        urls = list(map(itemgetter("url"), entries))
        counts = list(map(itemgetter("nsamples"), entries))
        if set(map(type, counts)) != {int} or min(counts) < 0 or set(map(type, urls)) != {str}:
            raise TypeError
    except (KeyError, TypeError):
        bad = next(
            k
            for k, e in enumerate(entries)
            if not isinstance(e, dict)
            or not isinstance(e.get("url"), str)
            or type(e.get("nsamples")) is not int
            or e["nsamples"] < 0
        )
        raise ValueError(
            f"dataset index {spec}: shard entry {bad} needs 'url' (a string) and 'nsamples' "
            f"(a count): {entries[bad]!r}."
        ) from None
    sizes = list(map(methodcaller("get", "filesize"), entries))
    ours = isinstance(doc.get(OURS), dict)
    extras: list[dict[str, Any] | None] = []
    if max(map(len, entries)) > 3:  # keys beyond wids' three: ours, kept per shard
        extras = [e if len(e) > 3 and not _WIDS_KEYS.issuperset(e) else None for e in entries]
    base = _base(spec if is_remote(spec) else local_path(spec), doc)
    del entries, doc
    paths = _resolve_all(base, urls)
    table = _IndexColumns(spec, paths, counts, sizes, extras, fmt, on_error, counted_only=not ours)
    flagged = [k for k, extra in enumerate(table.extras) if extra and extra.get("skipped")]
    if flagged and on_error == "raise":
        extra = table.extras[flagged[0]]
        assert extra is not None
        problems = "; ".join(f"{w}: {why}" for w, why in extra.get("problems", ())[:1])
        raise ValueError(
            f"dataset index {spec}: shard {paths[flagged[0]]} holds {extra['skipped']} bad "
            f"record(s) ({problems}): read it with on_error='skip', or fix the shard and "
            "index it again."
        )
    return ShardTable(paths, counts, table.make, flagged)


def _resolve_all(base: str, urls: list[str]) -> list[str]:
    """Every URL resolved against ``base``: a plain prefix when every one is simple (no
    scheme, not absolute, no ``.`` segment), else one by one as wids does."""
    if base in ("", "."):
        prefix = ""
    else:
        parsed = urlparse(base)
        norm = posixpath.normpath(parsed.path) if parsed.path else ""
        prefix = parsed._replace(path=norm).geturl().rstrip("/") + "/"
    blob = "\n".join(urls)
    if not blob.startswith((".", "/")) and not any(mark in blob for mark in _NOT_SIMPLE):
        return [prefix + u for u in urls]
    return [resolve_url(base, u) for u in urls]


class _IndexColumns:
    """The columns of one index file and how to make shard ``k``'s ShardIndex from them."""

    def __init__(
        self,
        spec: str,
        paths: list[str],
        counts: list[int],
        sizes: list[Any],
        extras: list[dict[str, Any] | None],
        fmt: str | None,
        on_error: str,
        counted_only: bool,
    ) -> None:
        self.spec, self.paths, self.counts, self.sizes = spec, paths, counts, sizes
        self.extras = extras
        self.fmt, self.on_error, self.counted_only = fmt, on_error, counted_only
        self._columns: dict[tuple[str, ...], tuple[str, ...]] = {}

    def make(self, k: int) -> ShardIndex:
        path = self.paths[k]
        extra = self.extras[k] if self.extras else None
        size = self.sizes[k]
        size = int(size) if isinstance(size, (int, float)) else None
        if extra is None:
            fmt, compression = detect_format(path, self.fmt)
            return ShardIndex(
                path, fmt, compression, self.on_error, self.counts[k], size=size,
                listed_in=self.spec, counted_only=self.counted_only,
            )  # fmt: skip
        fmt, compression = detect_format(path, self.fmt or extra.get("format"))
        compression = extra.get("compression", compression) if fmt not in TABLE_FORMATS else None
        offsets = tuple(extra.get("offsets") or ())
        problems = tuple((f"{path}: {w}", why) for w, why in extra.get("problems") or ())
        columns = tuple(extra.get("columns") or ())
        return ShardIndex(
            path,
            fmt,
            compression,
            self.on_error,
            self.counts[k],
            every=int(extra.get("every") or 0) if offsets else 0,
            offsets=offsets,
            lines=tuple(extra.get("lines") or ()),
            skipped=int(extra.get("skipped") or 0),
            problems=problems,
            size=size,
            columns=self._columns.setdefault(columns, columns),
            bad_offsets=tuple(extra.get("bad_offsets") or ()),
            listed_in=self.spec,
            counted_only=self.counted_only,
        )


# ---------------------------------------------------------------------------- ShardTable


class ShardTable(Sequence[ShardIndex]):
    """Shard indexes kept as columns; each :class:`ShardIndex` is made when asked for.

    Args:
        paths: Each shard's path or URL.
        counts: Each shard's records.
        make: ``k -> ShardIndex`` of shard ``k``.
        flagged: The shards with bad records left out or that could not be read.
    """

    def __init__(
        self,
        paths: list[str],
        counts: list[int],
        make: Callable[[int], ShardIndex],
        flagged: Sequence[int] = (),
    ) -> None:
        if len(paths) != len(counts):
            raise ValueError(f"{len(paths)} paths but {len(counts)} counts.")
        self.paths, self.counts, self._make = paths, counts, make
        self.flagged = list(flagged)

    @classmethod
    def of(cls, shards: Sequence[ShardIndex]) -> ShardTable:
        """A table of ready shard indexes."""
        if isinstance(shards, ShardTable):
            return shards
        shards = list(shards)
        flagged = [k for k, s in enumerate(shards) if s.skipped or s.error is not None]
        return cls([s.path for s in shards], [s.count for s in shards], shards.__getitem__, flagged)

    @classmethod
    def join(cls, parts: Sequence[ShardTable]) -> ShardTable:
        """The tables one after the other."""
        parts = [p for p in parts if len(p)]
        if len(parts) == 1:
            return parts[0]
        joined = _Joined(parts)
        paths = [path for part in parts for path in part.paths]
        counts = [n for part in parts for n in part.counts]
        flagged = [
            start + k
            for part, start in zip(parts, joined.starts[:-1], strict=True)
            for k in part.flagged
        ]
        return cls(paths, counts, joined, flagged)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self._make(i) for i in range(*k.indices(len(self)))]
        n = len(self.paths)
        if k < 0:
            k += n
        if not 0 <= k < n:
            raise IndexError(f"shard {k} of {n}")
        return self._make(k)

    def __iter__(self) -> Iterator[ShardIndex]:
        return map(self._make, range(len(self.paths)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (ShardTable, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ShardTable({len(self)} shards, {sum(self.counts)} records)"


class _Joined:
    """``k -> ShardIndex`` over tables one after the other (picklable, unlike a closure)."""

    def __init__(self, parts: Sequence[ShardTable]) -> None:
        self.parts = list(parts)
        self.starts = [0]
        for part in self.parts:
            self.starts.append(self.starts[-1] + len(part))

    def __call__(self, k: int) -> ShardIndex:
        p = bisect.bisect_right(self.starts, k) - 1
        return self.parts[p][k - self.starts[p]]


def _suffix(path: str) -> str:
    name = path.rsplit("/", 1)[-1].split("?", 1)[0]
    return name.split(".", 1)[1] if "." in name else ""


def shard_formats(shards: Sequence[ShardIndex]) -> set[str]:
    """The formats of ``shards`` (of a large :class:`ShardTable`: one shard per extension)."""
    if not isinstance(shards, ShardTable) or len(shards) <= 4096:
        return {s.fmt for s in shards}
    first: dict[str, int] = {}
    for k, path in enumerate(shards.paths):
        first.setdefault(_suffix(path), k)
    return {shards[k].fmt for k in first.values()}
