"""Checks of the token ids a token file holds: the dtype they were read with, and the vocabulary.

A flat token file says nothing of its dtype: read with the wrong one it still maps, as wrong
ids (a uint32 file read as uint16 gives twice the tokens, every other one a zero; a uint16 file
read as uint32 gives ids of millions). :func:`check_ids` catches that from a **sample** of the
file, cheaply whatever its size: :data:`WINDOWS` evenly spaced windows of :data:`WINDOW` bytes
(256 KiB at most), aligned to 8 bytes from the first token, so that the same bytes can be read
as every dtype. It uses two facts of little-endian token ids:

* **Ids are in** ``[0, 2**24)``: no tokenizer has 16.7 million tokens. A sampled id outside
  that range (or at or above a given ``vocab_size``) means the dtype is wrong; the error names
  the dtype under which the same bytes do fit, if one does.
* **The high half of a real id is almost always zero, and always small**: a file of 32-bit ids
  below 65,536 read as 16-bit shows each id as a pair ``(id, 0)``. When at least 3/4 of the
  sampled pairs have a zero second half while at most 1/4 have a zero first half, the file
  holds wider ids (the same test on groups of four finds 64-bit ids). A larger vocabulary
  (Llama 3's 128,256 ids, half of them at or above 65,536) gives pairs ``(low, 0 or 1)``: a
  second half below :data:`SMALL` (256, as for any id below 2**24) in at least 95% of the
  pairs, while at most half of the first halves are, is the same sign. In a file of real
  16-bit ids both halves of a pair are ids alike, so their counts of zeros and of small values
  are alike (zeros of padding, a small vocabulary's ids too): no false alarm. Judged on
  :data:`MIN_PAIRS` pairs or more only (a tiny file is not judged).

The sample can miss an id: at or above ``vocab_size``, it is caught exactly where the whole
file is read anyway (a flat file's scan for ``eos_id``; ``dm.vocab_size``, which reads a
Megatron file's ids once).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "LIMIT",
    "MIN_PAIRS",
    "SMALL",
    "WINDOW",
    "WINDOWS",
    "check_ids",
    "check_vocab",
    "sample",
]

#: Token ids are below this in every vocabulary (16.7M).
LIMIT = 1 << 24
#: Windows the sample takes, evenly spaced over the file.
WINDOWS = 64
#: Bytes a window holds (a multiple of 8).
WINDOW = 4096
#: Pairs (or groups of four) the structural test needs to judge.
MIN_PAIRS = 256
#: The high part of an id below 2**24 read as 16-bit parts is below this (a 128k vocabulary's
#: is 0 or 1).
SMALL = 256
#: Dtypes a suggestion may name, in the order tried.
_SUGGESTED = ("uint16", "uint32", "int64")


def sample(tokens: np.ndarray) -> np.ndarray:
    """Raw bytes of the sample: the whole file when small, else whole windows, each starting at
    a multiple of 8 bytes."""
    raw = tokens.reshape(-1).view(np.uint8)
    if len(raw) <= WINDOWS * WINDOW:
        return np.asarray(raw)
    usable = len(raw) - len(raw) % 8
    step = (usable - WINDOW) // (WINDOWS - 1) // 8 * 8
    return np.concatenate([np.asarray(raw[k * step : k * step + WINDOW]) for k in range(WINDOWS)])


def _as(raw: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return raw[: len(raw) - len(raw) % dtype.itemsize].view(dtype)


def _wider(raw: np.ndarray, dtype: np.dtype, nbytes: int) -> tuple[np.dtype, str] | None:
    """The wider dtype the file holds when ``dtype`` shows the high parts of its ids as ids,
    and why (see the module docstring); None when the sample looks like ``dtype``'s own ids."""
    unsigned = _as(raw, np.dtype(f"<u{dtype.itemsize}"))
    for group in (4, 2):
        wide = dtype.itemsize * group
        if wide > 8 or nbytes % wide:
            continue
        rows = unsigned[: len(unsigned) - len(unsigned) % group].reshape(-1, group)
        if len(rows) < MIN_PAIRS:
            continue
        wider = np.dtype(f"uint{wide * 8}" if wide < 8 else "int64")
        high_zero = float((rows[:, 1:] == 0).all(axis=1).mean())
        low_zero = float((rows[:, 0] == 0).mean())
        if high_zero >= 0.75 and low_zero <= 0.25:
            return wider, (
                f"nearly every group of {group} is an id followed by zeros: {high_zero:.0%} of "
                f"{len(rows)} sampled groups, against {low_zero:.0%} starting with a zero"
            )
        high_small = float((rows[:, 1:] < SMALL).all(axis=1).mean())
        low_small = float((rows[:, 0] < SMALL).mean())
        if high_small >= 0.95 and low_small <= 0.5:
            return wider, (
                f"in {high_small:.0%} of {len(rows)} sampled groups of {group} the parts after "
                f"the first are below {SMALL}, as the high parts of ids below 2**24 are, against "
                f"{low_small:.0%} of the first parts"
            )
    return None


