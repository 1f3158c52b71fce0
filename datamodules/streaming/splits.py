"""A stream's splits: listing and indexing their shards, plain or as weighted sources.

:class:`StreamSplits` is mixed into :class:`~datamodules.StreamingDataModule`. ``setup`` lists
each split's shards (globs, directories, URLs; ``storage_options`` reach fsspec) and indexes
them once (record counts and seek offsets, cached on disk). A split given as a list of
:class:`~datamodules.streaming.engine.mixing.Source` keeps, beside its flat shard list, each
source's shards and its quota of records per epoch (:attr:`StreamSplits.mixes`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from lightning.pytorch.utilities.rank_zero import rank_zero_warn

from datamodules.core.skipped import Skipped
from datamodules.shards.formats import expand_files
from datamodules.shards.index import ShardIndex, index_shards
from datamodules.streaming.engine.mixing import Source, StreamSource, quotas

__all__ = ["SPLITS", "STAGE_SPLITS", "SplitSource", "StreamSplits"]

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
        source: The :class:`~datamodules.streaming.engine.mixing.Source` as given.
        shards: Positions of its shards in the split's shard list.
        records: Its records.
        quota: Its records per epoch.
    """

    source: Source
    shards: tuple[int, ...]
    records: int
    quota: int

    def engine(self) -> StreamSource:
        """What the stream engine needs of it."""
        return StreamSource(self.source.label, self.shards, self.quota)


class StreamSplits:
    """Listing and indexing the splits of a :class:`~datamodules.StreamingDataModule` (a mixin)."""

    files: dict[str, Any]
    shards: dict[str, list[ShardIndex]]
    skipped: Skipped

    def setup(self, stage: str | None = None) -> None:
        """Lists and indexes the shards of the splits ``stage`` needs (every split for None).

        Each split is indexed once per DataModule (and each shard once per machine, through
        the index cache); later calls return at once.

        Raises:
            ValueError: A ``*_files`` argument matches nothing, the train shards hold no
                records, or (``on_error="raise"``) a shard cannot be read or a CSV row is bad.
        """
        if self.dataset_factory is not None:
            return
        for split in STAGE_SPLITS.get(stage or "", SPLITS):
            self._index(split)

    def _list(self, given: Any, name: str) -> list[str]:
        try:
            return expand_files(given, self.remote)
        except ValueError as err:
            raise ValueError(f"{name}={given!r}: {err}") from err

    def _index_paths(self, paths: list[str], name: str) -> list[ShardIndex]:
        if self._custom_reader():
            return [
                ShardIndex(p, "custom", None, self.on_error, self.count_records(p)) for p in paths
            ]
        counter = Skipped()
        shards = index_shards(
            paths, self.fmt, self.on_error, self.index_cache, counter, options=self.remote
        )
        if counter.counts or counter.unreadable:
            for index in shards:
                self.skipped.add(index.path, index.skipped, index.problems, index.error)
            rank_zero_warn(f"{type(self).__name__} {name}: {counter.summary()}")
        return shards

    def _index(self, split: str) -> list[ShardIndex]:
        if split in self.shards:
            return self.shards[split]
        given = self.files[split]
        if given is None:
            self.shards[split] = []
            return []
        name = f"{split}_files"
        if isinstance(given[0], Source):
            listed = [self._list(source.files, f"{name} ({source.label})") for source in given]
            owner: dict[str, str] = {}
            for source, paths in zip(given, listed, strict=True):
                for path in paths:
                    if path in owner:
                        raise ValueError(
                            f"{name}: shard {path!r} is in the sources {owner[path]!r} and "
                            f"{source.label!r}; give each shard to one source."
                        )
                    owner[path] = source.label
            shards = self._index_paths([p for paths in listed for p in paths], name)
            self.mixes[split] = self._mix(split, given, listed, shards)
        else:
            shards = self._index_paths(self._list(given, name), name)
        self._check_columns(shards, name)
        total = sum(s.count for s in shards)
        if not total:
            if split == "train":
                raise ValueError(f"{name}={given!r}: the {len(shards)} shard(s) hold no records.")
            rank_zero_warn(f"{name}={given!r}: the shard(s) hold no records: no {split} loader.")
        self.shards[split] = shards
        if split == "train":
            self.fingerprint = self._fingerprint()
        return shards

    def _check_columns(self, shards: list[ShardIndex], name: str) -> None:
        """Refuses ``columns=`` that a Parquet shard of the split lacks, naming its columns."""
        wanted = getattr(self, "columns", None)
        if not wanted:
            return
        for shard in shards:
            if shard.fmt != "parquet" or shard.error is not None:
                continue
            missing = [c for c in wanted if c not in shard.columns]
            if missing:
                raise ValueError(
                    f"{name}: columns={wanted!r} names {missing} that {shard.path} lacks; its "
                    f"columns are {list(shard.columns)}."
                )

    def _mix(
        self, split: str, given: list[Source], listed: list[list[str]], shards: list[ShardIndex]
    ) -> list[SplitSource]:
        position = {s.path: k for k, s in enumerate(shards)}
        owned = [tuple(position[p] for p in paths) for paths in listed]
        records = [sum(shards[k].count for k in own) for own in owned]
        # Evaluation splits read every source once.
        quota = quotas(given, records, self.epoch_size) if split == "train" else records
        return [
            SplitSource(s, own, n, q)
            for s, own, n, q in zip(given, owned, records, quota, strict=True)
        ]

    def _fingerprint(self) -> str | None:
        shards = self.shards.get("train")
        if not shards:
            return None
        listing: list[Any] = [[s.path, s.count] for s in shards]
        mix = self.mixes.get("train")
        if mix is not None:  # the quotas shape the epochs as much as the shards do
            listing.append([[m.source.label, list(m.shards), m.quota] for m in mix])
        return hashlib.sha1(json.dumps(listing).encode()).hexdigest()[:16]

    def split_size(self, split: str) -> int:
        """Records per epoch in ``"train"``, ``"val"`` or ``"test"`` (0 when not given): the
        shards' records, or for mixed sources the sum of their quotas; indexes it."""
        if self.dataset_factory is not None:
            raise TypeError("the size of a dataset_factory split is not known in advance.")
        shards = self._index(split)
        mix = self.mixes.get(split)
        return sum(m.quota for m in mix) if mix is not None else sum(s.count for s in shards)

    def _has(self, split: str) -> bool:
        if self.dataset_factory is not None:
            return True  # the factory says (None: no such split) when the loader is built
        return self.split_size(split) > 0
