"""TensorDataModule: in-memory tensors, batched by one indexing call per tensor.

Batches never go through ``__getitem__`` and ``default_collate`` per sample: the sampler
yields one index tensor per batch and each tensor is indexed once with it, which is the
memory-bound limit of batching (see ``benchmarks/bench_tensor.py``).

Extension point: override :meth:`TensorDataModule.load_tensors` to build the tensors of your
own dataset (it runs once, in ``setup``).
"""

from __future__ import annotations

import os
import pickle
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from datamodules.core.base import BaseDataModule
from datamodules.core.checks import check_path, int_mistake, rejected
from datamodules.core.hardware import AUTO, GATHERED
from datamodules.core.keywords import shared_arguments
from datamodules.core.views import SplitView, TensorBatchView

__all__ = [
    "FILE_SUFFIXES",
    "LABEL_KEYS",
    "TensorDataModule",
    "TensorLike",
    "Tensors",
    "check_tensors",
    "load_tensor_file",
]

TensorLike = torch.Tensor | np.ndarray
Tensors = tuple[torch.Tensor, ...] | dict[str, torch.Tensor]
LABEL_KEYS = ("y", "label", "labels", "target", "targets")
FILE_SUFFIXES = (".pt", ".pth", ".npz", ".npy")


def _as_tensor(value: Any, name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise TypeError(f"{name} is a numpy array of Python objects: use a numeric array.")
        return torch.from_numpy(value)
    raise TypeError(
        f"{name} is a {type(value).__name__}: TensorDataModule takes torch tensors or numpy arrays."
    )


def _check_suffix(file: Path) -> None:
    if file.suffix not in FILE_SUFFIXES:
        raise ValueError(
            f"path={str(file)!r} is not accepted: use a file ending in {', '.join(FILE_SUFFIXES)}."
        )


def load_tensor_file(path: str | os.PathLike[str]) -> Tensors:
    """Loads tensors from a ``.pt``/``.pth``, ``.npz`` or ``.npy`` file without unpickling code.

    ``.pt`` files are read with ``torch.load(weights_only=True)`` and may hold a tensor, a
    tuple/list of tensors or a dict of tensors. ``.npz`` files give a dict of named arrays and
    ``.npy`` one array; both are read with ``allow_pickle=False``.

    Args:
        path: The file.

    Returns:
        A tuple of tensors, or a dict of named tensors.

    Raises:
        FileNotFoundError: If the file does not exist.
        ValueError: For an unknown suffix or a file that holds something other than tensors.
    """
    file = Path(path)
    _check_suffix(file)
    if not file.is_file():
        raise FileNotFoundError(f"path={str(path)!r}: no such file.")
    try:
        if file.suffix == ".npy":
            return (_as_tensor(np.load(file, allow_pickle=False), str(file)),)
        if file.suffix == ".npz":
            with np.load(file, allow_pickle=False) as archive:
                return {key: _as_tensor(archive[key], f"{file}[{key!r}]") for key in archive.files}
        loaded = torch.load(file, map_location="cpu", weights_only=True)
    except (zipfile.BadZipFile, ValueError, OSError, RuntimeError, pickle.UnpicklingError) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise ValueError(f"path={str(path)!r} could not be read as tensors: {error}") from error
    if isinstance(loaded, torch.Tensor):
        return (loaded,)
    if isinstance(loaded, (tuple, list)):
        return tuple(_as_tensor(t, f"{file}[{i}]") for i, t in enumerate(loaded))
    if isinstance(loaded, Mapping):
        return {str(k): _as_tensor(v, f"{file}[{k!r}]") for k, v in loaded.items()}
    raise ValueError(
        f"path={str(path)!r} holds a {type(loaded).__name__}: expected a tensor, a tuple/list of "
        "tensors or a dict of tensors."
    )


def check_tensors(tensors: Tensors) -> Tensors:
    """Checks that there is at least one tensor and that all share their first dimension."""
    items = list(tensors.items()) if isinstance(tensors, dict) else list(enumerate(tensors))
    if not items:
        raise ValueError("TensorDataModule needs at least one tensor (positional, dict or path=).")
    lengths = {}
    for key, value in items:
        if value.dim() == 0:
            raise ValueError(f"tensor {key!r} is a scalar: every tensor needs a first dimension.")
        lengths[key] = value.shape[0]
    if len(set(lengths.values())) > 1:
        detail = ", ".join(f"{k!r}: {v}" for k, v in lengths.items())
        raise ValueError(
            f"tensors have different lengths along the first dimension ({detail}): "
            "every tensor needs one row per sample."
        )
    return tensors


class TensorDataModule(BaseDataModule):
    """A DataModule over tensors in memory: ``TensorDataModule(X, y)``.

    Batches are tuples in the order given (``(x, y)``), or dicts when the tensors are given
    as a dict (``TensorDataModule({"x": X, "y": y})``) or loaded from an ``.npz`` file.

    Args:
        *tensors: Tensors or numpy arrays (shared, not copied) with one row per sample, or a
            single dict of them.
        path: A ``.pt``/``.pth``, ``.npz`` or ``.npy`` file to load instead (safely, no
            pickle), e.g. from a LightningCLI config.
        label_key: Which tensor holds class labels (for ``stratify=True``): an int position or
            a dict key. Defaults to the last tensor of a tuple of two or more, or the first of
            the keys ``y``, ``label``, ``labels``, ``target``, ``targets`` of a dict.
        train_transforms: Applied to whole train batches (the shared arguments' other
            entries are :class:`~datamodules.BaseDataModule`'s).
        eval_transforms: Applied to whole validation, test and predict batches.

    Example:
        >>> dm = TensorDataModule(torch.randn(100, 3), torch.arange(100) % 2, batch_size=10)
        >>> dm.setup("fit")
        >>> x, y = next(iter(dm.train_dataloader()))
        >>> x.shape, y.shape
        (torch.Size([10, 3]), torch.Size([10]))
    """

    fetch = GATHERED
    hparams_ignore = (*BaseDataModule.hparams_ignore, "tensors")

    def __init__(
        self,
        *tensors: TensorLike | Mapping[str, TensorLike],
        path: str | os.PathLike | None = None,
        label_key: int | str | None = None,
        batch_size: int = 32,
        val_split: int | float = 0.1,
        test_split: int | float = 0.0,
        split_seed: int = 42,
        splits: Mapping[str, Any] | None = None,
        stratify: bool = False,
        num_workers: int | str = AUTO,
        pin_memory: bool | str = AUTO,
        persistent_workers: bool | str = AUTO,
        prefetch_factor: int | str | None = AUTO,
        shuffle: bool = True,
        drop_last: bool = False,
        shuffle_seed: int | None = None,
        train_transforms: Callable[[Any], Any] | None = None,
        eval_transforms: Callable[[Any], Any] | None = None,
        reuse_batch_memory: bool = True,
    ) -> None:
        super().__init__(**shared_arguments(locals()))
        if tensors and path is not None:
            raise ValueError("give tensors or path=, not both.")
        self.path = check_path(path, "path", "a file path string", allow_none=True)
        if self.path is not None:
            _check_suffix(Path(self.path))
        self.label_key = label_key
        self._given: Tensors | None = None
        if tensors:
            if len(tensors) == 1 and isinstance(tensors[0], Mapping):
                named = {str(k): _as_tensor(v, f"tensor {k!r}") for k, v in tensors[0].items()}
                self._given = check_tensors(named)
            else:
                self._given = check_tensors(
                    tuple(_as_tensor(t, f"tensor {i}") for i, t in enumerate(tensors))
                )
        elif path is None and type(self).load_tensors is TensorDataModule.load_tensors:
            raise ValueError(
                "TensorDataModule needs data: pass tensors (TensorDataModule(X, y)), a dict of "
                "tensors, path= to a .pt/.npz/.npy file, or override load_tensors()."
            )
        if self._given is not None and (label_key is not None or self.stratify):
            self._label_tensor(self._given)  # validates label_key early

    def load_tensors(self) -> Tensors:
        """Returns the tensors: those given, else those in ``path``. Override for a new dataset.

        Returns:
            A tuple of tensors or a dict of named tensors, one row per sample.
        """
        if self._given is not None:
            return self._given
        assert self.path is not None
        return load_tensor_file(self.path)

    def build_dataset(self) -> Tensors:
        return check_tensors(self.load_tensors())

    def num_samples(self, dataset: Tensors) -> int:
        first = next(iter(dataset.values())) if isinstance(dataset, dict) else dataset[0]
        return int(first.shape[0])

    def _label_tensor(self, tensors: Tensors) -> torch.Tensor:
        key = self.label_key
        if isinstance(tensors, dict):
            if key is None:
                key = next((k for k in LABEL_KEYS if k in tensors), None)
                if key is None:
                    raise ValueError(
                        f"stratify=True needs label_key: none of {LABEL_KEYS} is among the "
                        f"tensors {sorted(tensors)}."
                    )
            if key not in tensors:
                raise ValueError(f"label_key={key!r} is not among the tensors {sorted(tensors)}.")
            return tensors[key]
        if key is None:
            if len(tensors) < 2:
                raise ValueError(
                    "stratify=True needs labels: pass them as a second tensor, "
                    "TensorDataModule(X, y)."
                )
            key = len(tensors) - 1
        mistake = int_mistake(key, -len(tensors), len(tensors) - 1)
        if mistake is not None:
            accepted = f"a position in [0, {len(tensors)}) of the tensors given"
            raise rejected("label_key", self.label_key, accepted, mistake)
        return tensors[key]

    def labels(self) -> torch.Tensor:
        labels = self._label_tensor(self.dataset)
        if labels.dim() != 1:
            raise ValueError(
                f"stratify=True needs a 1-D label tensor; label_key={self.label_key!r} selects one "
                f"of shape {tuple(labels.shape)}."
            )
        return labels

    def make_view(self, split: str, dataset: Tensors, indices: torch.Tensor) -> SplitView:
        return TensorBatchView(dataset, indices, self.transform_for(split))

    @property
    def num_classes(self) -> int | None:
        """Number of classes: the largest label + 1, when the labels (``label_key``, or the
        default label tensor) are 1-D integers; None without such labels."""
        self._require_setup()
        try:
            labels = self._label_tensor(self.dataset)
        except ValueError:  # no label tensor
            return None
        if labels.dim() != 1 or labels.dtype.is_floating_point or labels.dtype == torch.bool:
            return None
        return int(labels.max()) + 1 if labels.numel() else 0

    @property
    def tensors(self) -> Tensors:
        """The full data (after ``setup``)."""
        self._require_setup()
        return self.dataset

    def extra_summary(self) -> list[str]:
        if self.dataset is None:
            return []
        items = self.dataset.items() if isinstance(self.dataset, dict) else enumerate(self.dataset)
        shapes = ", ".join(f"{k}: {tuple(v.shape)} {v.dtype}" for k, v in items)
        return [f"  tensors: {shapes}"]
