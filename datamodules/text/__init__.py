"""Variable-length text: :class:`~datamodules.TextDataModule`, text readers and labels.

* :mod:`~datamodules.text.datamodule`: the DataModule.
* :mod:`~datamodules.text.arguments`: its argument checks.
* :mod:`~datamodules.text.corpus`: where each split's documents come from.
* :mod:`~datamodules.text.readers`: texts and labels in memory, from lists or files read whole.
* :mod:`~datamodules.text.labels`: label ids across splits.
* :mod:`~datamodules.text.views`: the views and samplers of its splits.
* :mod:`~datamodules.text.inspection`: what ``python -m datamodules inspect`` shows for texts.

The token store, its inputs, packing and blends, which chat data uses too, are the shared
layer :mod:`datamodules.tokens`.
"""

__all__: list[str] = []
