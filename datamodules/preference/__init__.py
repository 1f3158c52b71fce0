"""Preference data: :class:`~datamodules.PreferenceDataModule`, chosen / rejected pairs and
unpaired feedback, for DPO, reward models and KTO.

* :mod:`~datamodules.preference.datamodule`: the DataModule; its inputs and store are the
  conversations layer's :class:`~datamodules.conversations.corpus.RecordCorpus`, its blends the
  tokens layer's :class:`~datamodules.tokens.blends.TokenBlends`.
* :mod:`~datamodules.preference.records`: records as TRL names them, checked.
* :mod:`~datamodules.preference.render`: a record into token ids exactly as TRL's
  ``DPOTrainer`` builds them; a pair as one store document with mask codes; overlong records.
* :mod:`~datamodules.preference.views`: the records of a store; padded, packed and blended views.
* :mod:`~datamodules.preference.batches`: gathered documents into preference batches.
"""

__all__: list[str] = []
