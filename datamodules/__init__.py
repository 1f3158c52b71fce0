"""Reusable, fast and DDP-correct LightningDataModules."""

from datamodules.base import BaseDataModule
from datamodules.image_folder import ImageFolderDataModule
from datamodules.monitor import DataWaitMonitor
from datamodules.streaming import StreamingDataModule
from datamodules.tensor import TensorDataModule
from datamodules.text import TextDataModule

__all__ = [
    "BaseDataModule",
    "DataWaitMonitor",
    "ImageFolderDataModule",
    "StreamingDataModule",
    "TensorDataModule",
    "TextDataModule",
]
