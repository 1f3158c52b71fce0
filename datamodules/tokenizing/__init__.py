"""Tokenizers as the data kinds use them, below those kinds (text, image-text).

* :mod:`~datamodules.tokenizing.adapter`: :class:`~datamodules.tokenizing.adapter.FixedLength`,
  a transformers tokenizer, a ``tokenizers.Tokenizer`` or a callable turned into fixed-length
  ``input_ids`` and ``attention_mask``; :func:`~datamodules.tokenizing.adapter.tokenizer_pad_id`.
* :mod:`~datamodules.tokenizing.fingerprint`: what identifies a tokenizer in a store's key.
* :mod:`~datamodules.tokenizing.loading`: a tokenizer named by its path (a folder or a
  ``tokenizer.json``), as command lines and configs give it.
"""

__all__: list[str] = []
