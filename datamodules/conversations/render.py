"""One conversation rendered with its chat template into token ids and a loss mask.

:class:`ChatRenderer` gives ``(input_ids, trained)`` for one record. The ids are exactly
``tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]``: the
conversation is rendered by transformers' own Jinja renderer and tokenized once, with offsets.
Which tokens are trained (the rules, :data:`RULES_VERSION`):

* a template that marks generation (``{% generation %}``): exactly transformers'
  ``return_assistant_tokens_mask``, every token overlapping a marked span;
* any other template: for each assistant message ``i``, the text that rendering
  ``messages[:i + 1]`` adds after rendering ``messages[:i]`` with ``add_generation_prompt=True``
  (its content and its end of turn, never its role header), limited to where that rendering and
  the whole conversation's agree (Phi-3 appends EOS only after the last message), mapped to
  tokens through the offsets of the one tokenization. Pieces are never tokenized apart: a prefix
  tokenized alone merges differently at its end;
* prompt/completion strings: ``prompt + completion`` tokenized once (with the tokenizer's own
  special tokens), trained from the completion's first character, then EOS (trained).

``train_on="last"`` keeps the last assistant turn only, ``"all"`` trains every token.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from itertools import chain
from typing import Any

import numpy as np

from datamodules.conversations.messages import Conversation, ConversationError, parse_record
from datamodules.core.checks import check_choice, check_string, rejected
from datamodules.tokenizing.fingerprint import tokenizer_fingerprint

__all__ = [
    "RULES_VERSION",
    "TRAIN_ON",
    "ChatRenderer",
    "as_chat_tokenizer",
    "encode_text",
    "token_id",
]

#: The version of the rendering and masking rules, part of :meth:`ChatRenderer.fingerprint`.
RULES_VERSION = 1
#: The accepted values of ``train_on``.
TRAIN_ON = ("assistant", "last", "all")
_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")


@functools.cache
def _renderer() -> dict[str, Any] | None:
    """transformers' own pieces of ``apply_chat_template``'s rendering (the cached compiled
    template, the conversion of the messages, the tracked render), so that a record's
    several renders convert its messages once; None where this transformers lacks one (then
    its public ``render_jinja_template`` renders the same text, more slowly)."""
    try:
        from transformers.utils import chat_template_utils as utils

        return {
            "compile": utils._compile_jinja_template,
            "plain": utils._plain_template_data,
            "alias": utils._alias_reasoning_fields,
            "track": utils._render_with_assistant_indices,
        }
    except (ImportError, AttributeError):  # pragma: no cover - another transformers
        return None


def as_chat_tokenizer(tokenizer: Any) -> Any:
    """A transformers tokenizer for ``tokenizer``: itself (a fast one), or a
    ``tokenizers.Tokenizer`` wrapped as ``PreTrainedTokenizerFast(tokenizer_object=...)``.

    Raises:
        TypeError: Neither, or a transformers tokenizer without offsets (not ``is_fast``).
    """
    from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

    if isinstance(tokenizer, PreTrainedTokenizerBase):
        if not getattr(tokenizer, "is_fast", False):
            raise rejected(
                "tokenizer",
                _Brief(tokenizer),
                "a fast tokenizer (backed by the tokenizers library: the loss mask maps the "
                "rendered text to tokens through its offsets), or a tokenizers.Tokenizer",
                TypeError,
            )
        return tokenizer
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover - tokenizers comes with transformers
        Tokenizer = ()  # noqa: N806
    if isinstance(tokenizer, Tokenizer):
        return PreTrainedTokenizerFast(tokenizer_object=tokenizer)
    raise rejected(
        "tokenizer",
        _Brief(tokenizer),
        "a transformers tokenizer (PreTrainedTokenizerBase) or a tokenizers.Tokenizer",
        TypeError,
    )


def encode_text(
    tokenizer: Any, text: str, special: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``text``'s ids (int32), as ``tokenizer(text, add_special_tokens=special)`` gives them,
    and each token's character offsets (starts, ends); ``tokenizer`` a fast transformers one."""
    tok = tokenizer
    backend = getattr(tok, "_tokenizer", None)
    if (
        backend is not None
        and backend.truncation is None
        and backend.padding is None
        and backend.encode_special_tokens == bool(tok.split_special_tokens)
    ):
        encoding = backend.encode(text, add_special_tokens=special)
        ids, offsets = encoding.ids, encoding.offsets
    else:
        out = tok(text, add_special_tokens=special, return_offsets_mapping=True)
        ids, offsets = out["input_ids"], out["offset_mapping"]
    n = len(ids)
    flat = np.fromiter(chain.from_iterable(offsets), dtype=np.int64, count=2 * n)
    return np.asarray(ids, dtype=np.int32), flat[0::2], flat[1::2]


