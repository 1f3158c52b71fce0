"""DataModules over data that ships with installed packages: nothing is downloaded.

Each is a subclass of one of the library's DataModules that overrides its one extension
method, so that a LightningCLI config (``examples/configs/``) or ``python -m datamodules
inspect --data examples.bundled_data.<Name>`` can name it directly.

(The module is not called ``datasets.py`` on purpose: ``python examples/cli.py`` puts this
folder first on ``sys.path``, where that name would shadow Hugging Face's ``datasets``.)
"""

from __future__ import annotations

from typing import Any

import torch

from datamodules import TensorDataModule


class WineDataModule(TensorDataModule):
    """scikit-learn's wine data: 178 wines, 13 chemical measurements, 3 cultivars.

    Batches are ``(features float32 (B, 13), cultivar int64 (B,))``. The defaults keep 15 %
    for validation and 20 % for test, stratified by cultivar.

    Args:
        batch_size: Samples per batch.
        val_split: Validation share.
        test_split: Test share.
        stratify: Keep the cultivars' proportions in every split.
        **kwargs: Other :class:`~datamodules.base.BaseDataModule` arguments.
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
