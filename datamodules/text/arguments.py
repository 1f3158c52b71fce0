"""Argument checks of TextDataModule: each bad value fails in ``__init__``, naming it.

:func:`check_text_arguments` checks the tokenizer, truncation, padding and batching
arguments, and the packing ones (``packing``, ``seq_length``, ``pack_mode``) with their
conflicts (labels, a token budget).
"""

from __future__ import annotations

from typing import Any

from collates.packing import PACK_MODES
from datamodules.core.buckets import BATCH_BY
from datamodules.core.checks import check_bool, check_choice, check_int, rejected
from datamodules.tokens.vocab import LEVELS, tokenizer_vocab_size

__all__ = [
    "SIDES",
    "check_choice",
    "check_eos_id",
    "check_optional_int",
    "check_packing_arguments",
    "check_text_arguments",
]

SIDES = ("left", "right")
_TOKENS = " with batch_by='tokens'"


def check_optional_int(value: Any, name: str, minimum: int) -> None:
    """:func:`~datamodules.core.checks.check_int` that also accepts None."""
    check_int(value, name, minimum, allow_none=True)


def check_eos_id(eos_id: int, tokenizer: Any) -> None:
    """Checks ``eos_id=`` given with texts or files (appended to each document): it needs a
    tokenizer of the user's (the built-in vocabulary has no end-of-text id), and an id below
    the vocabulary size the tokenizer declares."""
    if isinstance(tokenizer, str):
        raise rejected(
            "eos_id",
            eos_id,
            "None, or a tokenizer of yours (tokenizer=), whose end-of-text id it names: the "
            "built-in vocabulary has none",
            when=f" with texts or files and tokenizer={tokenizer!r}",
        )
    size = tokenizer_vocab_size(tokenizer)
    if size is not None and eos_id >= size:
        raise rejected("eos_id", eos_id, f"an id below the tokenizer's vocabulary size ({size})")


def check_text_arguments(
    *,
    tokenizer: Any,
    lowercase: Any,
    min_freq: Any,
    pad_id: Any,
    max_length: Any,
    truncation_side: Any,
    padding_side: Any,
    pad_to_multiple_of: Any,
    batch_by: Any,
    max_tokens: Any,
    bucket: Any,
    eval_bucket: Any,
    pool_batches: Any,
    drop_last: bool,
    shuffle: bool,
    packing: Any,
    seq_length: Any,
    pack_mode: Any,
    labelled: bool,
) -> None:
    """Checks TextDataModule's own arguments (see its docstring); raises naming the first bad one.

    Raises:
        ValueError: On a bad value or a conflict (e.g. ``packing=True`` with labels).
        TypeError: On a value of the wrong kind.
    """
    if isinstance(tokenizer, str):
        check_choice(tokenizer, "tokenizer", LEVELS)
    elif not (
        callable(tokenizer) or hasattr(tokenizer, "encode") or hasattr(tokenizer, "encode_batch")
    ):
        raise TypeError(
            f"tokenizer={tokenizer!r} is not accepted: use 'char', 'word', a callable "
            "str -> list[int], or an object with encode() (Hugging Face tokenizers)."
        )
    check_bool(lowercase, "lowercase")
    check_int(min_freq, "min_freq", 1, allow_none=True)
    check_int(pad_id, "pad_id", 0, allow_none=True)
    check_int(max_length, "max_length", 1, allow_none=True)
    check_int(pad_to_multiple_of, "pad_to_multiple_of", 1, allow_none=True)
    check_int(pool_batches, "pool_batches", 1, allow_none=True)
    check_choice(truncation_side, "truncation_side", SIDES)
    check_choice(padding_side, "padding_side", SIDES)
    check_choice(batch_by, "batch_by", BATCH_BY)
    check_bool(bucket, "bucket")
    check_bool(eval_bucket, "eval_bucket")
    if max_length and pad_to_multiple_of and max_length % pad_to_multiple_of:
        raise ValueError(
            f"max_length={max_length} is not a multiple of pad_to_multiple_of="
            f"{pad_to_multiple_of}: padded batches could exceed max_length."
        )
    check_packing_arguments(packing, seq_length, pack_mode, batch_by, labelled)
    if batch_by == "tokens":
        budget = "(the budget of batch size x longest sample)"
        if max_tokens is None:  # needed by batch_by: a conflict of arguments, not a type
            raise rejected("max_tokens", None, f"an int >= 1 {budget}", when=_TOKENS)
        check_int(max_tokens, "max_tokens", 1, when=_TOKENS, note=budget)
        if drop_last:
            raise ValueError("drop_last=True is not accepted with batch_by='tokens'.")
        if shuffle and not bucket:
            raise ValueError(
                "bucket=False is not accepted with batch_by='tokens' and shuffle=True: a "
                "token budget needs length buckets."
            )
        if max_length is not None and max_length > max_tokens:
            raise ValueError(
                f"max_length={max_length} exceeds max_tokens={max_tokens}: a single sample "
                "could not fit in a batch."
            )
    elif max_tokens is not None:
        raise ValueError(
            f"max_tokens={max_tokens!r} has no effect with batch_by='samples': set "
            "batch_by='tokens' or drop max_tokens."
        )


def check_packing_arguments(
    packing: Any, seq_length: Any, pack_mode: Any, batch_by: Any, labelled: bool
) -> None:
    """Checks ``packing``, ``seq_length`` and ``pack_mode`` and their conflicts.

    Raises:
        ValueError: On a bad value, packing with labels or with ``batch_by="tokens"``, or
            ``seq_length`` / ``pack_mode`` given without ``packing=True``.
        TypeError: If ``packing`` is not a bool.
    """
    check_bool(packing, "packing")
    if not packing:
        if seq_length is not None or pack_mode != "split":
            raise ValueError(
                f"seq_length={seq_length!r} and pack_mode={pack_mode!r} have no effect without "
                "packing=True: set packing=True or drop them."
            )
        return
    row = "(tokens per packed row)"
    if seq_length is None:  # needed by packing: a conflict of arguments, not a type
        raise rejected("seq_length", None, f"an int >= 1 {row}", when=" with packing=True")
    check_int(seq_length, "seq_length", 1, when=" with packing=True", note=row)
    check_choice(pack_mode, "pack_mode", PACK_MODES)
    if labelled:
        raise ValueError(
            "packing=True conflicts with labels: packed rows are for texts without labels "
            "(language modelling; the batch's labels are the next tokens). Drop labels= or "
            "packing=True."
        )
    if batch_by == "tokens":
        raise ValueError(
            "packing=True conflicts with batch_by='tokens': a packed batch is batch_size rows "
            "of seq_length tokens already. Drop batch_by='tokens' (and max_tokens) or packing."
        )
