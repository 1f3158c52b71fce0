"""A user's tokenizer turned into fixed-length token ids, the same way whatever its kind.

:class:`FixedLength` takes a ``transformers`` tokenizer, a Hugging Face ``tokenizers.Tokenizer``
or a callable and gives, for one text, ``max_length`` int64 ids padded with the tokenizer's pad
id (:func:`tokenizer_pad_id`) and the number of real tokens:

* a transformers tokenizer: ``tokenizer(text, truncation=True, max_length=max_length)
  ["input_ids"]``, exactly;
* a ``tokenizers.Tokenizer``: its encoding of the text (special tokens included) cut by a copy
  of it with truncation to ``max_length`` (the tokenizer given is left unchanged);
* a callable ``text -> ids``: a list of ids, a 1-D array or tensor, a dict with
  ``"input_ids"``, or a ``(1, L)`` tensor as open_clip's tokenizers return (already padded with
  0: trailing 0s are padding there), cut to ``max_length``.

It pickles (it runs in the DataLoader workers).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["FixedLength", "tokenizer_pad_id"]


def tokenizer_pad_id(tokenizer: Any) -> int:
    """The padding id a tokenizer declares (``pad_token_id``, or a ``[PAD]``/``<pad>`` token),
    else 0."""
    pad = getattr(tokenizer, "pad_token_id", None)
    if isinstance(pad, int):
        return pad
    token_to_id = getattr(tokenizer, "token_to_id", None)
    if callable(token_to_id):
        for token in ("[PAD]", "<pad>", "<PAD>"):
            found = token_to_id(token)
            if isinstance(found, int):
                return found
    return 0


def _kind(tokenizer: Any) -> str:
    if hasattr(tokenizer, "pad_token_id") and callable(tokenizer):
        return "transformers"
    if hasattr(tokenizer, "encode_batch") and hasattr(tokenizer, "to_str"):
        return "tokenizers"
    return "callable"


class FixedLength:
    """``text -> (ids int64 (max_length,), length)`` with a user's tokenizer (see the module).

    Args:
        tokenizer: A transformers tokenizer, a ``tokenizers.Tokenizer`` or a callable.
        max_length: Tokens per text, after truncation and padding.

    Raises:
        TypeError: ``tokenizer`` is none of these.
    """

    def __init__(self, tokenizer: Any, max_length: int) -> None:
        self.kind = _kind(tokenizer)
        if self.kind == "callable" and not callable(tokenizer):
            raise TypeError(
                f"tokenizer={tokenizer!r} is not accepted: use a transformers tokenizer, a "
                "tokenizers.Tokenizer, a callable text -> token ids, or None (captions as "
                "strings)."
            )
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        self.pad_id = tokenizer_pad_id(tokenizer)
        if self.kind == "tokenizers":  # a copy that truncates, without padding
            truncating = type(tokenizer).from_str(tokenizer.to_str())
            truncating.no_padding()
            truncating.enable_truncation(self.max_length)
            self.tokenizer = truncating

    def ids(self, text: str) -> list[int] | np.ndarray:
        """The text's ids, truncated to ``max_length`` (not padded)."""
        tokenizer, length = self.tokenizer, self.max_length
        if self.kind == "transformers":
            return tokenizer(text, truncation=True, max_length=length)["input_ids"]
        if self.kind == "tokenizers":
            return tokenizer.encode(text).ids
        out = tokenizer(text)
        if isinstance(out, dict) and "input_ids" in out:
            out = out["input_ids"]
        array = np.asarray(out)
        if array.ndim == 2 and array.shape[0] == 1:  # open_clip: (1, L), padded with 0
            array = array[0]
            nonzero = np.flatnonzero(array)
            array = array[: nonzero[-1] + 1 if nonzero.size else 0]
        if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
            raise TypeError(
                f"the tokenizer returned {type(out).__name__} {str(out)[:80]!r}: a tokenizer "
                "must return token ids (a list of ints, a 1-D array, or a (1, L) tensor)."
            )
        return array[:length]

    def __call__(self, text: str) -> tuple[np.ndarray, int]:
        """``(ids padded to max_length with the pad id, number of real tokens)``."""
        ids = np.asarray(self.ids(text), dtype=np.int64)[: self.max_length]
        out = np.full(self.max_length, self.pad_id, dtype=np.int64)
        out[: len(ids)] = ids
        return out, len(ids)
