"""DataModules over data that ships with installed packages: nothing is downloaded.

Each is a subclass of one of the library's DataModules that overrides its one extension
method, so that a LightningCLI config (``examples/configs/``) or ``python -m datamodules
inspect --data examples.bundled_data.<Name>`` can name it directly.

(The module is not called ``datasets.py`` on purpose: ``python examples/cli.py`` puts this
folder first on ``sys.path``, where that name would shadow Hugging Face's ``datasets``.)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from datamodules import (
    ImageFolderDataModule,
    StreamingDataModule,
    TensorDataModule,
    TimeSeriesDataModule,
)
from datamodules.images.index import ImageFolderIndex


class WineDataModule(TensorDataModule):
    """scikit-learn's wine data: 178 wines, 13 chemical measurements, 3 cultivars.

    Batches are ``(features float32 (B, 13), cultivar int64 (B,))``. The defaults keep 15 %
    for validation and 20 % for test, stratified by cultivar.

    Args:
        batch_size: Samples per batch.
        val_split: Validation share.
        test_split: Test share.
        stratify: Keep the cultivars' proportions in every split.
        **kwargs: Other :class:`~datamodules.core.base.BaseDataModule` arguments.
    """

    def __init__(
        self,
        batch_size: int = 16,
        val_split: float | int = 0.15,
        test_split: float | int = 0.2,
        stratify: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            batch_size=batch_size,
            val_split=val_split,
            test_split=test_split,
            stratify=stratify,
            **kwargs,
        )

    def load_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        from sklearn.datasets import load_wine

        wine = load_wine()
        features = torch.tensor(wine.data, dtype=torch.float32)
        return features, torch.tensor(wine.target, dtype=torch.int64)


def digits_cache() -> Path:
    """``$XDG_CACHE_HOME/datamodules/digits`` (``~/.cache/...`` by default), read when called."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "datamodules" / "digits"


