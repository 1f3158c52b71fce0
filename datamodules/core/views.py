"""Split views: a split of a dataset, fetched one whole batch per call, without copying data.

Each view holds a reference to the full dataset, the split's index tensor and the split's
transform, so train and eval splits of one dataset can carry different transforms while
sharing the data. A view's ``__getitem__`` takes the index tensor of one batch (positions
within the split) and returns the finished batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["Collate", "SampleBatchView", "SplitView", "TensorBatchView", "Transform", "gather"]

Transform = Callable[[Any], Any]
Collate = Callable[[list[Any]], Any]


class SplitView:
    """Base for split views.

    Args:
        indices: int64 positions of the split's samples in the full dataset.
        transform: Optional callable applied by subclasses (per sample or per batch).
    """

    def __init__(self, indices: torch.Tensor, transform: Transform | None = None) -> None:
        self.indices = indices
        self.transform = transform
        n = len(indices)
        # The identity split needs no index composition.
        # An empty split is not the identity: it selects nothing.
        self._identity = bool(
            n > 0
            and int(indices[0]) == 0
            and int(indices[-1]) == n - 1
            and torch.equal(indices, torch.arange(n))
        )

    def __len__(self) -> int:
        return len(self.indices)

    def preload(self) -> None:
        """Imports what fetching a batch imports on first use (image decoders, say), called
        by the loader before it forks its workers so that each fresh one has it; none here."""

    def rows(self, batch: torch.Tensor) -> torch.Tensor:
        """Maps positions within the split to positions in the full dataset."""
        return batch if self._identity else self.indices.index_select(0, batch)


class SampleBatchView(SplitView):
    """A split of a per-sample dataset (``dataset[i]`` -> sample), fetched a batch at a time.

    Args:
        dataset: Any map-style dataset.
        indices: int64 positions of the split's samples in ``dataset``.
        transform: Applied to each sample.
        collate: Turns the list of samples into a batch.
    """

    def __init__(
        self,
        dataset: Any,
        indices: torch.Tensor,
        transform: Transform | None,
        collate: Collate,
    ) -> None:
        super().__init__(indices, transform)
        self.dataset = dataset
        self.collate = collate

    def fetch(self, row: int) -> Any:
        """Returns the transformed sample at ``row`` of the full dataset."""
        sample = self.dataset[row]
        return self.transform(sample) if self.transform is not None else sample

    def __getitem__(self, batch: torch.Tensor) -> Any:
        return self.collate([self.fetch(row) for row in self.rows(batch).tolist()])


def gather(data: Sequence[torch.Tensor] | dict[str, torch.Tensor], rows: torch.Tensor) -> Any:
    """Gathers the same rows of every tensor of a tuple or dict.

    Uses ``index_select`` rather than ``tensor[rows]``: on CPU, advanced indexing of a
    (200000, 64) float tensor with 256 rows took 84 us here against 13 us for index_select.
    """
    if isinstance(data, dict):
        return {key: value.index_select(0, rows) for key, value in data.items()}
    return tuple(value.index_select(0, rows) for value in data)


class TensorBatchView(SplitView):
    """A split of in-memory tensors; a batch is one indexing call per tensor.

    Args:
        tensors: A tuple of tensors (batches are tuples) or a dict (batches are dicts),
            all with the same first dimension.
        indices: int64 positions of the split's rows.
        transform: Applied to each whole batch.
    """

    def __init__(
        self,
        tensors: tuple[torch.Tensor, ...] | dict[str, torch.Tensor],
        indices: torch.Tensor,
        transform: Transform | None = None,
    ) -> None:
        super().__init__(indices, transform)
        self.tensors = tensors

    def __getitem__(self, batch: torch.Tensor) -> Any:
        out = gather(self.tensors, self.rows(batch))
        return self.transform(out) if self.transform is not None else out
