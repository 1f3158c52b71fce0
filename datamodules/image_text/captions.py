"""The captions of image-text pairs: found in a record, one chosen per epoch, tokenized.

:class:`CaptionFields` is what an image batch of :class:`~datamodules.ImageTextDataModule`
holds beside the images (a :class:`~datamodules.stream_parts.image_batches.RecordFields`). In
the DataLoader workers, for each record of a batch, it:

* finds the caption: the member or column ``text_key`` names (``"txt"``); a dotted key reaches
  into a JSON member or a struct column (``"json.caption"``: ``record["json"]["caption"]``);
* picks one caption of a list: epoch ``e`` takes the caption at ``order[e % n]``, where
  ``order`` is a permutation of the ``n`` captions drawn from ``(seed, key)`` (the record's
  ``__key__``, else its shard's name and position); so n epochs use all n captions, and a
  resumed epoch the same caption as the run it continues;
* tokenizes it (:class:`~datamodules.tokenizing.adapter.FixedLength`) into ``input_ids``
  int64 ``(B, max_length)`` padded with the tokenizer's pad id, and ``attention_mask``
  ``(B, max_length)`` (1 on the caption's tokens); without a tokenizer the batch holds
  ``"text"``, the captions as strings.

A record without the caption, or with a caption that is not a string (or a non-empty list of
them), is bad: the collate names its shard and key, and under ``on_error="skip"`` counts it.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from datamodules.stream_parts.image_batches import BadRecord
from datamodules.tokenizing.adapter import FixedLength

__all__ = ["CaptionFields", "caption_of"]


def caption_of(record: Mapping[str, Any], text_key: str) -> Any:
    """The value ``text_key`` names in a record: the field itself, else a dotted path into a
    JSON member or struct column (``"json.caption"``).

    Raises:
        BadRecord: The record has no such field.
    """
    if text_key in record:
        return record[text_key]
    head, _, rest = text_key.partition(".")
    value: Any = record.get(head) if rest else None
    for part in rest.split(".") if value is not None else ():
        if not isinstance(value, Mapping) or part not in value:
            value = None
            break
        value = value[part]
    if value is None:
        fields = sorted(k for k in record if not k.startswith("__"))
        inside = ""
        if rest and isinstance(record.get(head), Mapping):
            inside = f"; {head!r} holds {sorted(record[head])}"
        raise BadRecord(f"has no caption {text_key!r} (text_key); its fields: {fields}{inside}")
    return value


def _record_key(record: Mapping[str, Any]) -> str:
    if "__key__" in record:
        return str(record["__key__"])
    return f"{os.path.basename(str(record.get('__url__', '')))}#{record.get('__index__', '')}"


class CaptionFields:
    """A batch's captions beside its images (see the module docstring).

    Args:
        text_key: The caption's member or column (a dotted key reaches into a JSON member).
        tokenizer: A transformers tokenizer, a ``tokenizers.Tokenizer``, a callable, or None
            (captions as strings).
        max_length: Tokens per caption, after truncation and padding.
        seed: Seeds each record's order of captions (with its key).
    """

    def __init__(self, text_key: str, tokenizer: Any, max_length: int, seed: int) -> None:
        self.text_key = text_key
        self.tokens = None if tokenizer is None else FixedLength(tokenizer, max_length)
        self.seed = int(seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose captions are picked (the stream calls it as an epoch starts)."""
        self.epoch = int(epoch)

    def caption(self, record: Mapping[str, Any]) -> str:
        """The record's caption in this epoch.

        Raises:
            BadRecord: No caption, an empty list, or a caption that is not a string.
        """
        value = caption_of(record, self.text_key)
        if isinstance(value, (list, tuple)):
            if not value:
                raise BadRecord(f"caption {self.text_key!r} (text_key) is an empty list")
            order = random.Random(f"{self.seed}:{_record_key(record)}").sample(
                range(len(value)), len(value)
            )
            value = value[order[self.epoch % len(value)]]
        if isinstance(value, (bytes, bytearray)):
            try:
                value = bytes(value).decode("utf-8")
            except UnicodeDecodeError as error:
                raise BadRecord(f"caption {self.text_key!r} is not UTF-8: {error}") from error
        if not isinstance(value, str):
            raise BadRecord(
                f"caption {self.text_key!r} (text_key) is a {type(value).__name__}, not a "
                "string or a list of strings"
            )
        return value

    def __call__(self, record: Mapping[str, Any]) -> Any:
        """The record's caption, tokenized when there is a tokenizer."""
        text = self.caption(record)
        if self.tokens is None:
            return text
        try:
            return self.tokens(text)
        except Exception as error:  # named with its shard and key by the collate
            raise BadRecord(f"the tokenizer failed on caption {text[:80]!r}: {error}") from error

    def batch(self, values: list[Any]) -> dict[str, Any]:
        """``{"input_ids", "attention_mask"}`` int64 ``(B, max_length)``, or ``{"text"}``."""
        if self.tokens is None:
            return {"text": list(values)}
        ids = torch.from_numpy(np.stack([v[0] for v in values]))
        lengths = torch.tensor([v[1] for v in values], dtype=torch.int64)
        mask = (torch.arange(ids.shape[1]) < lengths[:, None]).to(torch.int64)
        return {"input_ids": ids, "attention_mask": mask}