class DigitsImageFolder(ImageFolderDataModule):
    """scikit-learn's handwritten digits as an image folder: 1,797 real 8x8 scans in ``0/``..``9/``.

    The same data and settings as ``examples/train_image_folder.py``: the digits are written
    once as PNG class folders (:func:`examples.train_image_folder.write_digits`) into ``root``,
    by ``prepare_data`` or, outside a Trainer, by :meth:`find_samples`; images are resized to
    ``image_size``, training adds a mild affine jitter (digits are small and centred:
    RandomResizedCrop would cut strokes off), and pixels are normalised with mean and std 0.5.

    A ``root`` of your own that already holds files is read as it is (nothing is written
    into it), so the same settings also train on your class folders.

    Args:
        root: Where the digits are written (if missing, or the folder is empty) and read;
            default :func:`digits_cache`.
        image_size: Side of the square images.
        batch_size: Samples per batch.
        val_split: Validation share.
        test_split: Test share.
        mean: Per-channel mean.
        std: Per-channel standard deviation.
        train_transforms: Default Resize + RandomAffine(10 degrees, 10% shift).
        eval_transforms: Default Resize.
        **kwargs: Other :class:`~datamodules.ImageFolderDataModule` arguments.
    """

    def __init__(
        self,
        root: str | None = None,
        image_size: int = 16,
        batch_size: int = 64,
        val_split: float | int = 0.1,
        test_split: float | int = 0.2,
        mean: tuple[float, float, float] = (0.5, 0.5, 0.5),
        std: tuple[float, float, float] = (0.5, 0.5, 0.5),
        train_transforms: Callable[[Any], Any] | None = None,
        eval_transforms: Callable[[Any], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        from torchvision.transforms import v2

        size = (image_size, image_size)
        if train_transforms is None:
            train_transforms = v2.Compose(
                [v2.Resize(size), v2.RandomAffine(degrees=10, translate=(0.1, 0.1))]
            )
        if eval_transforms is None:
            eval_transforms = v2.Resize(size)
        self.default_root = root is None
        super().__init__(
            str(digits_cache() if root is None else root),
            image_size=image_size,
            batch_size=batch_size,
            val_split=val_split,
            test_split=test_split,
            mean=mean,
            std=std,
            train_transforms=train_transforms,
            eval_transforms=eval_transforms,
            **kwargs,
        )

    def prepare_data(self) -> None:
        """Writes the digits into the cache unless they are there (once per node), or into a
        ``root`` given that is missing or empty."""
        from examples.train_image_folder import write_digits

        root = Path(self.root)
        if self.default_root or not root.exists() or not any(root.iterdir()):
            write_digits(root)

    def find_samples(self) -> ImageFolderIndex:
        """Writes the digits first if they are missing (e.g. ``setup`` without a Trainer)."""
        self.prepare_data()
        return super().find_samples()


class DigitsStream(StreamingDataModule):
    """scikit-learn's digits as record shards, the data of ``examples/train_streaming.py``.

    With no ``train_files``, the digits are written once
    (:func:`examples.train_streaming.write_digit_shards`) into ``cache``: 80 % as six Parquet
    train shards of uneven sizes, 20 % as two gzipped JSONL validation shards, each record
    ``{"id": int, "pixels": 64 ints, "label": int}``. They are written by ``prepare_data`` or,
    outside a Trainer, by ``setup``. Shards of your own (same record layout) are read as
    they are.

    Args:
        train_files: Train shards (default: the digits' Parquet shards in ``cache``).
        val_files: Validation shards (default with the digits: their JSONL shards).
        cache: Where the digits' shards go (default ``$XDG_CACHE_HOME/datamodules/digit_shards``).
        batch_size: Records per batch.
        shuffle_buffer: Records each worker shuffles through.
        **kwargs: Other :class:`~datamodules.StreamingDataModule` arguments.
    """

    def __init__(
        self,
        train_files: str | list[str] | None = None,
        val_files: str | list[str] | None = None,
        cache: str | None = None,
        batch_size: int = 64,
        shuffle_buffer: int = 500,
        **kwargs: Any,
    ) -> None:
        self.shard_root = Path(cache) if cache else digits_cache().parent / "digit_shards"
        self.writes_digits = train_files is None
        if self.writes_digits:
            train_files = str(self.shard_root / "train-*.parquet")
            val_files = val_files or str(self.shard_root / "val-*.jsonl.gz")
        super().__init__(
            train_files, val_files, batch_size=batch_size, shuffle_buffer=shuffle_buffer, **kwargs
        )

    def prepare_data(self) -> None:
        """Writes the digits' shards unless they are there (once per node)."""
        if self.writes_digits:
            from examples.train_streaming import write_digit_shards

            write_digit_shards(self.shard_root)

    def setup(self, stage: str | None = None) -> None:
        self.prepare_data()
        super().setup(stage)


class Co2DataModule(TimeSeriesDataModule):
    """statsmodels' weekly CO2 at Mauna Loa, 1958-2001 (2,284 weeks, 59 missing: masked).

    One series at ``freq="W-SAT"``; the last ``prediction_length`` weeks test and the
    ``prediction_length`` before them validate (splits in time).

    Args:
        context_length: Weeks of context.
        prediction_length: Weeks of horizon.
        val_split: The last weeks (before the test weeks) that validate.
        test_split: The last weeks that test.
        **kwargs: Other :class:`~datamodules.TimeSeriesDataModule` arguments.
    """

    def __init__(
        self,
        context_length: int = 104,
        prediction_length: int = 52,
        val_split: int | float = 52,
        test_split: int | float = 52,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            time_column="time", freq="W-SAT", context_length=context_length,
            prediction_length=prediction_length, val_split=val_split, test_split=test_split,
            **kwargs,
        )  # fmt: skip

    def load_frame(self) -> Any:
        """The weekly series as a frame of ``time`` and ``target``."""
        import pandas as pd
        import statsmodels.api as sm

        data = sm.datasets.co2.load_pandas().data
        return pd.DataFrame({"time": data.index, "target": data["co2"].to_numpy()})
