"""Image folders: :class:`~datamodules.ImageFolderDataModule`, the folder index and its batches.

* :mod:`~datamodules.images.datamodule`: the DataModule.
* :mod:`~datamodules.images.index`: the compact sample list, scanned as torchvision does.
* :mod:`~datamodules.images.batches`: a split's images decoded straight into the batch.

Decoding and the default transforms are in :mod:`datamodules.imaging` (shared with the image
records of streams).
"""

__all__: list[str] = []
