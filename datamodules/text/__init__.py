"""Variable-length text: :class:`~datamodules.TextDataModule`, text readers and the vocabulary.

* :mod:`~datamodules.text.datamodule`: the DataModule.
* :mod:`~datamodules.text.arguments`: its argument checks.
* :mod:`~datamodules.text.readers`: texts and labels from memory or from .txt/.csv/.jsonl files.
* :mod:`~datamodules.text.vocab`: the built-in character/word vocabulary and tokenizer glue.
* :mod:`~datamodules.text.encoding`: tokenized texts in one flat buffer; padded batches from it.
* :mod:`~datamodules.text.packing`: packed rows for language models (``packing=True``).
* :mod:`~datamodules.text.inspection`: what ``python -m datamodules inspect`` shows for texts.
* :mod:`~datamodules.text.pack_picture`: the inspect picture of a packed batch.
"""