def token_id(tokenizer: Any, token: str, name: str = "eos_token") -> int:
    """The id of ``token`` in a transformers tokenizer's vocabulary; refused (naming ``name``)
    when it has none."""
    found = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(found, int) or (
        found == tokenizer.unk_token_id and token != tokenizer.unk_token
    ):
        raise rejected(
            name, token, "a token of the tokenizer's vocabulary (one id, e.g. a special "
            "token such as '<|im_end|>' or '<|endoftext|>')",
        )  # fmt: skip
    return found


class _Brief:
    """A value shown in an error by its repr if short, else by its type: a tokenizer's repr
    lists its whole vocabulary of added tokens."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        shown = repr(self.value)
        return shown if len(shown) <= 60 else f"{type(self.value).__name__}(...)"


def _common_prefix(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n  # a[:low] == b[:low], a[:high] != b[:high]
    while high - low > 1:
        mid = (low + high) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid
    return low


class ChatRenderer:
    """Renders records with a chat template into ``(input_ids, trained)``, as the module says.

    Picklable (tokenize workers receive it); rendering many records is calling it per record.

    Args:
        tokenizer: A transformers tokenizer (``PreTrainedTokenizerBase``) or a
            ``tokenizers.Tokenizer`` (then ``chat_template`` gives the template).
        chat_template: The template, overriding the tokenizer's (or the name of one of its
            templates); None: the tokenizer's.
        train_on: ``"assistant"`` (every assistant turn), ``"last"`` (the last assistant turn)
            or ``"all"`` (every token).
        messages_key: The record's key holding the messages.
        eos_token: The token that ends a prompt/completion record of strings (and the
            template's ``eos_token``), for a tokenizer that declares none (a
            ``tokenizers.Tokenizer`` never does); None: the tokenizer's own.

    Attributes:
        tokenizer: The transformers tokenizer used.
        chat_template: The template's text.
        eos_id: The tokenizer's EOS id, or None.
        pad_id: The tokenizer's pad id, else EOS, else 0.
        vocab_size: ``len(tokenizer)``.

    Raises:
        TypeError: A wrong tokenizer type, or a non-string ``chat_template`` / ``train_on``.
        ValueError: Neither the tokenizer nor ``chat_template`` gives a template (naming
            ``chat_template``); an unknown ``train_on``.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        chat_template: str | None = None,
        train_on: str = "assistant",
        messages_key: str = "messages",
        eos_token: str | None = None,
    ) -> None:
        self.tokenizer = as_chat_tokenizer(tokenizer)
        check_string(
            eos_token, "eos_token", "a token of the tokenizer's vocabulary or None", allow_none=True
        )
        check_string(
            chat_template, "chat_template", "a Jinja chat template or None", allow_none=True
        )
        self.train_on = check_choice(train_on, "train_on", TRAIN_ON)
        self.messages_key = check_string(messages_key, "messages_key", "a record key")
        try:
            template = self.tokenizer.get_chat_template(chat_template)
        except ValueError:
            template = None
        if not isinstance(template, str) or not template:
            raise rejected(
                "chat_template",
                chat_template,
                f"a Jinja template string: the tokenizer ({type(self.tokenizer).__name__}) has "
                "no chat template of its own",
            )
        self.chat_template = template
        self.marks_generation = bool(_GENERATION.search(template))
        self.eos_token = eos_token
        self.eos_id = (
            self.tokenizer.eos_token_id
            if eos_token is None
            else token_id(self.tokenizer, eos_token)
        )
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.eos_id if self.eos_id is not None else 0)
        self.vocab_size = len(self.tokenizer)
        # What apply_chat_template hands the template besides the messages.
        specials = dict(self.tokenizer.special_tokens_map)
        if eos_token is not None:
            specials["eos_token"] = eos_token
        private = _renderer()
        self._template_kwargs = specials if private is None else private["plain"](specials)

    # -- identity ------------------------------------------------------------------------------

    def fingerprint(self) -> str:
        """A hex digest stable across processes and runs of what decides the output: the
        tokenizer's content (its serialized backend: vocabulary, merges, added and special
        tokens, normalizer...; or its vocabulary), its special tokens, the template,
        ``train_on``, ``messages_key`` and :data:`RULES_VERSION`."""
        tok = self.tokenizer
        parts = {
            "tokenizer": tokenizer_fingerprint(tok),
            "split_special_tokens": bool(getattr(tok, "split_special_tokens", False)),
            "template": self.chat_template,
            "train_on": self.train_on,
            "messages_key": self.messages_key,
            "rules": RULES_VERSION,
        }
        if self.eos_token is not None:  # only then: stores rendered without it keep their keys
            parts["eos_token"] = self.eos_token
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()

    # -- the two entry points ------------------------------------------------------------------

    def __call__(self, record: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """``(input_ids int32, trained bool)`` of one record (any format of
        :mod:`datamodules.conversations.messages`).

        Raises:
            ConversationError: A record that cannot be read or rendered, or that has nothing to
                train on.
        """
        conversation = parse_record(record, self.messages_key)
        if conversation.text is not None:
            return self._render_strings(*conversation.text)
        return self._render(conversation)

    def render_messages(self, messages: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
        """The same, for an already normalised list of ``{"role", "content"}`` messages."""
        return self._render(Conversation(list(messages)))

    # -- rendering -----------------------------------------------------------------------------

    def _prepare(self, messages: list[dict[str, Any]]) -> Any:
        """``messages`` as transformers' renderer hands them to the template (plain JSON data,
        reasoning fields aliased), made once per record for all its renders."""
        messages = [{k: v for k, v in m.items() if v is not None} for m in messages]
        private = _renderer()
        return messages if private is None else private["alias"](private["plain"](messages))

    def _template(
        self, messages: list[dict[str, Any]], generation_prompt: bool, track: bool = False
    ) -> tuple[str, list[tuple[int, int]]]:
        """The rendered text of prepared ``messages`` (and with ``track`` the generation
        spans), exactly as ``apply_chat_template`` renders it."""
        kwargs = self._template_kwargs
        private = _renderer()
        try:
            if private is None:  # another transformers: its public renderer
                from transformers.utils.chat_template_utils import render_jinja_template

                rendered, spans = render_jinja_template(
                    conversations=[messages],
                    chat_template=self.chat_template,
                    return_assistant_tokens_mask=track,
                    add_generation_prompt=generation_prompt,
                    **kwargs,
                )
                return rendered[0], (spans[0] if track else [])
            compiled = private["compile"](self.chat_template)
            if track:
                return private["track"](compiled, messages, None, None, generation_prompt, **kwargs)
            text = compiled.render(
                messages=messages,
                tools=None,
                documents=None,
                add_generation_prompt=generation_prompt,
                **kwargs,
            )
            return text, []
        except Exception as error:  # noqa: BLE001 - a template's raise_exception, a Jinja error
            raise ConversationError(
                f"the chat template refused the conversation: {error}"
            ) from error

    def _encode(
        self, text: str, special: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``text``'s ids and offsets (see :func:`encode_text`)."""
        return encode_text(self.tokenizer, text, special)

    def template_ids(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = False
    ) -> np.ndarray:
        """``tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
        add_generation_prompt=...)["input_ids"]`` (int32), rendered as :meth:`__call__`
        renders.

        Raises:
            ConversationError: The template refuses the messages.
        """
        text, _ = self._template(self._prepare(messages), add_generation_prompt)
        return self._encode(text)[0]

    def _render(self, conversation: Conversation) -> tuple[np.ndarray, np.ndarray]:
        messages, first = conversation.messages, conversation.first_trained
        turns = [i for i in range(first, len(messages)) if messages[i].get("role") == "assistant"]
        if self.train_on != "all" and not turns:
            where = " in the completion" if first else ""
            raise ConversationError(
                f"nothing to train on under train_on={self.train_on!r}: no assistant message{where}"
            )
        marked = self.marks_generation and self.train_on != "all"
        messages = self._prepare(messages)
        full, marked_spans = self._template(messages, False, track=marked)
        ids, starts, ends = self._encode(full)
        if self.train_on == "all":
            return ids, np.ones(len(ids), dtype=bool)
        if marked:
            spans = self._marked_spans(messages, first, full, marked_spans)
        else:
            spans = self._turn_spans(messages, turns, full)
        trained = np.zeros(len(ids), dtype=bool)
        for start, end, strict in spans:
            inside = (ends > start) & (starts < end)
            if strict:  # cut where a later turn changes the text: no token across the cut
                inside &= ends <= end
            trained |= inside
        if not trained.any():
            raise ConversationError(
                f"nothing to train on under train_on={self.train_on!r}: the template renders no "
                "text of the assistant messages"
            )
        return ids, trained

    def _marked_spans(
        self,
        messages: list[dict[str, Any]],
        first: int,
        full: str,
        spans: list[tuple[int, int]],
    ) -> list[tuple[int, int, bool]]:
        """The template's generation spans (those of the completion for a prompt/completion
        record; the last one under ``train_on="last"``)."""
        if first:
            prompt, _ = self._template(messages[:first], False)
            boundary = _common_prefix(prompt, full)
            spans = [(s, e) for s, e in spans if s >= boundary]
        if self.train_on == "last":
            spans = [span for span in spans if span[1] > span[0]][-1:]
        return [(s, e, False) for s, e in spans]

    def _turn_spans(
        self, messages: list[dict[str, Any]], turns: list[int], full: str
    ) -> list[tuple[int, int, bool]]:
        """Each assistant turn's added text (see the module), as character spans of ``full``;
        ``strict`` where the turn's rendering stops agreeing with ``full`` before its end."""
        if self.train_on == "last":
            turns = turns[-1:]
        spans = []
        last = len(messages) - 1
        for i in turns:
            prompt = self._prompt(messages[:i])
            turn = full if i == last else self._template(messages[: i + 1], False)[0]
            start = _common_prefix(prompt, turn)
            agree = len(turn) if i == last else _common_prefix(turn, full)
            if agree > start:
                spans.append((start, agree, agree < len(turn)))
        return spans

    def _prompt(self, history: list[dict[str, Any]]) -> str:
        """The text before an assistant turn: ``history`` with the generation prompt."""
        try:
            return self._template(history, True)[0]
        except ConversationError:
            if history:
                raise
            return (
                ""  # a conversation opening with the assistant, on a template that needs a message
            )

    def _render_strings(self, prompt: str, completion: str) -> tuple[np.ndarray, np.ndarray]:
        """A prompt/completion record of strings: ``prompt + completion + EOS``."""
        if self.eos_id is None:
            raise ConversationError(
                "a prompt/completion record of strings ends with EOS, but the tokenizer has no "
                "eos_token: give eos_token= (the token that ends a completion, e.g. "
                "eos_token='<|im_end|>' for ChatML), or a tokenizer that declares one"
            )
        if self.train_on != "all" and not completion:
            raise ConversationError(
                f"nothing to train on under train_on={self.train_on!r}: 'completion' is empty"
            )
        ids, starts, ends = self._encode(prompt + completion, special=True)
        trained = (ends > len(prompt)) & (ends > starts)
        if self.train_on == "all":
            trained[:] = True
        if not len(ids) or ids[-1] != self.eos_id:
            ids = np.append(ids, np.int32(self.eos_id))
            trained = np.append(trained, True)
        else:
            trained[-1] = True
        return ids, trained
