"""Turning stream records into batches: the default collate and the batching of user datasets.

* :func:`stream_collate`: the default collate of a stream, field by field with
  :class:`~collates.PadCollate`'s padding rules.
* :class:`Chain`: applies callables in order (``transform`` then the split's transforms).
* :class:`BatchedIterable`: a user's ``IterableDataset`` of records (``dataset_factory=``),
  mapped, batched and collated in the worker; :func:`factory_loader`: its DataLoader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from collates.records import collate_records
from datamodules.core.loaders import passthrough
from datamodules.core.quiet import quiet, release_held_filters
from datamodules.core.shared_batches import attach_pool

__all__ = [
    "LABEL_PAD_VALUE",
    "BatchedIterable",
    "Chain",
    "FactoryLoader",
    "factory_loader",
    "stream_collate",
]

#: What the default collate pads a ``labels`` (or ``label``) sequence with: the index that
#: ``torch.nn.functional.cross_entropy`` ignores, where 0 would be a real token id to the loss.
LABEL_PAD_VALUE = -100


def stream_collate(samples: list[Any]) -> Any:
    """The default collate of a stream: field by field, with PadCollate's padding rules.

    * dict records: :func:`collates.records.collate_records` (numbers and equal-shape arrays
      stacked, variable-length lists / arrays / tensors padded with 0, strings and other
      objects kept as lists; every record needs the same keys). The label fields ``labels``
      and ``label`` pad with -100 (:data:`LABEL_PAD_VALUE`), as ``PadCollate(...,
      label_pad_value=-100)`` pads them, so that the loss ignores the padding;
    * tuples of fields: the same, position by position, returned as a tuple;
    * strings (``.txt`` records): the list of strings;
    * anything else (a number, a list of numbers, an array, a tensor): one field.
    """
    first = samples[0]
    if isinstance(first, Mapping):
        return collate_records(samples, label_pad_value=LABEL_PAD_VALUE)
    if isinstance(first, (str, bytes)):
        return list(samples)
    if isinstance(first, tuple):
        width = len(first)
        for i, sample in enumerate(samples):
            if not isinstance(sample, tuple) or len(sample) != width:
                raise ValueError(
                    f"sample {i} is {sample!r:.80} but sample 0 is a tuple of {width} fields; "
                    "every sample must have the same structure."
                )
        columns = collate_records([dict(enumerate(sample)) for sample in samples])
        return tuple(columns[j] for j in range(width))
    return collate_records([{0: sample} for sample in samples])[0]


class Chain:
    """Applies callables in order (picklable, for worker processes)."""

    def __init__(self, *fns: Callable[[Any], Any]) -> None:
        self.fns = fns

    def __call__(self, value: Any) -> Any:
        for fn in self.fns:
            value = fn(value)
        return value


class BatchedIterable(IterableDataset):
    """A user's IterableDataset of records, mapped, batched and collated in the worker."""

    def __init__(
        self,
        dataset: Iterable[Any],
        batch_size: int,
        transform: Callable[[Any], Any] | None,
        collate: Callable[[list[Any]], Any],
        drop_last: bool,
    ) -> None:
        self.dataset, self.batch_size, self.transform = dataset, batch_size, transform
        self.collate, self.drop_last = collate, drop_last

    def __iter__(self) -> Iterator[Any]:
        batch: list[Any] = []
        for record in self.dataset:
            batch.append(record if self.transform is None else self.transform(record))
            if len(batch) == self.batch_size:
                yield self.collate(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate(batch)


def factory_loader(
    dm: Any, dataset: Any, split: str, rank: int, world: int, kwargs: dict[str, Any]
) -> DataLoader | None:
    """The DataLoader of ``dataset_factory``'s dataset for a split (None: no such split).

    Raises:
        TypeError: The factory returned something other than an IterableDataset.
    """
    if dataset is None:
        return None
    if not isinstance(dataset, IterableDataset):
        raise TypeError(
            f"dataset_factory({split!r}, {rank}, {world}) returned a "
            f"{type(dataset).__name__}: it must return an IterableDataset of records, or None."
        )
    drop_last = dm.drop_last and split == "train"
    _, transform, collate = dm.split_parts(split, None)
    batched = BatchedIterable(dataset, dm.batch_size, transform, collate, drop_last)
    kwargs["collate_fn"] = passthrough
    pool = attach_pool(kwargs, dm.reuse_batch_memory)
    loader = FactoryLoader(batched, batch_size=None, **kwargs)
    loader.batch_pool = pool  # type: ignore[attr-defined]
    return loader


class FactoryLoader(DataLoader):
    """The DataLoader of a ``dataset_factory`` stream: a plain DataLoader that lets go of the
    warnings silenced while Lightning checks it (:mod:`datamodules.core.quiet`)."""

    quiet_while_starting: list[tuple[str, type[Warning]]] = []

    def __iter__(self) -> Any:
        release_held_filters(self)
        with quiet(self.quiet_while_starting):
            return super().__iter__()
