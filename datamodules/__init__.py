"""Reusable, fast and DDP-correct LightningDataModules."""

# The tools come first: importing them registers what BaseDataModule hands to them
# (datamodules.core.hooks), before any DataModule can be used.
import datamodules.tools  # noqa: F401  (isort: skip)
from datamodules.core.base import BaseDataModule
from datamodules.images.datamodule import ImageFolderDataModule
from datamodules.streaming.datamodule import StreamingDataModule
from datamodules.streaming.mixing import Source
from datamodules.tensor import TensorDataModule
from datamodules.text.datamodule import TextDataModule
from datamodules.tools.monitor import DataWaitMonitor

__all__ = [
    "BaseDataModule",
    "DataWaitMonitor",
    "ImageFolderDataModule",
    "Source",
    "StreamingDataModule",
    "TensorDataModule",
    "TextDataModule",
]
