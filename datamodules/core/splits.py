"""Split helpers: fractions or counts -> seeded index splits, explicit indices, stratified.

Every function here is deterministic for a given seed and touches no data: it returns
index tensors that a :class:`torch.utils.data.Subset`-like view applies lazily, so the same
split is computed on every rank without any communication.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from datamodules.core.checks import is_int, is_number, rejected

__all__ = [
    "SPLIT_NAMES",
    "SplitSize",
    "check_class_labels",
    "compute_split_indices",
    "empty_split_notes",
    "explicit_split_indices",
    "is_count",
    "random_split_indices",
    "split_fingerprint",
    "split_sizes",
    "stratified_split_indices",
    "validate_split_pair",
    "validate_split_size",
]

SplitSize = int | float
SPLIT_NAMES: tuple[str, ...] = ("train", "val", "test")


def is_count(value: Any) -> bool:
    """Whether a split size is a count of samples: an int (a float is always a fraction)."""
    return is_int(value)


def validate_split_size(value: Any, name: str) -> None:
    """Raises if ``value`` is neither a fraction in [0, 1) nor a count >= 0.

    A float is a fraction, always (``1.0`` and ``5.0`` are refused, as in a YAML config that
    means a count but wrote a float); only an int is a count.

    Args:
        value: The user's value.
        name: The argument's name, used in the message.

    Raises:
        TypeError: For a value that is not a number.
        ValueError: For a number outside the accepted range.
    """
    if not is_number(value):
        accepted = "a fraction in [0, 1) (a float) or a count of samples >= 0 (an int)"
        raise rejected(name, value, accepted, TypeError)
    if is_count(value):
        if value < 0:
            raise ValueError(f"{name}={value!r} is not accepted: a count must be >= 0.")
        return
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(
            f"{name}={value!r} is not accepted: a fraction must be in [0, 1) "
            "(use an int for a count of samples)."
        )


def validate_split_pair(val_split: SplitSize, test_split: SplitSize) -> None:
    """Raises if the two split sizes are invalid, or their fractions sum to 1 or more."""
    validate_split_size(val_split, "val_split")
    validate_split_size(test_split, "test_split")
    fractions = [v for v in (val_split, test_split) if not is_count(v)]
    if sum(float(v) for v in fractions) >= 1.0:
        raise ValueError(
            f"val_split={val_split!r} and test_split={test_split!r} sum to "
            f"{float(val_split) + float(test_split):g}: together they must leave a non-empty "
            "train split (sum < 1)."
        )


def split_sizes(n: int, val_split: SplitSize, test_split: SplitSize) -> tuple[int, int, int]:
    """Converts fractions or counts into (train, val, test) sample counts summing to ``n``.

    Fractions are rounded to the nearest count (halves up); the train split gets the rest.

    Args:
        n: The number of samples to split.
        val_split: Fraction in [0, 1) or whole count of validation samples.
        test_split: Fraction in [0, 1) or whole count of test samples.

    Returns:
        ``(n_train, n_val, n_test)``.

    Raises:
        ValueError: If the splits leave no training sample.
    """
    validate_split_pair(val_split, test_split)

    def count(v: SplitSize) -> int:
        if is_count(v):
            return int(v)
        return math.floor(float(v) * n + 0.5)

    n_val, n_test = count(val_split), count(test_split)
    n_train = n - n_val - n_test
    if n_train < 1:
        raise ValueError(
            f"val_split={val_split!r} and test_split={test_split!r} take {n_val} + {n_test} of "
            f"{n} samples, leaving {n_train} for training: make them smaller."
        )
    return n_train, n_val, n_test


def random_split_indices(n: int, sizes: Sequence[int], seed: int) -> list[torch.Tensor]:
    """Splits ``range(n)`` as :func:`torch.utils.data.random_split` does with a seeded
    generator (one ``randperm``, cut in order): the same indices, without its warning for an
    empty split (sizes summing to 1 read as fractions), which setup words itself.

    Args:
        n: Number of samples.
        sizes: Counts summing to ``n``.
        seed: Seed of ``torch.Generator().manual_seed(seed)``.

    Returns:
        One int64 index tensor per size.
    """
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(n, generator=generator)
    return [part.clone() for part in torch.split(order, list(sizes))]


def stratified_split_indices(
    labels: torch.Tensor | np.ndarray | Sequence[Any], sizes: Sequence[int], seed: int
) -> list[torch.Tensor]:
    """Splits indices so that every class keeps its proportion in each split.

    Each class is shuffled with the seeded generator and cut by the largest-remainder method,
    so each split's per-class count is within one of its exact share and the split sizes are
    exactly ``sizes``.

    Args:
        labels: One label per sample (any hashable values; tensors and arrays are fine).
        sizes: Counts summing to ``len(labels)``.
        seed: Seed of the generator.

    Returns:
        One int64 index tensor per size, each sorted by the shuffled order within classes.
    """
    label_array = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels)
    if label_array.ndim != 1:
        raise ValueError(
            f"stratify needs one label per sample; got labels of shape {label_array.shape}."
        )
    n = len(label_array)
    if sum(sizes) != n:
        raise ValueError(f"sizes {list(sizes)} do not sum to the number of samples {n}.")
    _, codes = np.unique(label_array, return_inverse=True)
    generator = torch.Generator().manual_seed(seed)
    n_classes = int(codes.max()) + 1 if n else 0
    class_counts = np.bincount(codes, minlength=n_classes)
    quota = _controlled_rounding(class_counts, np.asarray(sizes, dtype=np.int64))
    parts: list[list[torch.Tensor]] = [[] for _ in sizes]
    for c in range(n_classes):
        members = torch.as_tensor(np.flatnonzero(codes == c), dtype=torch.int64)
        members = members[torch.randperm(len(members), generator=generator)]
        start = 0
        for split, k in enumerate(quota[c]):
            parts[split].append(members[start : start + int(k)])
            start += int(k)
    out = []
    for split_parts in parts:
        joined = torch.cat(split_parts) if split_parts else torch.empty(0, dtype=torch.int64)
        out.append(joined[torch.randperm(len(joined), generator=generator)])
    return out


def check_class_labels(labels: torch.Tensor | np.ndarray | Sequence[Any]) -> None:
    """Refuses continuous labels for a stratified split, as scikit-learn's
    ``type_of_target`` does: floats that are not all whole numbers are not classes.

    Raises:
        ValueError: Naming the problem: how many distinct values, an example, and what to do.
    """
    values = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels)
    if values.dtype.kind != "f" or not len(values):
        return
    fractional = values[np.isfinite(values) & (values != np.round(values))]
    if len(fractional) or not np.isfinite(values).all():
        example = fractional[0] if len(fractional) else values[~np.isfinite(values)][0]
        distinct = len(np.unique(values))
        raise ValueError(
            f"stratify=True needs class labels, but these are continuous: float values such "
            f"as {float(example)!r}, {distinct} distinct among {len(values)} samples, would "
            "each be a class of their own. Stratify on classes (ints, or floats that are whole "
            "numbers; bin continuous targets first), or set stratify=False."
        )


def _controlled_rounding(class_counts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Rounds ``class_counts x sizes / n`` to integers with exact row and column sums.

    Every entry is the floor of its exact share or one more, so each class is within one
    sample of its proportion in every split. The extra ones are placed greedily, each class
    (largest deficit first) giving them to the splits with the largest remaining demand
    (the Gale-Ryser construction, which always succeeds), ties broken by larger remainder.
    """
    n = int(class_counts.sum())
    exact = class_counts[:, None] * sizes[None, :] / max(n, 1)
    quota = np.floor(exact).astype(np.int64)
    remainder = exact - quota
    row_deficit = class_counts - quota.sum(axis=1)
    col_deficit = sizes - quota.sum(axis=0)
    for c in np.argsort(-row_deficit, kind="stable"):
        k = int(row_deficit[c])
        if k <= 0:
            continue
        order = np.lexsort((-remainder[c], -col_deficit))[:k]
        quota[c, order] += 1
        col_deficit[order] -= 1
    return quota


