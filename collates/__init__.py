"""Collate functions usable as any DataLoader's ``collate_fn`` (never imports ``datamodules``).

* :mod:`~collates.padding`: :class:`PadCollate` / :func:`pad_collate`, padding per field.
* :mod:`~collates.packing`: :class:`PackCollate` / :func:`pack_collate`, token sequences
  packed into full rows with document boundaries (language-model training).
* :mod:`~collates.pack_plan`: the pack plans (which piece of which document goes where).
* :mod:`~collates.records`: :func:`~collates.records.collate_records`, dict records of streams.
* :mod:`~collates.images`: :func:`~collates.images.stack_uint8_images`.
* :mod:`~collates.fields`: the per-field building blocks.
"""

from collates.packing import PackCollate, pack_collate
from collates.padding import PadCollate, pad_collate

__all__ = ["PackCollate", "PadCollate", "pack_collate", "pad_collate"]
