"""Variable-length text: :class:`~datamodules.TextDataModule`, text readers and the vocabulary.

* :mod:`~datamodules.text.datamodule`: the DataModule.
* :mod:`~datamodules.text.arguments`: its argument checks.
* :mod:`~datamodules.text.corpus`: where each split's documents come from.
* :mod:`~datamodules.text.inputs`: input files, read in chunks through the shard layer.
* :mod:`~datamodules.text.readers`: texts and labels in memory, from lists or files read whole.
* :mod:`~datamodules.text.store` / :mod:`~datamodules.text.store_build`: the token store, a
  corpus tokenized once and memory-mapped, and how it is built.
* :mod:`~datamodules.text.token_files`: Megatron-LM and flat (nanoGPT) token files.
* :mod:`~datamodules.text.labels`: label ids across splits.
* :mod:`~datamodules.text.vocab`: the built-in character/word vocabulary and tokenizer glue.
* :mod:`~datamodules.text.encoding`: tokenized texts in one flat buffer; padded batches from it.
* :mod:`~datamodules.text.packing`: packed rows for language models (``packing=True``).
* :mod:`~datamodules.text.inspection`: what ``python -m datamodules inspect`` shows for texts.
* :mod:`~datamodules.text.pack_picture`: the inspect picture of a packed batch.
"""

__all__: list[str] = []
