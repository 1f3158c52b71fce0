"""Chat data: :class:`~datamodules.ChatDataModule`, conversations for fine-tuning.

* :mod:`~datamodules.chat.datamodule`: the DataModule; its blends are the tokens layer's
  :class:`~datamodules.tokens.blends.TokenBlends` (``dm.blends``), as text's are.
* :mod:`~datamodules.chat.corpus`: its inputs and their token store (a part of its own).
* :mod:`~datamodules.chat.records`: records from files, a list or a ``datasets.Dataset``.
* :mod:`~datamodules.chat.views`: the conversations after ``overlong``; padded and packed
  batches with their labels.
"""

__all__: list[str] = []
