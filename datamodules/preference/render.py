"""One preference record into token ids, as TRL 1.16's ``DPOTrainer`` / ``KTOTrainer`` build them.

:class:`PreferenceRenderer` is what the token store's builder calls per record
(:func:`datamodules.conversations.store_build.build_store`). For a pair it tokenizes, as TRL
does:

* message lists: ``apply_chat_template(prompt, add_generation_prompt=True)``, then
  ``apply_chat_template(prompt + chosen)`` and ``apply_chat_template(prompt + rejected)``
  (transformers' own renderer, through :class:`~datamodules.conversations.ChatRenderer`);
* strings: ``tokenizer(prompt)``, ``tokenizer(prompt + chosen + EOS)`` and
  ``tokenizer(prompt + rejected + EOS)`` (EOS added unless the completion ends with it).

The prompt's length is the shorter of the two common prefixes of the prompt's ids with each
sequence's ids (TRL's ``common_prefix_length``); the chosen sequence is the prompt's ids then
the chosen completion's, that is ``prompt + chosen``'s ids whole, its completion mask 1 from the
prompt's length on. Unpaired feedback is one sequence, ``prompt + completion``, alike.

A pair is **one document** of the store: the chosen sequence, then the rejected one. The mask
stored beside the ids holds codes (:data:`COMPLETION`, :data:`REJECTED`, :data:`DESIRABLE`), so
the views split a document back into its sequences wherever the tokens layer gathers it (padded,
packed, blended), and a pair always travels whole.

Over the limit (``max_length`` per sequence; with packing, ``seq_length`` for both sequences of
a pair together, since a pair shares a row), a record is dropped, cut (the prompt's start
first, both sequences alike, then the completions' ends) or refused (``overlong="error"``,
raised even under ``on_error="skip"``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from datamodules.conversations import ChatRenderer, ConversationError
from datamodules.conversations.render import as_chat_tokenizer, encode_text, token_id
from datamodules.core.checks import check_string
from datamodules.preference.records import PreferenceRecord, parse_preference
from datamodules.tokenizing.fingerprint import tokenizer_fingerprint

__all__ = [
    "COMPLETION",
    "DESIRABLE",
    "OverlongError",
    "PreferenceRenderer",
    "REJECTED",
    "RULES_VERSION",
    "common_prefix",
]

#: Mask code: a completion token (trained).
COMPLETION = 1
#: Mask code: a token of a pair's rejected sequence.
REJECTED = 2
#: Mask code: a token of a desirable unpaired completion (``label=True``).
DESIRABLE = 4
#: The version of these rules, part of the store's key.
RULES_VERSION = 1


class OverlongError(ConversationError):
    """A record over the limit under ``overlong="error"`` (raised under any ``on_error``)."""

    always_raise = True


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading ids ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


class PreferenceRenderer:
    """Renders preference records into one store document each (see the module docstring).

    Picklable (render workers receive it).

    Args:
        tokenizer: A transformers tokenizer, or a ``tokenizers.Tokenizer``.
        chat_template: A Jinja template replacing the tokenizer's; needed for message lists
            when the tokenizer has none (strings need no template).
        max_length: The most tokens of one sequence (None: no limit).
        pair_length: The most tokens of a pair's two sequences together (packing's
            ``seq_length``), and of an unpaired sequence; None: no limit.
        overlong: ``"drop"``, ``"truncate"`` or ``"error"``.
        eos_token: The token that ends string completions, for a tokenizer that declares none
            (None: the tokenizer's ``eos_token``).
    """

    def __init__(
        self,
        tokenizer: Any,
        chat_template: str | None = None,
        max_length: int | None = None,
        pair_length: int | None = None,
        overlong: str = "drop",
        eos_token: str | None = None,
    ) -> None:
        self.tokenizer = as_chat_tokenizer(tokenizer)
        check_string(eos_token, "eos_token", "a token of the tokenizer's vocabulary or None",
                     allow_none=True)  # fmt: skip
        self.max_length, self.pair_length, self.overlong = max_length, pair_length, overlong
        try:
            self.chat: ChatRenderer | None = ChatRenderer(
                self.tokenizer, chat_template=chat_template, eos_token=eos_token
            )
            self.chat_template: str | None = self.chat.chat_template
        except ValueError:  # no template: strings only
            self.chat, self.chat_template = None, None
        self.eos_token = self.tokenizer.eos_token if eos_token is None else eos_token
        self.eos_id = (
            self.tokenizer.eos_token_id
            if eos_token is None
            else token_id(self.tokenizer, eos_token)
        )
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.eos_id if self.eos_id is not None else 0)
        self.vocab_size = len(self.tokenizer)

    def fingerprint(self) -> str:
        """A hex digest of what decides the store: the tokenizer's content, the template,
        the limits, ``overlong`` and :data:`RULES_VERSION`."""
        parts = {
            "tokenizer": tokenizer_fingerprint(self.tokenizer),
            "split_special_tokens": bool(getattr(self.tokenizer, "split_special_tokens", False)),
            "template": self.chat_template,
            "limits": [self.max_length, self.pair_length, self.overlong],
            "rules": RULES_VERSION,
        }
        if self.eos_token != self.tokenizer.eos_token:  # given: stores without it keep their keys
            parts["eos_token"] = self.eos_token
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()

    # -- tokenizing as TRL does ------------------------------------------------------------
    def _template(self, messages: list[dict[str, Any]], generation: bool) -> np.ndarray:
        if self.chat is None:
            raise ConversationError(
                "the record holds message lists, but the tokenizer has no chat template: give "
                "chat_template= (a Jinja template), or strings"
            )
        return self.chat.template_ids(messages, generation).astype(np.int64)

    def _text(self, text: str) -> np.ndarray:
        return encode_text(self.tokenizer, text, special=True)[0].astype(np.int64)

    def _with_eos(self, text: Any) -> Any:
        if self.eos_token is None:
            raise ConversationError(
                "string completions end with EOS, but the tokenizer has no eos_token: give "
                "eos_token= (the token that ends a completion, e.g. eos_token='<|im_end|>' for "
                "ChatML), or a tokenizer that declares one"
            )
        return text if text.endswith(self.eos_token) else text + self.eos_token

    def sequences(self, record: PreferenceRecord) -> tuple[int, list[np.ndarray]]:
        """``(prompt length, [sequence ids, ...])``: chosen and rejected (a pair), or the one
        sequence (unpaired), each the prompt's ids then its completion's."""
        completions = [record.chosen, record.rejected] if record.paired else [record.completion]
        if record.conversational:
            prompt = self._template(record.prompt, True)
            full = [self._template(record.prompt + c, False) for c in completions]
        else:
            prompt = self._text(record.prompt)
            full = [self._text(record.prompt + self._with_eos(c)) for c in completions]
        length = min(common_prefix(prompt, ids) for ids in full)
        names = ("chosen", "rejected") if record.paired else ("completion",)
        for name, ids in zip(names, full, strict=True):
            if len(ids) <= length:
                raise ConversationError(f"the {name!r} completion renders no tokens")
        return length, full

    # -- the store's entry point -----------------------------------------------------------
    def __call__(self, record: Mapping[str, Any]) -> tuple[Any, Any, str]:
        """``(ids, codes, note)`` of one record: the document's ids (int64), its mask codes
        (uint8) and what was done (``"pair"``, ``"unpaired"``, with ``":truncated"`` or
        ``":dropped"``; ids None when dropped).

        Raises:
            ConversationError: A record that cannot be used (see
                :func:`~datamodules.preference.records.parse_preference`).
            OverlongError: Over the limit under ``overlong="error"``.
        """
        parsed = parse_preference(record)
        kind = "pair" if parsed.paired else "unpaired"
        prompt, full = self.sequences(parsed)
        note = kind
        if self._over(prompt, full):
            if self.overlong == "error":
                raise OverlongError(self._overlong_message(kind, full))
            if self.overlong == "drop":
                return None, None, f"{kind}:dropped"
            prompt, full = self._truncate(prompt, full)
            note = f"{kind}:truncated"
        codes = []
        for k, ids in enumerate(full):
            code = np.zeros(len(ids), dtype=np.uint8)
            code[prompt:] = COMPLETION
            if k == 1:
                code |= REJECTED
            if not parsed.paired and parsed.label:
                code |= DESIRABLE
            codes.append(code)
        return np.concatenate(full), np.concatenate(codes), note

    def _over(self, prompt: int, full: list[np.ndarray]) -> bool:
        lengths = [len(ids) for ids in full]
        if self.max_length is not None and max(lengths) > self.max_length:
            return True
        return self.pair_length is not None and sum(lengths) > self.pair_length

    def _overlong_message(self, kind: str, full: list[np.ndarray]) -> str:
        lengths = " and ".join(str(len(ids)) for ids in full)
        limit = (
            f"max_length={self.max_length}"
            if self.max_length is not None
            else f"seq_length={self.pair_length} (a pair's sequences together)"
        )
        return (
            f"the {kind} has {lengths} tokens, over {limit}, and overlong='error': raise the "
            "limit, or use overlong='drop' or 'truncate'"
        )

    def _truncate(self, prompt: int, full: list[np.ndarray]) -> tuple[int, list[np.ndarray]]:
        """Cuts the prompt's start (every sequence alike), then the completions' ends."""
        completions = [len(ids) - prompt for ids in full]
        need = 0
        if self.max_length is not None:
            need = prompt + max(completions) - self.max_length
        if self.pair_length is not None:
            total = len(full) * prompt + sum(completions)
            need = max(need, -(-(total - self.pair_length) // len(full)))
        cut = min(prompt, max(need, 0))
        full = [ids[cut:] for ids in full]
        prompt -= cut
        keep = list(completions)
        if self.max_length is not None:
            keep = [min(n, self.max_length - prompt) for n in keep]
        if self.pair_length is not None:
            budget = self.pair_length - len(full) * prompt
            if sum(keep) > budget:
                if len(keep) == 1:
                    keep = [budget]
                else:
                    first = min(keep[0], max(budget // 2, budget - keep[1]))
                    keep = [first, min(keep[1], budget - first)]
        keep = [max(n, 1) for n in keep]
        return prompt, [ids[: prompt + n] for ids, n in zip(full, keep, strict=True)]
