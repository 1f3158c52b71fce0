"""Tokenization for TextDataModule: a built-in character/word vocabulary, or any tokenizer.

Either way, :func:`encode_texts` turns a list of strings into one flat token buffer plus
per-sample lengths (no per-sample Python lists are kept), and :func:`truncate` cuts samples
to a maximum length in that flat form.

The built-in :class:`Vocabulary` reserves id 0 for padding and id 1 for unknown tokens; the
other ids follow the training split's token frequencies (most frequent first, ties in
code-point order). It is plain data (:meth:`Vocabulary.state`), so a checkpoint can carry it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any

import numpy as np

from datamodules.core.checks import check_choice
from datamodules.tokenizing.adapter import tokenizer_pad_id
from datamodules.tokenizing.fingerprint import tokenizer_fingerprint

__all__ = [
    "LEVELS",
    "Vocabulary",
    "Where",
    "append_eos",
    "describe_tokenizer",
    "encode_with",
    "tokenizer_fingerprint",
    "tokenizer_pad_id",
    "tokenizer_vocab_size",
    "truncate",
]

PAD, UNK = "<pad>", "<unk>"
PAD_ID, UNK_ID = 0, 1
LEVELS: tuple[str, ...] = ("char", "word")
Where = Callable[[int], str]


def _code_points(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """All texts' code points as one uint32 array, and each text's length."""
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    joined = "".join(texts).encode("utf-32-le", "surrogatepass")
    return np.frombuffer(joined, dtype=np.uint32), lengths


class Vocabulary:
    """A character- or word-level vocabulary with reserved pad (0) and unknown (1) ids.

    Args:
        tokens: All tokens in id order, starting with ``"<pad>"`` and ``"<unk>"``.
        level: ``"char"`` (one token per character) or ``"word"`` (whitespace-separated).
        lowercase: Lower-case texts before looking tokens up.
    """

    def __init__(self, tokens: Sequence[str], level: str = "char", lowercase: bool = False) -> None:
        check_choice(level, "level", LEVELS)
        if list(tokens[:2]) != [PAD, UNK]:
            raise ValueError(f"a vocabulary starts with {PAD!r} and {UNK!r}, got {tokens[:2]!r}.")
        self.tokens = list(tokens)
        self.level = level
        self.lowercase = lowercase
        self._ids = {token: i for i, token in enumerate(self.tokens) if i >= 2}
        if level == "char":
            if any(len(t) != 1 for t in self.tokens[2:]):
                raise ValueError("a 'char' vocabulary holds single characters only.")
            points = np.array([ord(t) for t in self.tokens[2:]], dtype=np.int64)
            order = np.argsort(points)
            self._points = points[order]
            self._point_ids = (order + 2).astype(np.int64)

    @classmethod
    def build(
        cls, texts: Sequence[str], level: str = "char", lowercase: bool = False, min_freq: int = 1
    ) -> Vocabulary:
        """Builds the vocabulary of ``texts``: tokens seen at least ``min_freq`` times."""
        check_choice(level, "level", LEVELS)
        texts = [t.lower() for t in texts] if lowercase else texts
        if level == "char":
            points, _ = _code_points(texts)
            unique, counts = np.unique(points, return_counts=True)
            pairs = [(chr(int(p)), int(c)) for p, c in zip(unique, counts, strict=True)]
        else:
            pairs = list(Counter(word for text in texts for word in text.split()).items())
        kept = sorted(((t, c) for t, c in pairs if c >= min_freq), key=lambda tc: (-tc[1], tc[0]))
        return cls([PAD, UNK, *(t for t, _ in kept)], level, lowercase)

    def __len__(self) -> int:
        return len(self.tokens)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.state() == other.state()

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} {self.level} tokens, lowercase={self.lowercase})"

    def state(self) -> dict[str, Any]:
        """Plain data to rebuild this vocabulary with :meth:`from_state`."""
        return {"level": self.level, "lowercase": self.lowercase, "tokens": list(self.tokens)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Vocabulary:
        """Rebuilds a vocabulary saved by :meth:`state`."""
        return cls(state["tokens"], state["level"], state["lowercase"])

    def encode_many(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Returns the flat int64 ids of all texts and each text's length in tokens."""
        texts = [t.lower() for t in texts] if self.lowercase else texts
        if self.level == "char":
            points, lengths = _code_points(texts)
            points = points.astype(np.int64)
            pos = np.searchsorted(self._points, points)
            pos = np.minimum(pos, max(len(self._points) - 1, 0))
            if len(self._points):
                found = self._points[pos] == points
                ids = np.where(found, self._point_ids[pos], UNK_ID)
            else:
                ids = np.full(len(points), UNK_ID, dtype=np.int64)
            return ids.astype(np.int64), lengths
        get = self._ids.get
        words = [text.split() for text in texts]
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        flat = (get(word, UNK_ID) for text_words in words for word in text_words)
        return np.fromiter(flat, dtype=np.int64, count=int(lengths.sum())), lengths

    def encode(self, text: str) -> list[int]:
        """Returns the ids of one text."""
        return self.encode_many([text])[0].tolist()

    def decode(self, ids: Sequence[int]) -> str:
        """Returns the text of ids (padding skipped; words joined by spaces)."""
        tokens = [self.tokens[i] for i in ids if i != PAD_ID]
        return ("" if self.level == "char" else " ").join(tokens)


