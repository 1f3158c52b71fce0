"""What ``python -m datamodules inspect`` prints and draws, as reusable functions.

Descriptions (lists of text lines), here:

* :func:`describe_datamodule`: the default of :meth:`BaseDataModule.describe_data`: per split,
  the sample count and, when :meth:`~BaseDataModule.labels` gives integer classes, the count
  of each class.
* :func:`describe_batch`: the structure of one batch (names, shapes, dtypes, value ranges).
* :func:`length_stats`: min / median / mean / p95 / max of sequence lengths.
* :func:`batch_tokens`, :func:`random_batches`, :func:`padding_comparison`: real and padded
  tokens per batch; the same batch sizes drawn at random (what batches without length
  buckets would pad); both padding efficiencies.

The pictures (PNG files) are drawn in :mod:`datamodules.tools.pictures`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = [
    "LABEL_NAMES",
    "MAX_CLASSES_LISTED",
    "batch_tokens",
    "class_counts",
    "describe_batch",
    "describe_datamodule",
    "is_class_labels",
    "length_stats",
    "padding_comparison",
    "padding_efficiency",
    "random_batches",
]

MAX_CLASSES_LISTED = 20
LABEL_NAMES = ("y", "label", "labels", "target", "targets")


# ---------------------------------------------------------------------- descriptions
def _flatten(batch: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(name, leaf) pairs of a nested batch; tuple positions are named by their index.

    A list or tuple that holds no tensor or nested structure (scalars, bytes, images) or only
    dicts (a batch's per-sample records) is one leaf: one line, not one per sample.
    """
    if isinstance(batch, dict):
        items = [(f"{prefix}{k}", v) for k, v in batch.items()]
    elif isinstance(batch, (list, tuple)) and not _is_leaf_sequence(batch):
        items = [(f"{prefix}{i}", v) for i, v in enumerate(batch)]
    else:
        return [(prefix or "batch", batch)]
    out: list[tuple[str, Any]] = []
    for name, value in items:
        if isinstance(value, (dict, list, tuple)) and not _is_leaf_sequence(value):
            out.extend(_flatten(value, f"{name}."))
        else:
            out.append((name, value))
    return out


