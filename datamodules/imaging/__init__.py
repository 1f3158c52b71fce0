"""Image decoding and the default image transforms, shared by image folders and image streams.

A layer below the data kinds that need it (:mod:`datamodules.images` and
:mod:`datamodules.streaming`), so that both decode the same bytes to the same pixels and
batch them the same way:

* :mod:`~datamodules.imaging.decoding`: image files and encoded bytes to uint8 RGB
  (TorchCodec, Pillow).
* :mod:`~datamodules.imaging.transforms`: RandomResizedCrop + flip and Resize + CenterCrop on
  uint8, the defaults.
* :mod:`~datamodules.imaging.normalize`: the uint8 -> float conversion and normalisation done
  on the device (``on_after_batch_transfer``).
* :mod:`~datamodules.imaging.batches`: decoded images written straight into a reused uint8
  batch.

It imports only :mod:`datamodules.core` and :mod:`collates`.
"""

__all__: list[str] = []
