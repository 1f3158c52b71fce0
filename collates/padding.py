"""Padding collate for variable-length samples: `PadCollate`, `pad_collate`, `collate_records`.

Any of them can be a DataLoader's ``collate_fn``. Samples may be bare sequences (tensors, numeric
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

import inspect
import math
from collections.abc import Collection, Hashable, Mapping, Sequence
from itertools import chain
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

__all__ = ["PadCollate", "collate_records", "pad_collate"]

Number = int | float | bool
Side = Literal["left", "right"]

_NUMBER, _ARRAY, _OBJECT, _EMPTY = "a number", "a sequence", "an object", "an empty list"
_SCALARS = (bool, int, float, np.bool_, np.number)
_NUMERIC_KINDS = frozenset("biuf")
_PLAIN = frozenset((int, float, bool))
# torch < 2.6 has no `padding_side` in pad_sequence; left padding then takes the copy path.
_HAS_SIDE = "padding_side" in inspect.signature(pad_sequence).parameters
_EXACT_FLOAT_INT = 2**53  # pad_sequence takes its pad value as a double
# Up to this many padded elements per row, torch.cat + masked_scatter_ (a fixed number of ops)
# beats pad_sequence (one copy per sample, about 1.5 us each); above it pad_sequence wins.
_SCATTER_MAX_ROW = 1024


def _kind(value: Any) -> str:
    """Classify one field value as a number, a sequence, an empty list or an opaque object."""
    if isinstance(value, Tensor):
        return _ARRAY if value.ndim else _NUMBER
    if isinstance(value, _SCALARS):
        return _NUMBER
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _NUMERIC_KINDS:
            return _OBJECT
        return _ARRAY if value.ndim else _NUMBER
    if isinstance(value, (list, tuple)):
        if not value:
            return _EMPTY
        return _ARRAY if isinstance(value[0], (*_SCALARS, list, tuple)) else _OBJECT
    return _OBJECT


def _describe(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array of shape {value.shape}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of length {len(value)}"
    return f"a {type(value).__name__}"


def _column_kind(values: Sequence[Any], name: str) -> str:
    """The kind shared by every value of a field (empty lists fit sequences and objects)."""
    first = type(values[0])
    if first is Tensor and all(type(v) is Tensor for v in values):
        if len({v.ndim == 0 for v in values}) == 1:
            return _NUMBER if values[0].ndim == 0 else _ARRAY
    elif first in _PLAIN and all(type(v) in _PLAIN for v in values):
        return _NUMBER
    elif first is str and all(type(v) is str for v in values):
        return _OBJECT
    kind, ref = _EMPTY, 0
    for i, value in enumerate(values):
        k = _kind(value)
        if k == kind or (k == _EMPTY and kind != _NUMBER):
            continue
        if kind == _EMPTY and not (k == _NUMBER and i > 0):
            kind, ref = k, i
            continue
        raise TypeError(
            f"{name}: sample {i} holds {_describe(value)} but sample {ref} holds "
            f"{_describe(values[ref])}; every sample must hold the same kind of value in a field"
        )
    return _ARRAY if kind == _EMPTY else kind


def _to_tensor(value: Any, name: str, index: int) -> Tensor | None:
    """One sequence value as a tensor with at least one dimension; None for an empty list."""
    if isinstance(value, Tensor):
        tensor = value
    elif isinstance(value, np.ndarray):
        tensor = torch.from_numpy(value)
    elif isinstance(value, (list, tuple)) and not value:
        return None  # length 0, any trailing shape and dtype
    else:
        try:
            tensor = torch.tensor(value)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(
                f"{name}: sample {index} holds {_describe(value)} that is not a rectangular "
                f"list of numbers ({err})"
            ) from err
    if tensor.ndim == 0:
        raise TypeError(
            f"{name}: sample {index} holds {_describe(value)}; a padded value needs at least one "
            "dimension"
        )
    return tensor


def _sequences(values: Sequence[Any], name: str) -> tuple[list[Tensor], list[int]]:
    """A padded field's values as tensors of one trailing shape and dtype, and their lengths."""
    if all(type(v) is Tensor for v in values):  # fast path: already uniform tensors
        shapes = [v.shape for v in values]
        ndims = set(map(len, shapes))
        if (
            len(ndims) == 1
            and shapes[0]
            and (len(shapes[0]) == 1 or len({s[1:] for s in shapes}) == 1)
            and len({v.dtype for v in values}) == 1
        ):
            return list(values), [s[0] for s in shapes]
    tensors = [_to_tensor(value, name, i) for i, value in enumerate(values)]
    ref = next((i for i, t in enumerate(tensors) if t is not None), None)
    if ref is None:
        return [torch.zeros(0, dtype=torch.int64) for _ in tensors], [0] * len(tensors)
    trailing, dtype = tensors[ref].shape[1:], tensors[ref].dtype
    for i, t in enumerate(tensors):
        if t is not None and t.shape[1:] != trailing:
            raise ValueError(
                f"{name}: sample {i} has shape {tuple(t.shape)} but sample {ref} has shape "
                f"{tuple(tensors[ref].shape)}; a padded field may differ only in its first "
                "dimension"
            )
        if t is not None and t.dtype != dtype:
            dtype = torch.promote_types(dtype, t.dtype)
    out = [torch.zeros((0, *trailing), dtype=dtype) if t is None else t.to(dtype) for t in tensors]
    return out, [t.shape[0] for t in out]


