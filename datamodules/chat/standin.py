"""A stand-in for ``datamodules.conversations.ChatRenderer`` with the same signature, until the
shared conversations layer lands (then this module goes).

Its ids are ``apply_chat_template``'s; its mask trains, per assistant message, the tokens
between the rendering of the conversation before it (with the generation prompt) and the
rendering through it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from datamodules.core.checks import check_choice

__all__ = ["ChatRenderer", "ConversationError"]

ROLES = ("system", "user", "assistant", "tool")
SHAREGPT = {"human": "user", "gpt": "assistant", "system": "system"}


class ConversationError(ValueError):
    """A record that cannot be rendered; the message names the key or role at fault."""


class ChatRenderer:
    """Renders records into ``(input_ids int32, trained bool)`` (see the module docstring)."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        chat_template: str | None = None,
        train_on: str = "assistant",
        messages_key: str = "messages",
    ) -> None:
        from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

        try:
            from tokenizers import Tokenizer as RawTokenizer
        except ImportError:  # pragma: no cover
            RawTokenizer = ()  # noqa: N806
        if isinstance(tokenizer, RawTokenizer):
            tokenizer = PreTrainedTokenizerFast(tokenizer_object=tokenizer)
        if not isinstance(tokenizer, PreTrainedTokenizerBase):
            raise TypeError(
                f"tokenizer={tokenizer!r} is not accepted: use a transformers tokenizer or a "
                "tokenizers.Tokenizer."
            )
        check_choice(train_on, "train_on", ("assistant", "last", "all"))
        if chat_template is not None:
            tokenizer.chat_template = chat_template
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "chat_template=None is not accepted: the tokenizer has no chat template; give "
                "chat_template= (a Jinja template string)."
            )
        self.tokenizer = tokenizer
        self.train_on, self.messages_key = train_on, messages_key
        self.eos_id = tokenizer.eos_token_id
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.eos_id if self.eos_id is not None else 0)
        self.vocab_size = len(tokenizer)

    def fingerprint(self) -> str:
        tok = self.tokenizer
        state = tok.backend_tokenizer.to_str() if hasattr(tok, "backend_tokenizer") else repr(tok)
        text = json.dumps([state, tok.chat_template, self.train_on, self.messages_key, "standin-1"])
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def _ids(self, messages: list[dict], generation: bool = False) -> list[int]:
        out = self.tokenizer.apply_chat_template(
            messages, tokenize=True, return_dict=True, add_generation_prompt=generation
        )
        return list(out["input_ids"])

    def _messages(self, record: Mapping[str, Any]) -> list[dict]:
        if "prompt" in record and "completion" in record:
            return [*record["prompt"], *record["completion"]]
        if self.messages_key not in record:
            if "conversations" in record:
                raw = record["conversations"]
            else:
                raise ConversationError(
                    f"record has no {self.messages_key!r} key (keys: {sorted(record)})"
                )
        else:
            raw = record[self.messages_key]
        messages = []
        for i, m in enumerate(raw):
            if "from" in m:
                role = SHAREGPT.get(m["from"])
                content = m.get("value")
                if role is None:
                    raise ConversationError(
                        f"unknown role {m['from']!r} in message {i} (accepted: "
                        f"{', '.join(ROLES)}; ShareGPT: human, gpt, system)"
                    )
            else:
                role, content = m.get("role"), m.get("content")
                if role not in ROLES:
                    raise ConversationError(
                        f"unknown role {role!r} in message {i} (accepted: "
                        f"{', '.join(ROLES)}; ShareGPT: human, gpt, system)"
                    )
            if content is None:
                raise ConversationError(f"message {i} has no 'content'")
            messages.append({"role": role, "content": content})
        return messages

    def __call__(self, record: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        if "prompt" in record and isinstance(record.get("prompt"), str):
            tok = self.tokenizer
            prompt = tok(record["prompt"], add_special_tokens=False)["input_ids"]
            completion = tok(record["completion"], add_special_tokens=False)["input_ids"]
            eos = [self.eos_id] if self.eos_id is not None else []
            ids = np.asarray(prompt + completion + eos, dtype=np.int32)
            trained = np.zeros(len(ids), dtype=bool)
            trained[len(prompt) :] = True
            return ids, trained
        return self.render_messages(self._messages(record))

    def render_messages(self, messages: list[dict]) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(self._ids(messages), dtype=np.int32)
        trained = np.zeros(len(ids), dtype=bool)
        if self.train_on == "all":
            trained[:] = True
            return ids, trained
        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        if self.train_on == "last":
            turns = turns[-1:]
        for i in turns:
            start = len(self._ids(messages[:i], generation=True)) if i else 0
            stop = len(self._ids(messages[: i + 1]))
            trained[start:stop] = True
        if not trained.any():
            raise ConversationError(
                f"nothing to train on under train_on={self.train_on!r}: no assistant message"
            )
        return ids, trained
