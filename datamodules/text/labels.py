"""The labels of TextDataModule: ids for string labels, one kind across splits, checkpoints.

:class:`LabelVocabulary` is a component that :class:`~datamodules.TextDataModule` holds (its
``label_vocabulary``), with its own state: the names, and those a checkpoint restored before
``setup``. Int labels pass through unchanged; string labels become ids in a sorted label
vocabulary (:attr:`LabelVocabulary.names`, the module's ``label_names``), built over every
split, or a checkpoint's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from datamodules.text.readers import check_labels

__all__ = ["LabelVocabulary"]


class LabelVocabulary:
    """The label ids of a text module's sources (each a ``TextRecords``)."""

    def __init__(self) -> None:
        #: The sorted names of string labels (None: int labels, or none).
        self.names: list[str] | None = None
        self._pending: list[str] | None = None  # a checkpoint's, restored before setup

    def prepare(self, sources: Sequence[Any]) -> None:
        """Checks that labelled sources agree in kind and sets :attr:`names` (a checkpoint's,
        restored before, if any), before the texts are tokenized; each source's ids then come
        from :meth:`tensor`."""
        saved, self._pending = self._pending, None
        self._encode(sources, saved)

    def restore(self, names: list[str] | None, sources: Sequence[Any]) -> None:
        """A checkpoint's names: kept for :meth:`prepare` before setup (no ``sources`` yet),
        else applied to the sources' label tensors when they differ."""
        if not sources:
            self._pending = names
            return
        if names is not None and names != self.names:
            self._encode(sources, names)
            for records in sources:
                records.encoded.labels = self.tensor(records)

    def stratify_ids(self, records: Any) -> torch.Tensor:
        """One label id per sample of ``records`` (for ``stratify=True``)."""
        if records.labels is None:
            raise ValueError("stratify=True needs labels: these texts have none.")
        if isinstance(records.labels[0], str):
            names = {name: i for i, name in enumerate(sorted(set(records.labels)))}
            return torch.tensor([names[v] for v in records.labels], dtype=torch.int64)
        return torch.tensor(records.labels, dtype=torch.int64)

    def num_classes(self, sources: Sequence[Any]) -> int | None:
        """``len(names)``, or the largest int label + 1 (None: no labels)."""
        if self.names is not None:
            return len(self.names)
        labelled = [s.encoded.labels for s in sources if s.encoded.labels is not None]
        return max(int(t.max()) + 1 for t in labelled) if labelled else None

    def tensor(self, records: Any) -> torch.Tensor | None:
        """The label ids of ``records`` (None: unlabelled)."""
        if records.labels is None:
            return None
        if self.names is not None:
            ids = {name: i for i, name in enumerate(self.names)}
            return torch.tensor([ids[v] for v in records.labels], dtype=torch.int64)
        return torch.tensor(check_labels(records.labels, records.where), dtype=torch.int64)

    def _encode(self, sources: Sequence[Any], saved: list[str] | None) -> None:
        labelled = [s for s in sources if s.labels is not None]
        if not labelled:
            return
        kinds = {type(s.labels[0]) for s in labelled}
        if len(kinds) > 1:
            first = labelled[0]
            other = next(s for s in labelled if type(s.labels[0]) is not type(first.labels[0]))
            raise TypeError(
                f"{other.where(0)}: label {other.labels[0]!r} is a "
                f"{type(other.labels[0]).__name__} but {first.where(0)} has {first.labels[0]!r}: "
                "use ints or strings in every split, not both."
            )
        if kinds != {str}:
            return
        names = sorted({v for s in labelled for v in s.labels})
        if saved is not None:
            unknown = sorted(set(names) - set(saved))
            if unknown:
                raise ValueError(
                    f"the checkpoint's label_names {saved} lack the labels {unknown} found in "
                    "this data: the saved model cannot predict them."
                )
            names = list(saved)
        self.names = names
