"""Image folders: :class:`~datamodules.ImageFolderDataModule`, decoding, the folder index and
the fused default transforms.

* :mod:`~datamodules.images.datamodule`: the DataModule.
* :mod:`~datamodules.images.decoding`: any image file to uint8 RGB (TorchCodec, Pillow).
* :mod:`~datamodules.images.index`: the compact sample list, scanned as torchvision does.
* :mod:`~datamodules.images.transforms`: RandomResizedCrop + flip and Resize + CenterCrop on uint8.
* :mod:`~datamodules.images.batches`: decoded images written straight into the batch.
"""
