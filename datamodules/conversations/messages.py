"""The record formats of conversations, normalised to one list of ``{"role", "content"}``.

A record is one of:

* OpenAI / Hugging Face messages: ``record[messages_key]`` is ``[{"role", "content"}, ...]``;
* ShareGPT: ``record[messages_key]`` is ``[{"from", "value"}, ...]``, with ``human``, ``gpt`` and
  ``system`` mapped to ``user``, ``assistant`` and ``system`` (under the default
  ``messages_key="messages"``, a record holding ``conversations`` instead is read from there);
* TRL's prompt/completion: ``prompt`` and ``completion`` are both message lists (the
  conversation is prompt + completion, trained on the completion), or both strings.

:func:`parse_record` turns a record into a :class:`Conversation`; anything it cannot read raises
:class:`ConversationError`, whose text names the key or the role at fault (messages counted
from 1). The DataModule that reads the record prefixes its file and line or row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ROLES",
    "SHAREGPT_ROLES",
    "Conversation",
    "ConversationError",
    "normalize_messages",
    "parse_record",
]

#: The roles a message may have.
ROLES = ("system", "user", "assistant", "tool")
#: ShareGPT's ``from`` values and the roles they stand for (the roles themselves are also read).
SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "system": "system"}
_ACCEPTED = f"accepted: {', '.join(ROLES)}; ShareGPT: {', '.join(SHAREGPT_ROLES)}"


class ConversationError(ValueError):
    """A record that cannot be rendered; ``str(e)`` says why, naming the key or role at fault.

    For example ``"record has no 'messages' key (keys: ['text', 'id'])"``, ``"unknown role 'bot'
    in message 2 (accepted: system, user, assistant, tool; ShareGPT: human, gpt, system)"``,
    ``"message 1 has no 'content'"`` or ``"nothing to train on under train_on='assistant': no
    assistant message"``. Messages are counted from 1. The caller (the DataModule) prefixes the
    file and line or row.
    """


@dataclass(frozen=True)
class Conversation:
    """A record read: its messages, and which of them may be trained on.

    Attributes:
        messages: ``{"role", "content", ...}`` dicts (other keys of an OpenAI message, such as
            ``tool_calls``, are kept; keys whose value is None are dropped, as transformers'
            ``apply_chat_template`` drops them).
        first_trained: The index of the first message whose assistant turns are trained: 0,
            or ``len(prompt)`` for a prompt/completion record of message lists.
        text: For a prompt/completion record of strings, ``(prompt, completion)``; else None
            (then ``messages`` is empty).
    """

    messages: list[dict[str, Any]]
    first_trained: int = 0
    text: tuple[str, str] | None = None


def _kind(value: Any) -> str:
    return type(value).__name__


def normalize_messages(messages: Any, key: str = "messages") -> list[dict[str, Any]]:
    """``messages`` (OpenAI or ShareGPT dicts) as ``{"role", "content", ...}`` dicts.

    Args:
        messages: The list a record holds under ``key``.
        key: The record's key, named in errors.

    Raises:
        ConversationError: Not a non-empty list of mappings; a message without a role (``role``
            or ``from``) or content (``content`` or ``value``; an assistant message with
            ``tool_calls`` may have none); an unknown role; content that is neither a string
            nor a list of parts.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ConversationError(f"{key!r} is a {_kind(messages)}, not a list of messages")
    if not messages:
        raise ConversationError(f"{key!r} is an empty list: a conversation needs a message")
    out = []
    for number, message in enumerate(messages, start=1):
        if not isinstance(message, Mapping):
            raise ConversationError(f"message {number} is a {_kind(message)}, not a mapping")
        if "from" in message and "role" not in message:  # ShareGPT
            role = SHAREGPT_ROLES.get(message["from"], message["from"])
            content = message.get("value")
            normal: dict[str, Any] = {"role": role}
            content_key = "value"
        elif "role" in message:
            normal = {k: v for k, v in message.items() if v is not None}
            role, content, content_key = message["role"], message.get("content"), "content"
        else:
            raise ConversationError(
                f"message {number} has no 'role' (nor ShareGPT's 'from'): keys {sorted(message)}"
            )
        if role not in ROLES:
            raise ConversationError(f"unknown role {role!r} in message {number} ({_ACCEPTED})")
        if content is None:
            if role == "assistant" and normal.get("tool_calls"):
                out.append(normal)
                continue
            raise ConversationError(f"message {number} has no {content_key!r}")
        if not isinstance(content, (str, list)):
            raise ConversationError(
                f"message {number}'s {content_key!r} is a {_kind(content)}: "
                "accepted: a string or a list of content parts"
            )
        normal["content"] = content
        out.append(normal)
    return out


def parse_record(record: Any, messages_key: str = "messages") -> Conversation:
    """The :class:`Conversation` a record holds (see the module's formats).

    Args:
        record: A mapping (a JSON object, a row).
        messages_key: Where the messages are. Under the default ``"messages"``, a record
            without it that holds ``conversations`` (ShareGPT's key) is read from there.

    Raises:
        ConversationError: The record is not a mapping, holds neither ``messages_key`` nor
            ``prompt`` and ``completion``, or its messages are bad (:func:`normalize_messages`).
    """
    if not isinstance(record, Mapping):
        raise ConversationError(f"record is a {_kind(record)}, not a mapping")
    key = messages_key
    if key not in record and key == "messages" and "conversations" in record:
        key = "conversations"
    if key in record:
        return Conversation(normalize_messages(record[key], key))
    if "prompt" in record and "completion" in record:
        prompt, completion = record["prompt"], record["completion"]
        if isinstance(prompt, str) and isinstance(completion, str):
            return Conversation([], text=(prompt, completion))
        if isinstance(prompt, str) or isinstance(completion, str):
            raise ConversationError(
                f"'prompt' is a {_kind(prompt)} and 'completion' a {_kind(completion)}: "
                "accepted: both strings or both lists of messages"
            )
        head = normalize_messages(prompt, "prompt")
        tail = normalize_messages(completion, "completion")
        return Conversation(head + tail, first_trained=len(head))
    if "prompt" in record or "completion" in record:
        present, missing = (
            ("prompt", "completion") if "prompt" in record else ("completion", "prompt")
        )
        raise ConversationError(f"record has {present!r} but no {missing!r}")
    raise ConversationError(
        f"record has no {messages_key!r} key (nor 'prompt' and 'completion'; keys: "
        f"{sorted(map(str, record))})"
    )
