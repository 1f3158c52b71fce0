"""Chat data: :class:`~datamodules.ChatDataModule`, conversations for fine-tuning.

* :mod:`~datamodules.chat.datamodule`: the DataModule; its blends are the tokens layer's
  :class:`~datamodules.tokens.blends.TokenBlends` (``dm.blends``), as text's are.
* its inputs and their token store are the conversations layer's
  :class:`~datamodules.conversations.corpus.RecordCorpus` (records from files, a list or a
  ``datasets.Dataset``: :mod:`datamodules.conversations.records`).
* :mod:`~datamodules.chat.views`: the conversations after ``overlong``; padded and packed
  batches with their labels.
"""

__all__: list[str] = []
