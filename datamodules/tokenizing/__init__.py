"""Tokenizers as the data kinds use them, below those kinds (text, image-text).

* :mod:`~datamodules.tokenizing.adapter`: :class:`~datamodules.tokenizing.adapter.FixedLength`,
  a transformers tokenizer, a ``tokenizers.Tokenizer`` or a callable turned into fixed-length
  ``input_ids`` and ``attention_mask``; :func:`~datamodules.tokenizing.adapter.tokenizer_pad_id`.
* :mod:`~datamodules.tokenizing.fingerprint`: what identifies a tokenizer in a store's key.
"""

__all__: list[str] = []