def _pad(
    tensors: list[Tensor],
    lengths: list[int],
    pad_value: Number,
    padding_side: str,
    max_length: int | None,
    truncation_side: str,
    multiple: int | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Pad validated tensors along dim 0: ``(padded (B, L, ...), bool mask (B, L), lengths)``."""
    if max_length is not None and max(lengths) > max_length:
        keep_first = truncation_side == "right"
        tensors = [
            t if n <= max_length else (t[:max_length] if keep_first else t[n - max_length :])
            for t, n in zip(tensors, lengths, strict=True)
        ]
        lengths = [min(n, max_length) for n in lengths]
    longest = max(lengths)
    width = longest if multiple is None else -(-longest // multiple) * multiple
    ref, batch = tensors[0], len(tensors)
    trailing = ref.shape[1:]
    lens = torch.from_numpy(np.array(lengths, dtype=np.int64))
    if ref.device.type != "cpu":
        lens = lens.to(ref.device)
    right = padding_side == "right"
    positions = torch.arange(width, device=ref.device)
    mask = positions < lens.unsqueeze(1) if right else positions >= (width - lens).unsqueeze(1)
    per_item = math.prod(trailing)
    if width * per_item <= _SCATTER_MAX_ROW:
        # Small rows: one cat and one masked_scatter beat pad_sequence's copy per sample.
        out = torch.full((batch, width, *trailing), pad_value, dtype=ref.dtype, device=ref.device)
        flat = torch.cat(tensors)
        if not trailing:
            out.masked_scatter_(mask, flat)
        elif per_item:
            cells = torch.arange(width * per_item, device=ref.device)
            start = lens * per_item if right else (width - lens) * per_item
            row_mask = cells < start.unsqueeze(1) if right else cells >= start.unsqueeze(1)
            out.view(batch, -1).masked_scatter_(row_mask, flat.reshape(-1))
        return out, mask, lens
    exact = not (isinstance(pad_value, int) and abs(pad_value) > _EXACT_FLOAT_INT)
    if width == longest and exact and (right or _HAS_SIDE):
        kwargs = {"padding_side": padding_side} if _HAS_SIDE else {}
        out = pad_sequence(tensors, batch_first=True, padding_value=pad_value, **kwargs)
        return out, mask, lens
    out = torch.full((batch, width, *trailing), pad_value, dtype=ref.dtype, device=ref.device)
    for i, (t, n) in enumerate(zip(tensors, lengths, strict=True)):
        if n and right:
            out[i, :n] = t
        elif n:
            out[i, width - n :] = t
    return out, mask, lens


def _check_keys(keys: Collection[Hashable] | None, fields: Sequence[Hashable], what: str) -> None:
    if keys:
        unknown = [k for k in keys if k not in fields]
        if unknown:
            raise ValueError(
                f"{what} names {unknown!r}, which the samples do not have "
                f"(their fields are {list(fields)!r})"
            )


def _check_side(name: str, value: Any) -> None:
    if value not in ("left", "right"):
        raise ValueError(f"{name} must be 'left' or 'right', got {value!r}")


def _check_number(name: str, value: Any) -> None:
    if not isinstance(value, _SCALARS):
        raise TypeError(f"{name} must be a number (int, float or bool), got {value!r}")


def _check_length(name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be None or a positive int, got {value!r}")


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
                        f"sample {i} is {_describe(sample)} but sample 0 is a bare sequence "
                        f"({_describe(first)}); every sample must have the same structure"
                    )
            if _column_kind(batch, "sequence") != _ARRAY:
                raise TypeError(
                    f"sample 0 is {_describe(first)}; a bare sample must have at least one "
                    "dimension (wrap numbers in a tuple or dict to stack them)"
                )
            return self._pad_field(batch, "sequence", self._scalar_pad())
        if isinstance(first, (tuple, list)):
            return self._collate_tuples(batch)
        raise TypeError(
            f"sample 0 is {_describe(first)}; PadCollate takes tensors, numeric arrays, lists "
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
        tensors, lengths = _sequences(values, name)
        padded, mask, lens = _pad(
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
            _check_keys(self.pad_value, list(columns), "pad_value")
        kinds = {key: _column_kind(col, names[key]) for key, col in columns.items()}
        if self.sequence_fields is None:
            return kinds, [key for key, kind in kinds.items() if kind == _ARRAY]
        _check_keys(self.sequence_fields, list(columns), "sequence_fields")
        for key in self.sequence_fields:
            if kinds[key] != _ARRAY:
                raise TypeError(
                    f"{names[key]} is in sequence_fields but holds {kinds[key]}, "
                    f"e.g. {_describe(columns[key][0])}"
                )
        return kinds, list(self.sequence_fields)

    @staticmethod
    def _stack(values: Sequence[Any], kind: str, name: str) -> Any:
        if kind == _NUMBER:
            if all(type(v) in _PLAIN for v in values):
                return torch.tensor(values)
            return torch.stack([v if isinstance(v, Tensor) else torch.as_tensor(v) for v in values])
        if kind == _OBJECT:
            return list(values)
        tensors = [_to_tensor(value, name, i) for i, value in enumerate(values)]
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
                    f"sample {i} is {_describe(sample)} but sample 0 is a tuple of {width} "
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
        keys = _record_keys(batch)
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
    return isinstance(sample, list) and (not sample or isinstance(sample[0], _SCALARS))


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


def collate_records(
    records: Sequence[Mapping[Hashable, Any]],
    *,
    pad_value: Number | Mapping[Hashable, Number] = 0,
    label_pad_value: Number | None = None,
    padding_side: Side = "right",
) -> dict[Hashable, Any]:
    """Collate dict records field by field, without adding masks or lengths.

    Meant for record streams: numbers and equal-shape arrays are stacked, variable-length
    sequences (tensors, arrays, lists of ints or floats) are padded along the first dimension
    (equal lengths give the same result as stacking), strings and other objects are kept as
    lists. Every record must have the same keys. Padding follows `PadCollate` (label fields use
    ``label_pad_value``, keys ending in ``"attention_mask"`` pad with 0).

    The result is what ``PadCollate(...)`` makes of the records' fields, but a field whose
    values are all Python lists of numbers (what JSON and Parquet readers give) is converted
    once per batch: the lists are flattened into one NumPy array and scattered into the
    padded batch in one step, instead of one tensor per record. Likewise a field of 1-D
    NumPy arrays of one dtype is concatenated once.

    Args:
        records: The records of one batch.
        pad_value: A number, or a mapping from key to number (unnamed keys pad with 0).
        label_pad_value: Pad value for the ``"labels"`` / ``"label"`` keys; None pads them
            with ``pad_value``.
        padding_side: ``"right"`` or ``"left"``.

    Returns:
        A dict with the records' keys, in order.

    Raises:
        ValueError: If ``records`` is empty or records disagree in keys or trailing shapes.
        TypeError: If a record is not a mapping or a field mixes kinds of values.
    """
    if not records:
        raise ValueError("collate_records got an empty batch; a batch needs at least one record")
    if not isinstance(records[0], Mapping):
        raise TypeError(f"record 0 is {_describe(records[0])}; collate_records takes dicts")
    collate = PadCollate(pad_value, label_pad_value=label_pad_value, padding_side=padding_side)
    keys = _record_keys(records)
    if isinstance(collate.pad_value, dict):
        _check_keys(collate.pad_value, keys, "pad_value")
    right = padding_side == "right"
    out: dict[Hashable, Any] = {}
    for key in keys:
        column = [record[key] for record in records]
        name = f"field {key!r}"
        first = type(column[0])
        if first in _PLAIN and all(type(v) in _PLAIN for v in column):
            out[key] = torch.tensor(column)  # numbers (PadCollate._stack's first case)
            continue
        if first is str and all(type(v) is str for v in column):
            out[key] = column
            continue
        label = key in collate.label_fields
        mask = isinstance(key, str) and key.endswith("attention_mask")
        pad = collate._field_pad(key, label, mask)
        fast = _pad_flat(column, pad, right) if first in (list, np.ndarray) else None
        if fast is not None:
            out[key] = fast
            continue
        kind = _column_kind(column, name)
        if kind == _ARRAY:
            out[key] = collate._pad_field(column, name, pad)[0]
        else:
            out[key] = collate._stack(column, kind, name)
    return out


def _record_keys(records: Sequence[Any]) -> list[Hashable]:
    """The keys shared by every record (the order of record 0), with PadCollate's messages."""
    keys = list(records[0])
    key_set = records[0].keys()
    for i, sample in enumerate(records):
        if type(sample) is not dict and not isinstance(sample, Mapping):
            raise TypeError(
                f"sample {i} is {_describe(sample)} but sample 0 is a dict; every sample "
                "must have the same structure"
            )
        if sample.keys() != key_set:
            missing = [k for k in keys if k not in sample]
            extra = [k for k in sample if k not in key_set]
            raise ValueError(
                f"sample {i} has keys {list(sample)!r} but sample 0 has {keys!r} "
                f"(missing: {missing!r}, extra: {extra!r}); every sample must have the "
                "same keys"
            )
    return keys


def _flat_values(column: list[Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """A field's values flattened into one numeric array, and each value's length.

    Handles a column of Python lists of plain numbers (or of equal-length lists of them), or
    of 1-D NumPy arrays of one numeric dtype. Returns None for anything else (strings, numpy
    scalars, ragged nesting, empty columns, overflowing ints), which the general path then
    collates, or rejects with its message.
    """
    if type(column[0]) is np.ndarray:
        dtype = column[0].dtype
        if dtype.kind not in _NUMERIC_KINDS or not all(
            type(v) is np.ndarray and v.ndim == 1 and v.dtype == dtype for v in column
        ):
            return None
        lengths = np.fromiter(map(len, column), dtype=np.int64, count=len(column))
        return np.concatenate(column), lengths
    if not all(type(v) is list for v in column):
        return None
    lengths = np.fromiter(map(len, column), dtype=np.int64, count=len(column))
    total = int(lengths.sum())
    if not total:
        return None
    probe = next(v for v in column if v)
    item = probe[0]
    if type(item) is list:  # one level of nesting: equal-length rows of numbers
        if not item or type(item[0]) not in _PLAIN:
            return None
    elif type(item) not in _PLAIN or type(probe[-1]) not in _PLAIN:
        return None
    flat = list(chain.from_iterable(column))
    try:
        values = np.array(flat)
    except (ValueError, TypeError, OverflowError):
        return None
    kind = values.dtype.kind
    if kind not in "bif" or values.ndim > 2 or len(values) != total:
        return None
    if kind == "i" and values.dtype != np.int64:
        values = values.astype(np.int64)
    return values, lengths


def _pad_flat(column: list[Any], pad_value: Number, right: bool) -> Tensor | None:
    """Pads a field from its flattened values in one scatter; None if the fast path does not
    apply (see :func:`_flat_values`)."""
    found = _flat_values(column)
    if found is None:
        return None
    values, lengths = found
    if values.dtype.kind == "f" and type(column[0]) is list:
        values = values.astype(_numpy_dtype(torch.get_default_dtype()))
    tensor = torch.from_numpy(values)
    width = int(lengths.max())
    out = torch.full((len(column), width, *tensor.shape[1:]), pad_value, dtype=tensor.dtype)
    positions = np.arange(width)
    mask = positions < lengths[:, None] if right else positions >= (width - lengths)[:, None]
    out.numpy()[mask] = values
    return out


def _numpy_dtype(dtype: torch.dtype) -> Any:
    return torch.empty(0, dtype=dtype).numpy().dtype
