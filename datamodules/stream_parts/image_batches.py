"""Image records to batches, in the stream's workers: decoded, transformed, written in place.

:class:`ImageRecordCollate` is the collate of a stream built with ``image_key=``: for each
record of a batch it finds the image (the first of the ``image_key`` alternatives present:
bytes, or Hugging Face's ``{"bytes", "path"}``), decodes it with
:func:`~datamodules.imaging.decoding.decode_image_bytes` and writes it through the split's
transform straight into a uint8 channels-last batch in a reused shared-memory slot
(:class:`~datamodules.imaging.batches.ImageBatchWriter`), exactly as
:class:`~datamodules.ImageFolderDataModule` does with files. Batches are ``(images, labels)``
(labels int64, from ints or from names through ``classes``), or with ``label_key=None`` a dict
of ``"image"`` and the records' other fields, collated as streams collate them.

A record without the image, with bytes that do not decode, or with a label that is missing or
unknown raises :class:`~datamodules.shards.errors.RecordError` naming the shard and the
record's key; under ``on_error="skip"`` it is left out of its batch (which is one image
smaller: every rank still gets the same number of batches) and sent to the main process's
``dm.skipped`` (:class:`~datamodules.core.skipped.SkipChannel`). A batch whose records are all
bad holds one good record instead of being empty (every rank keeps its number of batches): the
first good record of the worker's share of the epoch in read order, the same in a run resumed
anywhere (the stream gives it through :meth:`ImageRecordCollate.set_fill`), reported in
``dm.skipped`` as repeated; only a share without any good record raises.

:class:`TaggedReader` adds where each record came from (``__url__``, and ``__index__`` for
records without a ``__key__``) so that errors can name it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import torch

from collates.records import collate_records
from datamodules.core.checks import is_int
from datamodules.core.skipped import SkipChannel
from datamodules.imaging.batches import ImageBatchWriter
from datamodules.imaging.decoding import ImageDecodeError, preload
from datamodules.imaging.scaled import ImageDecoder
from datamodules.shards.errors import RecordError
from datamodules.stream_engine.batching import LABEL_PAD_VALUE
from datamodules.stream_engine.readers import head_start

__all__ = ["BadRecord", "ImageRecordCollate", "RecordFields", "TaggedReader", "record_name"]


class TaggedReader:
    """Wraps a range reader: dict records get ``__url__`` (their shard) unless they have one,
    and ``__index__`` (their position in it) unless they have a ``__key__``."""

    def __init__(self, reader: Callable[[str, int, int], Any]) -> None:
        self.reader = reader

    def plan(self, paths: Sequence[str]) -> None:
        """Passes the shards to read next on to the wrapped reader (for its prefetch); a
        worker whose first shard is remote imports the image decoders while it waits
        (:func:`~datamodules.stream_engine.readers.head_start`)."""
        plan = getattr(self.reader, "plan", None)
        if plan is not None:
            plan(paths)
        head_start(paths, "images", preload)

    def __call__(self, path: str, start: int, stop: int) -> Iterator[Any]:
        for index, record in enumerate(self.reader(path, start, stop), start):
            if isinstance(record, dict):
                record.setdefault("__url__", path)
                if "__key__" not in record:
                    record["__index__"] = index
            yield record


class BadRecord(Exception):
    """Why one record cannot be batched (raised with the reason; the collate names the
    record)."""


class RecordFields(Protocol):
    """What an image batch holds beside the images (image-text pairs: the tokenized captions).

    ``fields(record)`` gives a record's value (raising :class:`BadRecord` for a record that
    lacks it), ``fields.batch(values)`` the batch's entries from the records' values.
    """

    def __call__(self, record: Mapping[str, Any]) -> Any: ...

    def batch(self, values: list[Any]) -> dict[str, Any]: ...


def record_name(record: Any) -> tuple[str, str]:
    """``(shard, where)`` of a record, for messages: its ``__url__`` and key or position."""
    if not isinstance(record, Mapping):
        return "<records>", f"a {type(record).__name__} record"
    shard = str(record.get("__url__", "<records>"))
    if "__key__" in record:
        return shard, f"key {record['__key__']!r}"
    if "__index__" in record:
        return shard, f"record {record['__index__']}"
    return shard, "a record"


class ImageRecordCollate:
    """The collate of image records: ``(images uint8 (B, 3, H, W), labels int64 (B,))``.

    Args:
        image_keys: The image field's names, tried in order (the first present wins).
        label_key: The label field (None: dict batches of ``"image"`` and the other fields).
        classes: Class names; a string label is mapped to its index here (None: labels
            must be ints).
        transform: The split's transform on uint8 ``(3, H, W)`` images (one size per batch).
        on_error: ``"raise"`` or ``"skip"`` bad records.
        skips: Where skipped records are sent to the main process (``"skip"``).
        decode: ``"scaled"`` or ``"full"`` (:class:`~datamodules.imaging.scaled.ImageDecoder`).
        fields: With ``label_key=None``: what a batch holds beside ``"image"``
            (:class:`RecordFields`; None: the records' other fields, collated as streams
            collate them).
    """

    def __init__(
        self,
        image_keys: Sequence[str],
        label_key: str | None,
        classes: Sequence[str] | None,
        transform: Callable[[torch.Tensor], torch.Tensor] | None,
        on_error: str = "raise",
        skips: SkipChannel | None = None,
        decode: str = "full",
        fields: RecordFields | None = None,
    ) -> None:
        self.decoder = ImageDecoder(transform, decode)
        self.image_keys = tuple(image_keys)
        self.label_key = label_key
        self.classes = None if classes is None else tuple(classes)
        self.class_to_idx = None if classes is None else {c: i for i, c in enumerate(classes)}
        self.transform = transform
        self.on_error = on_error
        self.skips = skips
        self.fields = fields
        self._last_good: Any = None  # this worker's last good record, for an all-bad batch
        self._fill: Callable[[], Iterator[Any]] | None = None  # the worker's records
        self._filler: Any = None  # the first good one of them, once needed

    def __call__(self, records: list[Any]) -> Any:
        writer = ImageBatchWriter(len(records), self.transform)
        labels: list[int] = []
        rest: list[dict[str, Any]] = []
        reason = ""  # why the last bad record is bad
        for record in records:
            try:
                extra = self._rest(record)
                image, own, label = self._decode(record)
            except BadRecord as bad:
                reason = str(bad)
                self._bad(record, reason)
                continue
            writer.add(image, own)
            labels.append(label)
            rest.append(extra)
            self._last_good = record
        if not labels:
            good = self._good_record()
            if good is None:
                shard, where = record_name(records[-1])  # the last record, the last bad one
                raise RecordError(
                    shard, where, f"{reason}; every record of this batch is bad and so is every "
                    "other record of this worker's share: none to fill it (on_error='skip')"
                )  # fmt: skip
            record, extra, (image, own, label) = good
            writer.add(image, own)
            labels.append(label)
            rest.append(extra)
            self._log(record, "repeated to fill a batch whose records were all bad")
        images = writer.batch()
        if self.label_key is not None:
            return images, torch.tensor(labels, dtype=torch.int64)
        if self.fields is not None:
            return {"image": images, **self.fields.batch(rest)}
        fields = collate_records(rest, label_pad_value=LABEL_PAD_VALUE) if rest[0] else {}
        return {"image": images, **fields}

    @staticmethod
    def preload() -> None:
        """Imports the image decoders, before the workers fork (see
        :meth:`~datamodules.stream_engine.stream.ShardedStream.prepare_workers`)."""
        preload()

    def set_fill(self, records: Callable[[], Iterator[Any]]) -> None:
        """Where a batch of only bad records finds its good record: ``records()`` gives the
        worker's records of this epoch in read order (the stream calls it as a worker starts
        an epoch); the first good one fills every such batch."""
        self._fill, self._filler = records, None

    def _good_record(self) -> tuple[Any, Any, tuple[torch.Tensor, Any, int]] | None:
        """``(record, rest, decoded)`` of the record that fills an all-bad batch: the first
        good one of the worker's records (without a stream: the last good one read)."""
        if self._fill is None:
            if self._last_good is None:
                return None
            record = self._last_good
            return record, self._rest(record), self._decode(record)
        if self._filler is None:
            for record in self._fill():  # (bad ones met here are reported where they fall)
                try:
                    self._filler = (record, self._rest(record), self._decode(record))
                except BadRecord:
                    continue
                break
            else:
                return None
        record, extra, _ = self._filler
        return record, extra, self._decode(record)  # decoded again: a fresh random crop

    def set_epoch(self, epoch: int) -> None:
        """Tells the fields the epoch that starts (the stream calls it in each worker)."""
        follow = getattr(self.fields, "set_epoch", None)
        if follow is not None:
            follow(epoch)

    def _rest(self, record: Any) -> Any:
        """What the batch holds of a record beside its image and label."""
        if self.label_key is not None or not isinstance(record, Mapping):
            return None
        if self.fields is not None:
            return self.fields(record)
        return {k: v for k, v in record.items() if k not in self.image_keys}

    def _decode(self, record: Any) -> tuple[torch.Tensor, Any, int]:
        """``(image, its own transform or None, label)`` of a record (see
        :meth:`~datamodules.imaging.scaled.ImageDecoder.bytes`)."""
        if not isinstance(record, Mapping):
            raise BadRecord(f"is a {type(record).__name__}, not a dict with an image field")
        label = self._label(record) if self.label_key is not None else -1
        key, value = next(
            ((k, record[k]) for k in self.image_keys if record.get(k) is not None), (None, None)
        )
        if key is None:
            fields = sorted(k for k in record if not k.startswith("__"))
            wanted = ";".join(self.image_keys)
            raise BadRecord(f"has no image field {wanted!r} (image_key); its fields: {fields}")
        try:
            if isinstance(value, Mapping):  # Hugging Face's Image struct
                data, path = value.get("bytes"), value.get("path")
                if data is None:
                    if not path or not os.path.isfile(path):
                        raise BadRecord(
                            f"field {key!r} holds no bytes and no readable path ({path!r})"
                        )
                    return (*self.decoder.file(path), label)
                value = data
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise BadRecord(
                    f"field {key!r} holds a {type(value).__name__}, not encoded image bytes"
                )
            image, own = self.decoder.bytes(value)  # errors name the record below
        except ImageDecodeError as error:
            raise BadRecord(f"field {key!r}: {error.reason}") from error
        return image, own, label

    def _label(self, record: Mapping[str, Any]) -> int:
        if self.label_key not in record:
            fields = sorted(k for k in record if not k.startswith("__"))
            raise BadRecord(
                f"has no label field {self.label_key!r} (label_key); its fields: {fields}"
            )
        value = record[self.label_key]
        if isinstance(value, str):
            if self.class_to_idx is None:
                raise BadRecord(
                    f"label {value!r} is a string: give classes=[...] to map names to indices"
                )
            index = self.class_to_idx.get(value)
            if index is None:
                shown = ", ".join(repr(c) for c in self.classes[:10])
                more = f" and {len(self.classes) - 10} more" if len(self.classes) > 10 else ""
                raise BadRecord(f"label {value!r} is not one of classes ({shown}{more})")
            return index
        if not is_int(value):
            raise BadRecord(f"label {value!r} is a {type(value).__name__}: use ints or strings")
        if value < 0 or (self.classes is not None and value >= len(self.classes)):
            top = "" if self.classes is None else f", < {len(self.classes)} (len(classes))"
            raise BadRecord(f"label {value} is out of range (labels are >= 0{top})")
        return value

    def _bad(self, record: Any, reason: str) -> None:
        shard, where = record_name(record)
        if self.on_error == "raise":
            raise RecordError(shard, where, reason)
        self._log(record, reason)

    def _log(self, record: Any, reason: str) -> None:
        if self.skips is not None:
            shard, where = record_name(record)
            self.skips.send(shard, where, reason)
