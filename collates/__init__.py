"""Collate functions usable as any DataLoader's ``collate_fn`` (never imports ``datamodules``).

* :mod:`~collates.padding`: :class:`PadCollate` / :func:`pad_collate`, padding per field.
* :mod:`~collates.records`: :func:`~collates.records.collate_records`, dict records of streams.
* :mod:`~collates.images`: :func:`~collates.images.stack_uint8_images`.
* :mod:`~collates.fields`: the per-field building blocks.
"""

from collates.padding import PadCollate, pad_collate

__all__ = ["PadCollate", "pad_collate"]
