"""Reusable, fast and DDP-correct LightningDataModules.

The public names are loaded lazily (PEP 562): ``import datamodules`` imports nothing heavy,
so ``python -m datamodules shards`` / ``index`` start without Lightning or torch, while
``from datamodules import TextDataModule`` imports that DataModule (and Lightning) on first
use. The tools that :class:`BaseDataModule` hands work to register themselves when core first
needs them (:mod:`datamodules.core.hooks`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from datamodules.core.lazy import lazy_exports

__all__ = [
    "AudioDataModule",
    "BaseDataModule",
    "ChatDataModule",
    "DataWaitMonitor",
    "DetectionDataModule",
    "ImageFolderDataModule",
    "ImageTextDataModule",
    "PreferenceDataModule",
    "SegmentationDataModule",
    "Source",
    "StreamingDataModule",
    "TensorDataModule",
    "TextDataModule",
    "TimeSeriesDataModule",
]

#: Where each public name is defined.
_HOMES = {
    "AudioDataModule": "datamodules.audio.datamodule",
    "BaseDataModule": "datamodules.core.base",
    "ChatDataModule": "datamodules.chat.datamodule",
    "DataWaitMonitor": "datamodules.tools.monitor",
    "DetectionDataModule": "datamodules.detection.datamodule",
    "ImageFolderDataModule": "datamodules.images.datamodule",
    "ImageTextDataModule": "datamodules.image_text.datamodule",
    "PreferenceDataModule": "datamodules.preference.datamodule",
    "SegmentationDataModule": "datamodules.detection.segmentation",
    "Source": "datamodules.core.sources",
    "StreamingDataModule": "datamodules.streaming.datamodule",
    "TensorDataModule": "datamodules.tensor",
    "TextDataModule": "datamodules.text.datamodule",
    "TimeSeriesDataModule": "datamodules.time_series.datamodule",
}

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from datamodules.audio.datamodule import AudioDataModule
    from datamodules.chat.datamodule import ChatDataModule
    from datamodules.core.base import BaseDataModule
    from datamodules.core.sources import Source
    from datamodules.detection.datamodule import DetectionDataModule
    from datamodules.detection.segmentation import SegmentationDataModule
    from datamodules.image_text.datamodule import ImageTextDataModule
    from datamodules.images.datamodule import ImageFolderDataModule
    from datamodules.preference.datamodule import PreferenceDataModule
    from datamodules.streaming.datamodule import StreamingDataModule
    from datamodules.tensor import TensorDataModule
    from datamodules.text.datamodule import TextDataModule
    from datamodules.time_series.datamodule import TimeSeriesDataModule
    from datamodules.tools.monitor import DataWaitMonitor


__getattr__, __dir__ = lazy_exports(__name__, globals(), _HOMES)