def _is_sequence_of_scalars(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(
        isinstance(v, (int, float, str, bool)) for v in value
    )


def _is_leaf_sequence(value: Any) -> bool:
    """Whether a list or tuple is described on one line (see :func:`_flatten`)."""
    if not isinstance(value, (list, tuple)) or not value:
        return isinstance(value, (list, tuple))
    if all(isinstance(v, dict) for v in value):
        return True
    return not any(isinstance(v, (torch.Tensor, dict, list, tuple)) for v in value)


def _sequence_text(value: list[Any] | tuple[Any, ...]) -> str:
    """``list of 32``, ``list of 2 bytes`` or ``list of 32 dict, keys id, text``."""
    text = f"{type(value).__name__} of {len(value)}"
    if _is_sequence_of_scalars(value):
        return text
    kinds = {type(v).__name__ for v in value}
    if len(kinds) == 1:
        text += f" {kinds.pop()}"
    if value and all(isinstance(v, dict) for v in value):
        keys = dict.fromkeys(k for v in value for k in v)
        text += ", keys " + ", ".join(str(k) for k in keys)
    return text


def describe_batch(batch: Any) -> list[str]:
    """Lines giving each field of a batch: shape, dtype and value range (or type and length)."""
    lines = []
    for name, value in _flatten(batch):
        if isinstance(value, torch.Tensor):
            text = f"{name}: {tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
            if value.numel() and not value.is_complex():
                flat = value.detach().float()
                text += f", values in [{flat.min().item():.4g}, {flat.max().item():.4g}]"
            lines.append(text)
        elif isinstance(value, (list, tuple)):
            lines.append(f"{name}: {_sequence_text(value)}")
        else:
            lines.append(f"{name}: {type(value).__name__}")
    return lines


def is_class_labels(labels: torch.Tensor, max_classes: int = 1000) -> bool:
    """Whether a tensor looks like integer class labels (1-D, integer, few distinct values)."""
    if labels.dim() != 1 or labels.is_floating_point() or labels.is_complex():
        return False
    if labels.dtype == torch.bool:
        return True
    return len(torch.unique(labels)) <= max_classes


def class_counts(labels: torch.Tensor, names: Sequence[str] | None = None) -> str:
    """``"0: 59, 1: 71, 2: 48"`` (most frequent first beyond 20 classes), with class names."""
    values, counts = torch.unique(labels, return_counts=True)
    pairs = list(zip(values.tolist(), counts.tolist(), strict=True))
    if len(pairs) > MAX_CLASSES_LISTED:
        pairs.sort(key=lambda p: -p[1])
    shown = pairs[:MAX_CLASSES_LISTED]

    def label(value: Any) -> str:
        if names is not None and isinstance(value, int) and 0 <= value < len(names):
            return f"{names[value]}"
        return str(value)

    text = ", ".join(f"{label(v)}: {c}" for v, c in shown)
    if len(pairs) > len(shown):
        text += f", ... ({len(pairs)} classes)"
    return text


def length_stats(lengths: Sequence[int] | torch.Tensor) -> str:
    """``"min 3, median 40, mean 55.2, p95 180, max 512"`` for sequence lengths."""
    values = torch.as_tensor(lengths, dtype=torch.float64).flatten()
    if values.numel() == 0:
        return "no sequences"
    q = torch.quantile(values, torch.tensor([0.5, 0.95], dtype=torch.float64)).tolist()
    return (
        f"min {values.min().item():.0f}, median {q[0]:.0f}, mean {values.mean().item():.1f}, "
        f"p95 {q[1]:.0f}, max {values.max().item():.0f}"
    )


def padding_efficiency(batches: Sequence[Sequence[int]]) -> float:
    """Share of real tokens when each batch is padded to its longest sequence."""
    real = sum(sum(b) for b in batches)
    padded = sum(len(b) * max(b) for b in batches if len(b))
    return real / padded if padded else 1.0


def describe_datamodule(
    dm: Any,
    names: Sequence[str] | None = None,
    split_labels: Mapping[str, torch.Tensor | None] | None = None,
) -> list[str]:
    """Per split: the sample count and, with integer class labels, each class's count.

    Args:
        dm: A set-up :class:`~datamodules.core.base.BaseDataModule`.
        names: Class names, indexed by label value.
        split_labels: The labels of each split's samples, in split order (None: no labels).
            Without it, labels come from ``dm.labels()`` and are counted only for splits of
            the main dataset (a split from its own source says so instead).
    """
    indices = dm.split_indices
    if indices is None:
        dm.setup("fit")
        indices = dm.split_indices
    labels = None
    if split_labels is None:
        try:
            labels = dm.labels()
        except (NotImplementedError, ValueError, TypeError):
            labels = None
        if labels is not None and not (
            isinstance(labels, torch.Tensor) and is_class_labels(labels)
        ):
            labels = None
    lines = ["data:"]
    for split, idx in indices.items():
        text = f"  {split}: {len(idx)} samples"
        if split_labels is not None:
            values = split_labels.get(split)
            if values is not None and len(values) and is_class_labels(values):
                text += f"; classes {class_counts(values, names)}"
        elif dm.split_datasets.get(split) is not dm.dataset:
            text += " (from its own source)"
        elif labels is not None and len(idx):
            text += f"; classes {class_counts(labels[idx], names)}"
        lines.append(text)
    return lines


def batch_tokens(
    lengths: Sequence[int] | torch.Tensor,
    batches: Sequence[torch.Tensor],
    pad_to_multiple_of: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Real and padded tokens of each batch (int64 tensors, one value per batch).

    Args:
        lengths: The length of every sample the batches index.
        batches: Index tensors into ``lengths``, one per batch.
        pad_to_multiple_of: Padded widths are rounded up to a multiple of this.

    Returns:
        ``(real, padded)``: per batch, the sum of its lengths and ``size x width``, where
        ``width`` is its longest length (rounded up to ``pad_to_multiple_of``).
    """
    values = torch.as_tensor(lengths, dtype=torch.int64).flatten()
    sizes = torch.tensor([len(b) for b in batches], dtype=torch.int64)
    real = torch.zeros(len(batches), dtype=torch.int64)
    width = torch.zeros(len(batches), dtype=torch.int64)
    if int(sizes.sum()):
        chosen = values[torch.cat([torch.as_tensor(b, dtype=torch.int64) for b in batches])]
        owner = torch.repeat_interleave(torch.arange(len(batches)), sizes)
        real.index_add_(0, owner, chosen)
        width.scatter_reduce_(0, owner, chosen, reduce="amax")
    if pad_to_multiple_of:
        width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
    return real, sizes * width


def padding_comparison(
    lengths: Sequence[int] | torch.Tensor,
    batches: Sequence[torch.Tensor],
    pad_to_multiple_of: int | None = None,
    seed: int = 0,
) -> tuple[float, float]:
    """Padding efficiency (real / padded tokens) of ``batches`` and of random batches of the
    same sizes (:func:`random_batches`): what length bucketing gains over none."""
    real, padded = batch_tokens(lengths, batches, pad_to_multiple_of)
    sizes = [len(b) for b in batches]
    base_real, base_padded = batch_tokens(
        lengths, random_batches(len(lengths), sizes, seed), pad_to_multiple_of
    )
    return (
        float(real.sum()) / max(float(padded.sum()), 1.0),
        float(base_real.sum()) / max(float(base_padded.sum()), 1.0),
    )


def random_batches(n: int, sizes: Sequence[int], seed: int = 0) -> list[torch.Tensor]:
    """Batches of the given sizes drawn from a seeded random permutation of ``range(n)``.

    With the sizes of a bucketing sampler's batches, this is what the same epoch would pad
    without length buckets (every sample once, when the sizes sum to ``n``).
    """
    if sum(sizes) > n:
        raise ValueError(f"batch sizes summing to {sum(sizes)} cannot be drawn from {n} samples.")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return list(order[: sum(sizes)].split(list(sizes)))