def _fitting(raw: np.ndarray, given: np.dtype, nbytes: int, top: int) -> str | None:
    """A dtype under which the sampled bytes are ids in ``[0, top)`` (and not a wider file)."""
    for name in _SUGGESTED:
        dtype = np.dtype(name)
        if dtype == given or nbytes % dtype.itemsize:
            continue
        ids = _as(raw, dtype)
        if len(ids) and int(ids.max()) < top and _wider(raw, dtype, nbytes) is None:
            return name
    return None


def _hint(suggested: str | None) -> str:
    return f": is dtype={suggested!r} right?" if suggested else "."


def check_ids(
    name: str, tokens: np.ndarray, vocab_size: int | None, given: bool, exact_later: bool
) -> None:
    """Checks a sample of ``tokens`` (see the module docstring).

    Args:
        name: The file, for messages.
        tokens: The mapped ids, as read.
        vocab_size: The ``vocab_size=`` given (None: none).
        given: The dtype was given, not read from the file (a flat ``.bin``): the structural
            test applies, and an error suggests the dtype the ids fit.
        exact_later: The caller reads every id next and checks the largest against
            ``vocab_size`` (:func:`check_vocab`): a sampled id above it raises here only with
            a dtype to suggest.

    Raises:
        ValueError: Ids that do not fit the dtype's usual range or ``vocab_size``, naming the
            file, the ids and (a flat file) the dtype they fit.
    """
    if not len(tokens):
        return
    dtype, nbytes = tokens.dtype, tokens.nbytes
    raw = sample(tokens)
    ids = _as(raw, dtype)
    if given:
        found = _wider(raw, dtype, nbytes)
        if found is not None:
            wider, why = found
            raise ValueError(
                f"{name}: read as dtype={dtype.name!r}, the sampled ids look like {wider.name} "
                f"ids ({why}): is dtype={wider.name!r} right?"
            )
    if not len(ids):
        return
    low, high = int(ids.min()), int(ids.max())
    top = LIMIT if vocab_size is None else min(LIMIT, vocab_size)
    if low < 0 or high >= LIMIT:
        seen = low if low < 0 else high
        suggested = _fitting(raw, dtype, nbytes, top) if given else None
        raise ValueError(
            f"{name}: read as dtype={dtype.name!r}, a sample of its ids holds {seen}, outside the "
            f"usual range of token ids [0, {LIMIT}){_hint(suggested)}"
        )
    if vocab_size is not None and high >= vocab_size:
        suggested = _fitting(raw, dtype, nbytes, vocab_size) if given else None
        if suggested is not None or not exact_later:
            whole = len(ids) == len(tokens)
            check_vocab(name, high, vocab_size, None if whole else len(ids), _hint(suggested))


def check_vocab(
    name: str, largest: int, vocab_size: int | None, sampled: int | None = None, hint: str = "."
) -> None:
    """Raises when ``largest`` (the largest id read) is not below ``vocab_size``.

    Raises:
        ValueError: Naming the file, the largest id (of a sample of ``sampled`` ids, when not
            the whole file) and the vocabulary size.
    """
    if vocab_size is None or largest < vocab_size:
        return
    of = f" (in a sample of {sampled} ids)" if sampled is not None else ""
    raise ValueError(
        f"{name}: its largest token id is {largest}{of}, not below vocab_size={vocab_size}: "
        f"the model could not embed it{hint}"
    )
