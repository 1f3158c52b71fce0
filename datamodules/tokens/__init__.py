"""Tokens: the shared layer below text and chat data (token ids in flat buffers and on disk).

* :mod:`~datamodules.tokens.inputs`: input files, read in chunks through the shard layer.
* :mod:`~datamodules.tokens.store` / :mod:`~datamodules.tokens.store_build`: the token store, a
  corpus tokenized once and memory-mapped, and how it is built.
* :mod:`~datamodules.tokens.token_files`: Megatron-LM and flat (nanoGPT) token files.
* :mod:`~datamodules.tokens.token_checks`: checks of token ids against a vocabulary.
* :mod:`~datamodules.tokens.vocab`: the built-in character/word vocabulary and tokenizer glue.
* :mod:`~datamodules.tokens.encoding`: tokenized texts in one flat buffer; padded batches from it.
* :mod:`~datamodules.tokens.packing`: packed rows for language models (``packing=True``).
* :mod:`~datamodules.tokens.mixture` / :mod:`~datamodules.tokens.blends` /
  :mod:`~datamodules.tokens.blend_resume` / :mod:`~datamodules.tokens.blend_views`: blends of
  token corpora, their quotas and resume; :class:`~datamodules.tokens.blends.TokenBlends` is
  the component that text and chat DataModules hold as ``dm.blends``.
"""

__all__: list[str] = []
