"""Padding collate for variable-length samples: `PadCollate` and `pad_collate`.

Either can be a DataLoader's ``collate_fn`` (dict records of streams:
:func:`collates.records.collate_records`). Samples may be bare sequences (tensors, numeric
arrays, lists of numbers), tuples of fields such as ``(sequence, label)``, or dicts. Each field is
collated by what it holds:

* a sequence (a tensor or numeric array with at least one dimension, or a list of numbers,
  possibly nested) is padded along its first dimension to the longest in the batch; the other
  dimensions must match; dtypes are kept (mixed numeric dtypes are promoted as `torch.cat` does);
* a number (Python or NumPy scalar, 0-d tensor) is stacked into a 1-D tensor: Python ints become
  int64, bools bool, and floats `torch.get_default_dtype()` (float32), so that float targets match
  the model's parameters (`default_collate` would make them float64);
* anything else (strings, None, nested dicts, ...) is kept as a list.

This module never imports the ``datamodules`` package.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from collates._checks import int_mistake
from collates.fields import (
    ARRAY,
    NUMBER,
    OBJECT,
    PLAIN,
    SCALARS,
    Number,
    Side,
    as_sequences,
    check_keys,
    column_kind,
    describe_value,
    pad_sequences,
    record_keys,
    to_tensor,
)

__all__ = ["PadCollate", "pad_collate"]


def _check_side(name: str, value: Any) -> None:
    if value not in ("left", "right"):
        mistake = ValueError if isinstance(value, str) else TypeError
        raise mistake(f"{name} must be 'left' or 'right', got {value!r}")


def _check_number(name: str, value: Any) -> None:
    if not isinstance(value, SCALARS):
        raise TypeError(f"{name} must be a number (int, float or bool), got {value!r}")


def _check_length(name: str, value: Any) -> None:
    mistake = int_mistake(value, 1, allow_none=True)
    if mistake is not None:
        raise mistake(f"{name} must be None or a positive int, got {value!r}")


def _check_names(name: str, value: Any) -> tuple[Hashable, ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Collection):
        raise TypeError(f"{name} must be a list of field names or positions, got {value!r}")
    return tuple(value)


class PadCollate:
    """Collate variable-length samples into padded batches with masks and lengths.

    Usable on its own as any DataLoader's ``collate_fn`` (it is picklable, so worker processes
    work). Fields are collated as the module docstring says: sequences are padded along their
    first dimension, numbers stacked, other objects kept as lists. With default options the padded
    tensor is exactly ``torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True,
    padding_value=pad_value, padding_side=padding_side)``.

    Output structure, by the kind of sample (decided by sample 0; every sample must agree):

    * **Bare sequence** (a tensor or numeric array with ``ndim >= 1``, or a list whose first
      item is a number, such as token ids): returns the tuple ``(padded, attention_mask,
      lengths)`` with shapes ``(B, L, *trailing)``, ``(B, L)`` and ``(B,)``.
    * **Tuple** of fields, e.g. ``(sequence, label)`` (or a list whose first item is not a
      number): returns a tuple of the collated fields in the same positions, followed by
      ``attention_mask`` and ``lengths`` of the *main* field, e.g.
      ``(padded, labels, attention_mask, lengths)``.
      The main field is the first padded field; padded fields after it are label fields. If no
      field is a sequence, nothing is appended.
    * **Dict**: returns a dict with the samples' keys in order, then ``"attention_mask"`` and
      ``"lengths"`` for the main field, then ``"<key>_attention_mask"`` and ``"<key>_lengths"``
      for every other padded field that is neither a label field nor a mask field. The main
      field is the first padded field that is neither (in ``sequence_fields`` order when given,
      else in key order). Label fields are the keys in ``label_fields`` (default ``"labels"``,
      ``"label"``); mask fields are keys ending in ``"attention_mask"`` (e.g. a tokenizer's own
      mask), which are padded with 0 unless ``pad_value`` names them. A key the samples already
      have is never overwritten by a generated one.

    Padded fields are those holding sequences, or, when ``sequence_fields`` is given, exactly
    those fields (other sequence-valued fields are then stacked and must have equal shapes: use
    this for fixed-size tensors such as images next to a token sequence). Which keys appear
    depends only on the samples' structure, never on the lengths in a batch.

    ``attention_mask`` is 1 at real positions and 0 at padding, of dtype ``mask_dtype``
    (int64 by default, as in Hugging Face; pass ``torch.bool`` for a bool mask). ``lengths``
    are int64 lengths after truncation. Truncation (``max_length``) and ``pad_to_multiple_of``
    apply to every padded field, labels included, so token-level labels stay aligned.

    Args:
        pad_value: Value written at padded positions: a number, or for dict (tuple) samples a
            mapping from key (position) to number; fields it does not name pad with 0, and a
            name the samples lack is an error (typos do not pass silently).
        label_pad_value: Pad value for label fields (e.g. -100 to be ignored by
            ``cross_entropy``); None pads them like any field. An explicit ``pad_value`` entry for a
            field wins over it.
        padding_side: ``"right"`` (pad after the data) or ``"left"`` (pad before it).
        truncation_side: Side cut when a sequence is longer than ``max_length``: ``"right"``
            keeps the first ``max_length`` items (as Hugging Face tokenizers do), ``"left"`` the
            last ones. Independent of ``padding_side``.
        max_length: Truncate every padded field to at most this many items; None keeps all.
        pad_to_multiple_of: Round the padded length up to a multiple of this (tensor cores like
            multiples of 8); must divide ``max_length`` when both are given.
        sequence_fields: Keys (dict samples) or positions (tuple samples) to pad; None pads every
            field that holds sequences. Ignored for bare sequences.
        label_fields: Dict keys treated as label fields.
        mask_dtype: Dtype of the generated attention masks.

    Raises:
        ValueError: (when called) on an empty batch, or samples that disagree in structure (dict
            keys, tuple length, trailing shape); the message names the field and the sample.
        TypeError: (when called) on samples whose kinds differ within a field, or unsupported
            sample types.

    Example:
        >>> collate = PadCollate(pad_value=0, label_pad_value=-100)
        >>> batch = collate([{"input_ids": [5, 6, 7], "labels": [1, 2, 3]},
        ...                  {"input_ids": [8], "labels": [4]}])
        >>> batch["input_ids"].tolist(), batch["labels"].tolist()
        ([[5, 6, 7], [8, 0, 0]], [[1, 2, 3], [4, -100, -100]])
        >>> batch["attention_mask"].tolist(), batch["lengths"].tolist()
        ([[1, 1, 1], [1, 0, 0]], [3, 1])
    """

    def __init__(
        self,
        pad_value: Number | Mapping[Hashable, Number] = 0,
        *,
        label_pad_value: Number | None = None,
        padding_side: Side = "right",
        truncation_side: Side = "right",
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        sequence_fields: Collection[Hashable] | None = None,
        label_fields: Collection[Hashable] = ("labels", "label"),
        mask_dtype: torch.dtype = torch.int64,
    ) -> None:
        if isinstance(pad_value, Mapping):
            for key, value in pad_value.items():
                _check_number(f"pad_value[{key!r}]", value)
            pad_value = dict(pad_value)
        else:
            _check_number("pad_value", pad_value)
        if label_pad_value is not None:
            _check_number("label_pad_value", label_pad_value)
        _check_side("padding_side", padding_side)
        _check_side("truncation_side", truncation_side)
        _check_length("max_length", max_length)
        _check_length("pad_to_multiple_of", pad_to_multiple_of)
        if max_length and pad_to_multiple_of and max_length % pad_to_multiple_of:
            raise ValueError(
                f"max_length ({max_length}) must be a multiple of pad_to_multiple_of "
                f"({pad_to_multiple_of}), or padded batches could exceed max_length"
            )
        if not isinstance(mask_dtype, torch.dtype):
            raise TypeError(f"mask_dtype must be a torch.dtype, got {mask_dtype!r}")
        self.pad_value = pad_value
        self.label_pad_value = label_pad_value
        self.padding_side = padding_side
        self.truncation_side = truncation_side
        self.max_length = max_length
        self.pad_to_multiple_of = pad_to_multiple_of
        self.sequence_fields = _check_names("sequence_fields", sequence_fields)
        self.label_fields = _check_names("label_fields", label_fields) or ()
        self.mask_dtype = mask_dtype

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"

    def __call__(self, batch: Sequence[Any]) -> Any:
        """Collate a list of samples; see the class docstring for the output structure."""
        if not isinstance(batch, Sequence):
            batch = list(batch)
        if not batch:
            raise ValueError("PadCollate got an empty batch; a batch needs at least one sample")
        first = batch[0]
        if isinstance(first, Mapping):
            return self._collate_dicts(batch, with_masks=True)
        if _is_bare(first):
            if isinstance(self.pad_value, dict):
                raise TypeError(
                    "pad_value is a mapping of fields, but the samples are bare sequences; "
                    "pass a number"
                )
            if all(type(sample) is Tensor for sample in batch):
                return self._pad_field(batch, "sequence", self._scalar_pad())
            for i, sample in enumerate(batch):
                if not _is_bare(sample):
                    raise TypeError(
                        f"sample {i} is {describe_value(sample)} but sample 0 is a bare sequence "
                        f"({describe_value(first)}); every sample must have the same structure"
                    )
            if column_kind(batch, "sequence") != ARRAY:
                raise TypeError(
                    f"sample 0 is {describe_value(first)}; a bare sample must have at least one "
                    "dimension (wrap numbers in a tuple or dict to stack them)"
                )
            return self._pad_field(batch, "sequence", self._scalar_pad())
        if isinstance(first, (tuple, list)):
            return self._collate_tuples(batch)
        raise TypeError(
            f"sample 0 is {describe_value(first)}; PadCollate takes tensors, numeric arrays, lists "
            "of numbers, tuples of fields or dicts"
        )

    # -- internals -------------------------------------------------------------------------

    def _scalar_pad(self) -> Number:
        return 0 if isinstance(self.pad_value, dict) else self.pad_value

    def _field_pad(self, key: Hashable, is_label: bool, is_mask: bool) -> Number:
        if isinstance(self.pad_value, dict) and key in self.pad_value:
            return self.pad_value[key]
        if is_mask:
            return 0
        if is_label and self.label_pad_value is not None:
            return self.label_pad_value
        return self._scalar_pad()

    def _pad_field(
        self, values: Sequence[Any], name: str, pad_value: Number
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Pad one field: returns ``(padded, attention_mask, lengths)``."""
        tensors, lengths = as_sequences(values, name)
        padded, mask, lens = pad_sequences(
            tensors,
            lengths,
            pad_value,
            self.padding_side,
            self.max_length,
            self.truncation_side,
            self.pad_to_multiple_of,
        )
        if self.mask_dtype == torch.int64:
            return padded, mask.long(), lens
        return padded, mask if self.mask_dtype == torch.bool else mask.to(self.mask_dtype), lens

    def _plan(
        self, columns: Mapping[Hashable, Sequence[Any]], names: Mapping[Hashable, str]
    ) -> tuple[dict[Hashable, str], list[Hashable]]:
        """Each field's kind, and the fields to pad in priority order (nothing is collated)."""
        if isinstance(self.pad_value, dict):
            check_keys(self.pad_value, list(columns), "pad_value")
        kinds = {key: column_kind(col, names[key]) for key, col in columns.items()}
        if self.sequence_fields is None:
            return kinds, [key for key, kind in kinds.items() if kind == ARRAY]
        check_keys(self.sequence_fields, list(columns), "sequence_fields")
        for key in self.sequence_fields:
            if kinds[key] != ARRAY:
                raise TypeError(
                    f"{names[key]} is in sequence_fields but holds {kinds[key]}, "
                    f"e.g. {describe_value(columns[key][0])}"
                )
        return kinds, list(self.sequence_fields)

    @staticmethod
    def _stack(values: Sequence[Any], kind: str, name: str) -> Any:
        if kind == NUMBER:
            if all(type(v) in PLAIN for v in values):
                return torch.tensor(values)
            return torch.stack([v if isinstance(v, Tensor) else torch.as_tensor(v) for v in values])
        if kind == OBJECT:
            return list(values)
        tensors = [to_tensor(value, name, i) for i, value in enumerate(values)]
        shapes = [(0,) if t is None else tuple(t.shape) for t in tensors]
        for i, shape in enumerate(shapes):
            if shape != shapes[0]:
                raise ValueError(
                    f"{name}: sample {i} has shape {shape} but sample 0 has shape {shapes[0]}; "
                    "this field is stacked, not padded (it is not in sequence_fields), so every "
                    "sample must have the same shape"
                )
        if any(t is None for t in tensors):  # then every shape is (0,)
            dtype = next((t.dtype for t in tensors if t is not None), torch.int64)
            return torch.zeros((len(tensors), 0), dtype=dtype)
        return torch.stack(tensors)

    def _collate_tuples(self, batch: Sequence[Any]) -> tuple[Any, ...]:
        width = len(batch[0])
        for i, sample in enumerate(batch):
            if not isinstance(sample, (tuple, list)) or _is_bare(sample):
                raise TypeError(
                    f"sample {i} is {describe_value(sample)} but sample 0 is a tuple of {width} "
                    "fields; every sample must have the same structure"
                )
            if len(sample) != width:
                raise ValueError(
                    f"sample {i} has {len(sample)} fields but sample 0 has {width}; every "
                    "sample must have the same number of fields"
                )
        columns = dict(enumerate(zip(*batch, strict=True)))
        names = {j: f"field {j}" for j in columns}
        kinds, padded = self._plan(columns, names)
        main = min(padded) if padded else None
        out: list[Any] = []
        extras: tuple[Tensor, ...] = ()
        for j, values in columns.items():
            if j not in padded:
                out.append(self._stack(values, kinds[j], names[j]))
                continue
            value, mask, lengths = self._pad_field(
                values, names[j], self._field_pad(j, j != main, False)
            )
            out.append(value)
            if j == main:
                extras = (mask, lengths)
        return (*out, *extras)

    def _collate_dicts(self, batch: Sequence[Any], with_masks: bool) -> dict[Hashable, Any]:
        keys = record_keys(batch)
        columns = {key: [sample[key] for sample in batch] for key in keys}
        names = {key: f"field {key!r}" for key in keys}
        kinds, padded = self._plan(columns, names)
        labels = {k for k in padded if k in self.label_fields}
        masks = {k for k in padded if isinstance(k, str) and k.endswith("attention_mask")}
        plain = [k for k in padded if k not in labels and k not in masks]
        out: dict[Hashable, Any] = {}
        generated: dict[Hashable, tuple[Tensor, Tensor]] = {}
        for key in keys:
            if key not in padded:
                out[key] = self._stack(columns[key], kinds[key], names[key])
                continue
            pad = self._field_pad(key, key in labels, key in masks)
            out[key], mask, lengths = self._pad_field(columns[key], names[key], pad)
            generated[key] = (mask, lengths)
        if with_masks:
            for i, key in enumerate(plain):
                mask, lengths = generated[key]
                out.setdefault("attention_mask" if i == 0 else f"{key}_attention_mask", mask)
                out.setdefault("lengths" if i == 0 else f"{key}_lengths", lengths)
        return out


def _is_bare(sample: Any) -> bool:
    """A bare sequence sample: a tensor, a numeric array, or a (possibly empty) list of numbers."""
    if isinstance(sample, (Tensor, np.ndarray)):
        return True
    return isinstance(sample, list) and (not sample or isinstance(sample[0], SCALARS))


_DEFAULT = PadCollate()


def pad_collate(batch: Sequence[Any]) -> Any:
    """`PadCollate` with default options, as a plain function (``collate_fn=pad_collate``).

    Pads with 0 on the right, no truncation; see `PadCollate` for the output structure.

    Args:
        batch: The samples of one batch.

    Returns:
        The collated batch.
    """
    return _DEFAULT(batch)
