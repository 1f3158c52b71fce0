"""The labels of TextDataModule: ids for string labels, one kind across splits, checkpoints.

:class:`TextLabels` is mixed into :class:`~datamodules.TextDataModule`. Int labels pass
through unchanged; string labels become ids in a sorted label vocabulary
(:attr:`label_names`, built over every split, or a checkpoint's).
"""

from __future__ import annotations

from typing import Any

import torch

from datamodules.text.readers import check_labels

__all__ = ["TextLabels"]


class TextLabels:
    """Label ids of a TextDataModule's sources (a mixin)."""

    label_names: list[str] | None

    def labels(self) -> torch.Tensor:
        """One label id per sample of the main dataset (for ``stratify=True``)."""
        records = self.dataset
        if records.labels is None:
            raise ValueError("stratify=True needs labels: these texts have none.")
        if isinstance(records.labels[0], str):
            names = {name: i for i, name in enumerate(sorted(set(records.labels)))}
            return torch.tensor([names[v] for v in records.labels], dtype=torch.int64)
        return torch.tensor(records.labels, dtype=torch.int64)

    def _encode_labels(self, sources: list[Any], saved: list[str] | None) -> None:
        """Checks that labelled sources agree in kind and sets :attr:`label_names`."""
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
        self.label_names = names

    def _label_tensor(self, records: Any) -> torch.Tensor | None:
        if records.labels is None:
            return None
        if self.label_names is not None:
            ids = {name: i for i, name in enumerate(self.label_names)}
            return torch.tensor([ids[v] for v in records.labels], dtype=torch.int64)
        return torch.tensor(check_labels(records.labels, records.where), dtype=torch.int64)

    @property
    def num_classes(self) -> int | None:
        """Number of label ids (``len(label_names)``, or the largest int label + 1)."""
        self._require_setup()
        if self.label_names is not None:
            return len(self.label_names)
        labelled = [s.encoded.labels for s in self._sources if s.encoded.labels is not None]
        return max(int(t.max()) + 1 for t in labelled) if labelled else None
