"""A stream's splits: listing and indexing their shards, plain or as weighted sources.

:class:`ShardSplits` is a part that the stream DataModules
(:class:`~datamodules.StreamingDataModule`, :class:`~datamodules.ImageTextDataModule`) hold, with
its own state. ``setup`` lists
each split's shards (globs, directories, URLs; ``storage_options`` reach fsspec) and indexes
them once (record counts and seek offsets, cached on disk). A dataset index file
(``*.index.json``, :mod:`~datamodules.shards.dataset_index`) among them gives its shards'
counts and offsets without reading any shard. Under DDP, ``setup(stage)`` is collective, as
the Trainer calls it on every rank: each shard is scanned by one rank and the results shared
(:mod:`~datamodules.shards.shared_indexing`), and a remote index file is fetched once per node.
A split given as a list of :class:`~datamodules.Source` (each source's files may be shards,
globs or dataset index files) keeps, beside its flat shard list, each source's shards
(:attr:`ShardSplits.mixes`) and its :class:`~datamodules.core.mixture.Mixture`: the records
each source gives per epoch (:meth:`ShardSplits.quotas`). A checkpoint's mix is continued by
:mod:`~datamodules.stream_parts.mix_resume`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from lightning.pytorch.utilities.rank_zero import rank_zero_warn

from datamodules.core.mixture import MixEntry, Mixture, Source
from datamodules.core.skipped import Skipped
from datamodules.remote.listing import expand_files as list_files
from datamodules.remote.retrying import RemoteOptions
from datamodules.shards.dataset_index import ShardTable, is_index_spec, parse_dataset_index
from datamodules.shards.formats import TABLE_FORMATS, expand_files
from datamodules.shards.index import ShardIndex, index_shards
from datamodules.shards.shared_indexing import (
    gather,
    index_shards_shared,
    process_group,
    read_index_file,
)
from datamodules.stream_engine.mixing import StreamSource
from datamodules.stream_parts.mix_resume import MixResume

__all__ = ["SPLITS", "STAGE_SPLITS", "ShardSplits", "SplitSource", "SplitsFingerprint"]

SPLITS = ("train", "val", "test")
STAGE_SPLITS = {
    "fit": ("train", "val"),
    "validate": ("val",),
    "test": ("test",),
    "predict": ("test", "val"),
}


@dataclass(frozen=True)
class SplitSource:
    """One source of a mixed split, once indexed.

    Attributes:
        source: The :class:`~datamodules.Source` as given.
        shards: Positions of its shards in the split's shard list.
        records: Its records.
        hidden: A source removed from the mix since the checkpoint this run resumed, read
            only to end the epoch that checkpoint interrupted.
    """

    source: Source
    shards: tuple[int, ...]
    records: int
    hidden: bool = False

    def engine(self) -> StreamSource:
        """What the stream engine needs of it."""
        return StreamSource(self.source.label, self.shards)

    def entry(self, shards: ShardTable, weighted: bool) -> MixEntry:
        """What a :class:`~datamodules.core.mixture.Mixture` needs of it."""
        listing = [[shards.paths[k], shards.counts[k]] for k in self.shards]
        s = self.source
        weight, repeat = (s.weight, s.repeat) if weighted else (None, None)
        return MixEntry(s.label, weight, repeat, self.records, listing, self.hidden)


def _paths(part: Any) -> list[str]:
    return part.paths if isinstance(part, ShardTable) else part


class ShardSplits:
    """The splits of a stream: their files, shards, sources and mixtures (a part the stream
    DataModules hold).

    Args:
        owner: The DataModule's name, for messages.
        files: Per split, the checked ``*_files`` (a list of paths, of Sources, or None).
        remote: The remote read options.
        fmt: Force the format of every shard (None: from the extension).
        on_error: ``"raise"`` or ``"skip"`` bad records and unreadable shards.
        columns: Parquet only: the columns to read (None: all).
        index_cache: Where shard indexes are cached (see :mod:`datamodules.shards.index`).
        epoch_size: With weighted train Sources: records per epoch over all ranks.
        skipped: Where shards and records left out while indexing are counted.
        count_records: ``path -> records`` of a custom reader (None: the built-in formats).
    """

    def __init__(
        self,
        owner: str,
        files: dict[str, Any],
        *,
        remote: RemoteOptions,
        fmt: str | None,
        on_error: str,
        columns: list[str] | None,
        index_cache: Any,
        epoch_size: int | None,
        skipped: Skipped,
        count_records: Callable[[str], int] | None = None,
    ) -> None:
        self.owner, self.files, self.remote = owner, files, remote
        self.fmt, self.on_error, self.columns = fmt, on_error, columns
        self.index_cache, self.epoch_size, self.skipped = index_cache, epoch_size, skipped
        self.count_records = count_records
        #: Shard indexes per split, once indexed (``setup``); an empty table: no such split.
        self.shards: dict[str, ShardTable] = {}
        #: Per mixed split, its sources once indexed (shards, records).
        self.mixes: dict[str, list[SplitSource]] = {}
        #: Per mixed split, its records per source and epoch (see :meth:`quotas`).
        self.mixtures: dict[str, Mixture] = {}
        #: How a checkpoint's train mix continues (:mod:`~datamodules.stream_parts.mix_resume`).
        self.mix_resume = MixResume()
        #: True while ``setup(stage)`` runs: indexing may then be shared by the ranks.
        self._collective = False
        self._fingerprint_due = False
        self._fingerprint: str | None = None

    def setup(self, stage: str | None = None) -> None:
        """Lists and indexes the shards of the splits ``stage`` needs (every split for None).

        Each split is indexed once per DataModule (and each shard once per machine, through
        the index cache); later calls return at once. A dataset index file among the files
        is read instead of its shards. Under DDP, ``setup(stage)`` with a stage is
        collective (the Trainer calls it on every rank): each shard is scanned by one rank
        and the indexes shared; ``setup()`` without a stage indexes on this rank alone.

        Raises:
            ValueError: A ``*_files`` argument matches nothing, the train shards hold no
                records, or (``on_error="raise"``) a shard cannot be read or a CSV row is bad.
        """
        splits = STAGE_SPLITS.get(stage or "", SPLITS)
        if stage is None or process_group() is None:
            for split in splits:
                self._index(split)
            return
        # Every rank takes the same collective steps: which splits some rank still needs.
        needed = gather(lambda: [s for s in splits if s not in self.shards])
        todo = [s for s in splits if any(s in need for need in needed)]
        self._collective = True
        try:
            for split in todo:
                self.shards.pop(split, None)
                self.mixes.pop(split, None)
                self._index(split)
        finally:
            self._collective = False

    def _list(self, given: Any, name: str) -> list[Any]:
        """The shards of a ``*_files`` value in order, as parts: lists of paths to index, and
        :class:`ShardTable` s of the dataset index files among them."""
        items = [given] if isinstance(given, (str, os.PathLike)) else list(given)
        parts: list[Any] = []
        plain: list[str] = []
        try:
            for item in items:
                text = os.fspath(item)
                if not is_index_spec(text):
                    plain.append(text)
                    continue
                if plain:
                    parts.append(expand_files(plain, self.remote))
                    plain = []
                for spec in list_files(text, self.remote, what="dataset index"):
                    parts.append(self._read_index(spec))
            if plain:
                parts.append(expand_files(plain, self.remote))
        except ValueError as err:
            raise ValueError(f"{name}={given!r}: {err}") from err
        return parts

    def _read_index(self, spec: str) -> ShardTable:
        data = read_index_file(spec, self.remote, self.index_cache, self._collective)
        return parse_dataset_index(data, spec, self.fmt, self.on_error)

    def _index_parts(self, parts: list[Any], name: str) -> ShardTable:
        """Indexes the listed parts (a dataset index's shards are known already) and joins
        them into one table, refusing a shard listed twice."""
        tables = []
        for part in parts:
            if isinstance(part, ShardTable):
                tables.append(part)
                for k in part.flagged:
                    index = part[k]
                    self.skipped.add(index.path, index.skipped, index.problems, index.error)
            else:
                tables.append(ShardTable.of(self.index_paths(part, name)))
        shards = ShardTable.join(tables)
        if len(tables) > 1 and len(set(shards.paths)) != len(shards.paths):
            seen: set[str] = set()
            twice = next(p for p in shards.paths if p in seen or seen.add(p))
            raise ValueError(f"{name}: shard {twice!r} is listed twice; its records would be "
                             "read twice.")  # fmt: skip
        return shards

    def index_paths(self, paths: list[str], name: str) -> list[ShardIndex]:
        if self.count_records is not None:
            count = self.count_records
            return [ShardIndex(p, "custom", None, self.on_error, count(p)) for p in paths]
        counter = Skipped()
        if self._collective and process_group() is not None:  # one rank scans each shard
            shards = index_shards_shared(
                paths, self.fmt, self.on_error, self.index_cache, counter, self.remote
            )
        else:
            shards = index_shards(
                paths, self.fmt, self.on_error, self.index_cache, counter, options=self.remote
            )
        if counter.counts or counter.unreadable:
            for index in shards:
                self.skipped.add(index.path, index.skipped, index.problems, index.error)
            rank_zero_warn(f"{self.owner} {name}: {counter.summary()}")
        return shards

    def _index(self, split: str) -> ShardTable:
        if split in self.shards:
            return self.shards[split]
        given = self.files[split]
        if given is None:
            self.shards[split] = ShardTable([], [], [].__getitem__)
            return self.shards[split]
        name = f"{split}_files"
        if isinstance(given[0], Source):
            listed = [self._list(source.files, f"{name} ({source.label})") for source in given]
            owned = [[p for part in parts for p in _paths(part)] for parts in listed]
            owner: dict[str, str] = {}
            for source, paths in zip(given, owned, strict=True):
                for path in paths:
                    if path in owner:
                        raise ValueError(
                            f"{name}: shard {path!r} is in the sources {owner[path]!r} and "
                            f"{source.label!r}; give each shard to one source."
                        )
                    owner[path] = source.label
            shards = self._index_parts([p for parts in listed for p in parts], name)
            self.mixes[split] = self._mix(given, owned, shards)
        else:
            shards = self._index_parts(self._list(given, name), name)
        self._check_columns(shards, name)
        total = sum(shards.counts)
        if not total:
            why = _why_empty(shards)
            if split == "train":
                raise ValueError(
                    f"{name}={given!r}: the {len(shards)} shard(s) hold no records{why}."
                )
            rank_zero_warn(
                f"{name}={given!r}: the shard(s) hold no records{why}: no {split} loader."
            )
        self.shards[split] = shards
        if split in self.mixes:
            self._set_mixture(split)
        if split == "train":
            self._fingerprint_due = True  # (see fingerprint)
            self.mix_resume.apply(self)
        return shards

    def add_hidden(self, owing: list[dict[str, Any]], epoch: int) -> None:
        """Indexes sources removed since the checkpoint that still owe records to the epoch it
        interrupted."""
        for s in owing:
            name, listing = s["name"], s.get("listing") or []
            paths = [str(item[0]) for item in listing]
            try:
                found = self.index_paths(paths, f"train_files (source {name!r})")
            except (OSError, ValueError) as err:
                raise ValueError(
                    f"cannot end epoch {epoch} as it was planned: source {name!r}, no longer in "
                    f"train_files, still owes it {s['quota']} record(s), but its shards cannot "
                    f"be read ({err}). Keep its files, or resume from a checkpoint taken at the "
                    "end of an epoch."
                ) from err
            shards = self.shards["train"]
            first = len(shards)
            self.shards["train"] = ShardTable.join([shards, ShardTable.of(found)])
            records = sum(f.count for f in found)
            own = tuple(range(first, first + len(found)))
            source = Source(paths, name=name)
            self.mixes["train"].append(SplitSource(source, own, records, hidden=True))
        self._set_mixture("train")

    def _check_columns(self, shards: list[ShardIndex], name: str) -> None:
        """Refuses ``columns=`` that a Parquet or Arrow shard of the split lacks, naming its
        columns."""
        wanted = self.columns
        if not wanted:
            return
        for shard in shards:
            if shard.fmt not in TABLE_FORMATS or shard.error is not None or not shard.columns:
                continue  # (an index another tool wrote does not list columns)
            missing = [c for c in wanted if c not in shard.columns]
            if missing:
                raise ValueError(
                    f"{name}: columns={wanted!r} names {missing} that {shard.path} lacks; its "
                    f"columns are {list(shard.columns)}."
                )

    def _mix(
        self, given: list[Source], listed: list[list[str]], shards: ShardTable
    ) -> list[SplitSource]:
        position = {p: k for k, p in enumerate(shards.paths)}
        owned = [tuple(position[p] for p in paths) for paths in listed]
        records = [sum(shards.counts[k] for k in own) for own in owned]
        return [SplitSource(s, own, n) for s, own, n in zip(given, owned, records, strict=True)]

    def _set_mixture(self, split: str) -> None:
        """The split's :class:`~datamodules.core.mixture.Mixture` from its sources (evaluation
        splits read every source once)."""
        train = split == "train"
        entries = [m.entry(self.shards[split], train) for m in self.mixes[split]]
        self.mixtures[split] = Mixture(entries, self.epoch_size if train else None)
        if train:
            self.mix_resume.resumed = None

    def mixture(self, split: str) -> Mixture | None:
        """The :class:`~datamodules.core.mixture.Mixture` of a split of Sources (None for
        plain files): for ``"train"`` after a resume, the checkpoint's mix continued."""
        self._index(split)
        if split == "train" and self.mix_resume.resumed is not None:
            return self.mix_resume.resumed
        return self.mixtures.get(split)

    def quotas(self, epoch: int, split: str = "train") -> dict[str, int]:
        """The records each source gives in ``epoch``, by source name (known before training:
        weights or schedules, repeats, ``epoch_size``; evaluation splits read every source once).

        Raises:
            ValueError: The split is not a list of Sources.
        """
        mixture = self.mixture(split)
        if mixture is None:
            raise ValueError(
                f"{split}_files is not a list of Sources: it has no quotas (its records per "
                f"epoch: split_size({split!r}))."
            )
        return mixture.by_name(epoch)

    def source_names(self, split: str) -> list[str]:
        """The names of a split's Sources, in order (the order of the loaders with
        ``eval_per_source=True``); empty for plain files."""
        given = self.files[split]
        if not given or not isinstance(given[0], Source):
            return []
        return [s.label for s in given]

    @property
    def fingerprint(self) -> str | None:
        """What the train split is: its shards, their record counts and the sources' quotas
        (a checkpoint holds it; a resume over other data is refused). Worked out when first
        asked, not in ``setup``: over a million shards it takes a second."""
        if self._fingerprint_due:
            self._fingerprint_due = False
            self._fingerprint = self._train_fingerprint()
        return self._fingerprint

    def _train_fingerprint(self) -> str | None:
        shards = self.shards.get("train")
        if not shards:
            return None
        mix = self.mixes.get("train")
        if mix is not None:  # each source's shards; a resume checks them source by source
            paths, counts = shards.paths, shards.counts
            listing = [
                [m.source.label, [[paths[k], counts[k]] for k in m.shards]]
                for m in mix
                if not m.hidden
            ]
            return "mix-" + hashlib.sha1(json.dumps(listing).encode()).hexdigest()[:12]
        # The text of json.dumps([[path, count], ...]), a million pairs in C loops.
        pairs = map("[{}, {}]".format, map(encode_basestring_ascii, shards.paths), shards.counts)
        return hashlib.sha1(("[" + ", ".join(pairs) + "]").encode()).hexdigest()[:16]

    def split_size(self, split: str, epoch: int = 0) -> int:
        """Records per epoch in ``"train"``, ``"val"`` or ``"test"`` (0 when not given): the
        shards' records, or for mixed sources the sum of their quotas (train: in ``epoch``);
        indexes it."""
        shards = self._index(split)
        mixture = self.mixture(split)
        if mixture is None:
            return sum(shards.counts)
        return mixture.total(epoch if split == "train" else 0)

    def describe(self, what: str = "records") -> list[str]:
        """Per split, its ``what`` (records, pairs) in its shards, as indexed (what
        ``python -m datamodules inspect`` prints of a stream)."""
        lines = ["data:"]
        for split in SPLITS:
            shards = self.shards.get(split) or []
            n = sum(s.count for s in shards)
            lines.append(f"  {split}: {n} {what} in {len(shards)} shard(s)")
        return lines

    def mixes_train(self) -> bool:
        """Whether ``train_files`` is a list of Sources."""
        given = self.files.get("train")
        return bool(given) and not isinstance(given[0], str)


