"""Reusable, fast and DDP-correct LightningDataModules."""

from datamodules.base import BaseDataModule
from datamodules.tensor import TensorDataModule

__all__ = ["BaseDataModule", "TensorDataModule"]