def explicit_split_indices(splits: Mapping[str, Any], n: int) -> dict[str, torch.Tensor]:
    """Validates user-given split indices and converts them to int64 tensors.

    Args:
        splits: ``{"train": idx, "val": idx, "test": idx}``; ``train`` is required, the others
            are optional. Each value is a sequence, array or tensor of sample indices.
        n: The dataset's length.

    Returns:
        A dict with all three names (missing ones empty).

    Raises:
        ValueError: For unknown names, indices out of range, repeats, or overlapping splits.
        TypeError: For indices that are not integers.
    """
    if not isinstance(splits, Mapping):
        raise TypeError(
            f"splits={type(splits).__name__} is not accepted: use a dict like "
            "{'train': indices, 'val': indices, 'test': indices}."
        )
    unknown = sorted(set(splits) - set(SPLIT_NAMES))
    if unknown:
        raise ValueError(f"splits has unknown keys {unknown}: accepted keys are {SPLIT_NAMES}.")
    if "train" not in splits:
        raise ValueError("splits must contain 'train' (and optionally 'val' and 'test').")
    out: dict[str, torch.Tensor] = {}
    seen = torch.zeros(n, dtype=torch.bool)
    for name in SPLIT_NAMES:
        raw = splits.get(name)
        if raw is None:
            out[name] = torch.empty(0, dtype=torch.int64)
            continue
        idx = torch.as_tensor(np.asarray(raw.cpu() if isinstance(raw, torch.Tensor) else raw))
        if idx.numel() and (idx.dtype.is_floating_point or idx.dtype == torch.bool):
            raise TypeError(f"splits[{name!r}] has dtype {idx.dtype}: indices must be integers.")
        idx = idx.reshape(-1).to(torch.int64)
        if idx.numel():
            lo, hi = int(idx.min()), int(idx.max())
            if lo < 0 or hi >= n:
                bad = lo if lo < 0 else hi
                raise ValueError(
                    f"splits[{name!r}] contains index {bad}, outside [0, {n}) for a dataset of "
                    f"{n} samples."
                )
            if torch.unique(idx).numel() != idx.numel():
                raise ValueError(f"splits[{name!r}] repeats an index: each index must appear once.")
            overlap = seen[idx]
            if bool(overlap.any()):
                first = int(idx[overlap][0])
                raise ValueError(
                    f"splits[{name!r}] shares index {first} with an earlier split: "
                    "train, val and test must be disjoint."
                )
            seen[idx] = True
        if name == "train" and idx.numel() == 0:
            raise ValueError("splits['train'] is empty: the train split needs samples.")
        out[name] = idx
    return out


