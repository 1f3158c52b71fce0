"""Image-text data: :class:`~datamodules.ImageTextDataModule` (image-caption pairs).

* :mod:`~datamodules.image_text.datamodule`: the DataModule, assembled from the stream parts
  (:mod:`datamodules.stream_parts`) and the captions.
* :mod:`~datamodules.image_text.captions`: a record's caption found, one of a list chosen per
  epoch, tokenized in the workers.
* :mod:`~datamodules.image_text.arguments`: the argument checks.
"""

__all__: list[str] = []
