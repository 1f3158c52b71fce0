"""Collate functions usable as any DataLoader's ``collate_fn`` (never imports ``datamodules``)."""

from collates.padding import PadCollate, pad_collate

__all__ = ["PadCollate", "pad_collate"]