def split_fingerprint(n: int, indices: Mapping[str, torch.Tensor]) -> str:
    """Returns a short hash identifying the dataset length and every split's indices."""
    digest = hashlib.sha256(str(n).encode())
    for name in sorted(indices):
        digest.update(name.encode())
        digest.update(indices[name].to(torch.int64).contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def compute_split_indices(
    n: int,
    *,
    explicit: Mapping[str, Any] | None,
    val_split: SplitSize,
    test_split: SplitSize,
    seed: int,
    labels: Callable[[], torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """The sorted indices of each split of ``n`` samples, from the split arguments.

    Args:
        n: Samples in the dataset.
        explicit: Explicit indices per split (``splits=``), which win over the sizes.
        val_split: Fraction or count for validation (0 when given separately).
        test_split: Fraction or count for test (0 when given separately).
        seed: Seeds the split generator (``split_seed``).
        labels: For a stratified split, returns one label per sample; None: a random split.

    Returns:
        ``{"train": idx, "val": idx, "test": idx}``, each in dataset order (shuffling is the
        train sampler's job).

    Raises:
        ValueError: ``labels()`` does not give one label per sample, or the sizes do not fit.
    """
    if explicit is not None:
        return explicit_split_indices(explicit, n)
    sizes = split_sizes(n, val_split, test_split)
    if labels is not None:
        found = labels()
        if len(found) != n:
            raise ValueError(
                f"labels() returned {len(found)} labels for {n} samples: need one each."
            )
        check_class_labels(found)
        parts = stratified_split_indices(found, sizes, seed)
    else:
        parts = random_split_indices(n, sizes, seed)
    return {name: part.sort().values for name, part in zip(SPLIT_NAMES, parts, strict=True)}


def empty_split_notes(
    n: int, asked: Mapping[str, SplitSize], indices: Mapping[str, torch.Tensor]
) -> list[str]:
    """What to say of each split asked for (a non-zero ``val_split`` / ``test_split``) that
    came out empty: a fraction of too few samples rounds to none."""
    words = {"val": "validation", "test": "test"}
    return [
        f"{name}_split={size!r} of {n} sample{'s' if n != 1 else ''} rounds to 0: the "
        f"{words[name]} split is empty" + (", so there is no validation." if name == "val" else ".")
        for name, size in asked.items()
        if size and not len(indices[name])
    ]