def _ids_of(output: Any) -> Any:
    """Token ids from a tokenizer's output: an Encoding (``.ids``), a dict, or a sequence."""
    if hasattr(output, "ids"):
        return output.ids
    if isinstance(output, dict) and "input_ids" in output:
        return output["input_ids"]
    return output


def describe_tokenizer(tokenizer: Any) -> str:
    """A short name for a tokenizer object or callable."""
    return getattr(tokenizer, "__qualname__", None) or type(tokenizer).__name__


def encode_with(
    tokenizer: Any, texts: Sequence[str], where: Where
) -> tuple[np.ndarray, np.ndarray]:
    """Tokenizes texts with a user's tokenizer into flat int64 ids and per-text lengths.

    Accepts an object with ``encode_batch`` (a Hugging Face ``tokenizers.Tokenizer``: its
    Encodings' ``.ids``), an object with ``encode`` (a ``transformers`` tokenizer, or any
    ``encode(str) -> list[int]``), or a callable ``str -> list[int]``.

    Raises:
        TypeError: If the tokenizer fails or returns something other than a 1-D sequence of
            non-negative ints; the message names the sample (``where(i)``).
    """
    outputs = None
    if hasattr(tokenizer, "encode_batch"):
        # encode_batch_fast (tokenizers >= 0.20) gives the same ids without the offsets.
        batch = getattr(tokenizer, "encode_batch_fast", None) or tokenizer.encode_batch
        try:
            outputs = batch(list(texts))
        except Exception:  # noqa: BLE001 - encoded one by one below to name the failing text
            outputs = None
        if outputs is not None and len(outputs) and hasattr(outputs[0], "ids"):
            return _flat_ids([output.ids for output in outputs])
    if outputs is None:
        encode = tokenizer.encode if hasattr(tokenizer, "encode") else tokenizer
        outputs = []
        for i, text in enumerate(texts):
            try:
                outputs.append(encode(text))
            except Exception as error:
                raise ValueError(
                    f"{where(i)}: the tokenizer {describe_tokenizer(tokenizer)} failed on this "
                    f"text: {error}"
                ) from error
    arrays = []
    for i, output in enumerate(outputs):
        ids = np.asarray(_ids_of(output))
        if ids.size == 0:
            ids = np.zeros(0, dtype=np.int64)
        if ids.ndim != 1 or ids.dtype.kind not in "iu" or (ids.size and ids.min() < 0):
            raise TypeError(
                f"{where(i)}: the tokenizer returned {type(output).__name__} "
                f"{str(output)[:80]!r}; a tokenizer must return a list of token ids (ints >= 0) "
                "or an object with .ids."
            )
        arrays.append(ids.astype(np.int64, copy=False))
    lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
    flat = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    return flat, lengths


def _flat_ids(ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Lists of ids (Encodings' ``.ids``) as one flat int64 buffer and lengths."""
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
    return flat, lengths


def append_eos(flat: np.ndarray, lengths: np.ndarray, eos_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Appends ``eos_id`` to every non-empty sample of a flat buffer that does not already end
    with it (Megatron's ``--append-eod``)."""
    ends = np.cumsum(lengths)
    missing = lengths > 0
    missing[missing] = flat[ends[missing] - 1] != eos_id
    if not missing.any():
        return flat, lengths
    return np.insert(flat, ends[missing], eos_id), lengths + missing


def truncate(
    flat: np.ndarray, lengths: np.ndarray, max_length: int, side: str = "right"
) -> tuple[np.ndarray, np.ndarray]:
    """Cuts every sample of a flat buffer to at most ``max_length`` tokens.

    ``side="right"`` keeps each sample's first tokens, ``"left"`` its last ones.
    """
    if not len(lengths) or int(lengths.max()) <= max_length:
        return flat, lengths
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    position = np.arange(len(flat)) - starts
    if side == "right":
        keep = position < max_length
    else:
        keep = position >= np.repeat(lengths, lengths) - max_length
    return flat[keep], np.minimum(lengths, max_length)


def tokenizer_vocab_size(tokenizer: Any) -> int | None:
    """The vocabulary size a tokenizer declares, if any."""
    get = getattr(tokenizer, "get_vocab_size", None)
    if callable(get):
        return int(get())
    size = getattr(tokenizer, "vocab_size", None)
    if isinstance(size, int):
        return size if not hasattr(tokenizer, "__len__") else max(size, len(tokenizer))
    return None
