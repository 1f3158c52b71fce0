"""Argument checks of ImageTextDataModule: each raises early, naming the argument, the value and
what is accepted."""

from __future__ import annotations

from typing import Any

from datamodules.core.checks import check_int, check_on_error, check_string

__all__ = ["CONVERSATION_DEFAULTS", "check_caption_arguments", "check_conversation_arguments"]

#: The arguments of conversations about images (``messages_key=``), at their defaults.
CONVERSATION_DEFAULTS = {
    "chat_template": None,
    "train_on": "assistant",
    "image_token": "<image>",
    "image_tokens": None,
    "packing": False,
    "seq_length": None,
    "max_images": None,
    "overlong": "drop",
}


def check_conversation_arguments(messages_key: Any, given: dict[str, Any]) -> None:
    """Refuses conversations (``messages_key=``) and their arguments: only caption pairs are
    supported so far.

    Raises:
        ValueError: ``messages_key`` is not None, or a conversation argument is not at its
            default.
    """
    if messages_key is not None:
        raise ValueError(
            f"messages_key={messages_key!r} is not accepted: conversations about images are "
            "not supported yet; ImageTextDataModule reads caption pairs (text_key=, "
            "messages_key=None)."
        )
    changed = [k for k, default in CONVERSATION_DEFAULTS.items() if given[k] != default]
    if changed:
        shown = ", ".join(f"{k}={given[k]!r}" for k in changed)
        raise ValueError(
            f"{shown}: these apply to conversations (messages_key=), which are not supported "
            "yet; caption pairs take text_key=, tokenizer= and max_length=."
        )


def check_caption_arguments(
    text_key: Any, max_length: Any, shuffle_buffer: Any, on_error: Any
) -> None:
    """Checks the caption arguments and the stream's own.

    Raises:
        TypeError, ValueError: A bad value, naming the argument and what is accepted.
    """
    accepted = "a member or column name such as 'txt', or a dotted key such as 'json.caption'"
    key = check_string(text_key, "text_key", accepted)
    if not all(key.split(".")):
        raise ValueError(f"text_key={text_key!r} is not accepted: use {accepted}.")
    check_int(max_length, "max_length", 1)
    check_int(shuffle_buffer, "shuffle_buffer", 0, allow_none=True)
    check_on_error(on_error)