class SplitsFingerprint:
    """A stream DataModule's ``fingerprint``: its :class:`ShardSplits`' (``dm.stream_splits``),
    what the train split is (its shards, their record counts and the sources' quotas; a
    checkpoint holds it and a resume over other data is refused). Setting it does nothing
    (:class:`~datamodules.BaseDataModule` sets None before the splits exist)."""

    def __get__(self, dm: Any, owner: type | None = None) -> Any:
        if dm is None:
            return self
        splits = dm.__dict__.get("stream_splits")
        return None if splits is None else splits.fingerprint

    def __set__(self, dm: Any, value: Any) -> None:
        pass


def _why_empty(shards: ShardTable, shown: int = 3) -> str:
    """Why shards that hold no records do, in words: each one damaged, unreadable or whose
    every record is bad (the first ``shown``), with where it stops or its last bad record."""
    parts = []
    for k in shards.flagged[:shown]:
        shard = shards[k]
        if shard.error is not None:
            parts.append(f"{shard.path} cannot be read ({shard.error})")
        elif shard.damage is not None:
            parts.append(
                f"{shard.path} is damaged, and the record(s) before the damage were left out "
                f"as bad (on_error='skip'): {shard.damage}"
            )
        elif shard.skipped:
            last = ": ".join(shard.problems[-1]) if shard.problems else "not kept"
            parts.append(
                f"all {shard.skipped} record(s) of {shard.path} are bad (on_error='skip'); "
                f"the last: {last}"
            )
    if len(shards.flagged) > shown:
        parts.append(f"and {len(shards.flagged) - shown} more such shard(s) (see dm.skipped)")
    return ": " + "; ".join(parts) if parts else ""
