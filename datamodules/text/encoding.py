"""How TextDataModule turns texts into token ids: the built-in vocabulary or your tokenizer.

:class:`TextEncoding` is a part :class:`~datamodules.TextDataModule` holds (``dm.encoding``),
with its own state: the built-in vocabulary (built from the train split in ``setup``, or a
checkpoint's, kept until ``setup`` when it comes first) and the largest id seen. It tokenizes
texts held in memory (truncated as ``max_length`` and ``truncation_side`` say, with the
end-of-text id appended as the token store does), restores a checkpoint's vocabulary
(re-tokenizing the texts when its ids differ), and says how many ids a model must embed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from datamodules.text.readers import TextRecords
from datamodules.tokens.store_build import encode
from datamodules.tokens.token_checks import check_vocab
from datamodules.tokens.token_files import TokenFile
from datamodules.tokens.vocab import Vocabulary, describe_tokenizer, tokenizer_vocab_size, truncate

__all__ = ["TextEncoding"]


class TextEncoding:
    """Texts to ids for a :class:`~datamodules.TextDataModule` (see the module docstring).

    Args:
        tokenizer: ``"char"`` / ``"word"`` (the built-in vocabulary), yours, or None (token
            files: the ids are given).
        lowercase: Lower-case texts before the built-in vocabulary sees them.
        min_freq: Built-in vocabulary: tokens seen at least this often in the train split.
        max_length: Truncate to this many tokens (None: keep all).
        truncation_side: ``"right"`` or ``"left"``.
        eos_id: The end-of-text id appended with your tokenizer (None: none).

    Attributes:
        vocab: The built-in vocabulary once built or restored (None: none).
    """

    def __init__(
        self,
        tokenizer: Any,
        lowercase: bool,
        min_freq: int,
        max_length: int | None,
        truncation_side: str,
        eos_id: int | None,
    ) -> None:
        self.tokenizer, self.lowercase, self.min_freq = tokenizer, lowercase, min_freq
        self.max_length, self.truncation_side, self.eos_id = max_length, truncation_side, eos_id
        self.vocab: Vocabulary | None = None
        self._pending: dict[str, Any] | None = None  # a checkpoint's, before setup
        self._max_id: int | None = None

    def prepare(self, train_texts: Callable[[], list[str]]) -> None:
        """The built-in vocabulary, in ``setup``: a checkpoint's restored before, else built
        from ``train_texts()``; nothing with your tokenizer."""
        if isinstance(self.tokenizer, str):
            if self._pending is not None:
                self.vocab = self.vocab_from_state(self._pending)
            else:
                self.vocab = Vocabulary.build(
                    train_texts(), self.tokenizer, self.lowercase, self.min_freq
                )
        self._pending = None

    def tokenize(self, records: TextRecords) -> tuple[np.ndarray, np.ndarray]:
        """The flat ids and the lengths of ``records``' texts."""
        if self.vocab is None:  # as the token store encodes (the end-of-text id appended)
            return encode(
                self.tokenizer,
                records.texts,
                records.where,
                self.max_length,
                self.truncation_side,
                self.eos_id,
            )
        flat, lengths = self.vocab.encode_many(records.texts)
        if self.max_length is not None:
            flat, lengths = truncate(flat, lengths, self.max_length, self.truncation_side)
        return flat, lengths

    def vocab_from_state(self, state: dict[str, Any]) -> Vocabulary:
        """A checkpoint's vocabulary, refused when its level or lowercasing differ."""
        vocab = Vocabulary.from_state(state)
        if (vocab.level, vocab.lowercase) != (self.tokenizer, self.lowercase):
            raise ValueError(
                f"the checkpoint's vocabulary is {vocab.level!r} with lowercase="
                f"{vocab.lowercase}, this module has tokenizer={self.tokenizer!r} and "
                f"lowercase={self.lowercase}: use the checkpoint's settings."
            )
        return vocab

    def state(self) -> dict[str, Any] | None:
        """The vocabulary as plain data (None: your tokenizer)."""
        return self.vocab.state() if self.vocab is not None else None

    def check_state(self, state: dict[str, Any] | None) -> None:
        """Refuses a checkpoint's built-in vocabulary when this module uses your tokenizer."""
        if state is not None and not isinstance(self.tokenizer, str):
            raise ValueError(
                "the checkpoint has a built-in vocabulary but this module uses the tokenizer "
                f"{describe_tokenizer(self.tokenizer)}: the ids would differ."
            )

    def restore(self, state: dict[str, Any] | None, sources: list[Any]) -> None:
        """A checkpoint's vocabulary: kept for ``setup`` (no ``sources`` yet), else used, the
        texts re-tokenized when its ids differ."""
        if not sources:  # before setup: used when setup runs
            self._pending = state
            return
        if state is not None:
            vocab = self.vocab_from_state(state)
            if vocab != self.vocab:
                self.vocab = vocab  # same lengths (same level and lowercase), new ids
                for records in sources:
                    records.encoded.set_tokens(self.tokenize(records)[0])

    def vocab_size(self, sources: list[Any], declared: int | None, pad_id: int) -> int:
        """Ids the model must embed: the built-in vocabulary's size, the tokenizer's (or
        ``declared``), or the largest id of ``sources`` + 1."""
        if self.vocab is not None:
            return len(self.vocab)
        size = tokenizer_vocab_size(self.tokenizer) or declared
        if self._max_id is None:
            tops = [(_max_id(s), s) for s in sources]
            for top, source in tops:  # vocab_size= is the size: an id above it is an error
                if self.tokenizer is None and isinstance(source, TokenFile):
                    check_vocab(source.name, top, declared)
            self._max_id = max((top for top, _ in tops), default=-1)
        return max(size or 0, self._max_id + 1, pad_id + 1)


def _max_id(source: Any) -> int:
    """A source's largest token id: a store's from its metadata, else read from the tokens."""
    known = getattr(source, "max_id", None)
    return int(known) if known is not None else source.encoded.max_id()
