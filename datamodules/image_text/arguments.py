"""Argument checks of ImageTextDataModule: each raises early, naming the argument, the value and
what is accepted."""

from __future__ import annotations

import os
from typing import Any

from datamodules.core.checks import (
    check_bool,
    check_choice,
    check_int,
    check_on_error,
    check_string,
)
from datamodules.core.overlong import OVERLONG

__all__ = [
    "CONVERSATION_DEFAULTS",
    "OVERLONG",
    "check_caption_arguments",
    "check_conversation_arguments",
]


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
    "token_cache": None,
    "tokenize_workers": "auto",
}


def check_conversation_arguments(messages_key: Any, given: dict[str, Any]) -> None:
    """Checks the arguments of conversations about images (``messages_key=``), and refuses
    them for caption pairs (``messages_key=None``).

    Raises:
        TypeError, ValueError: A bad value, naming the argument and what is accepted; a
            conversation argument without ``messages_key``; a caption argument with it; a
            packing argument without ``packing=True`` (or ``packing=True`` without
            ``seq_length``).
    """
    if messages_key is None:
        changed = [k for k, default in CONVERSATION_DEFAULTS.items() if given[k] != default]
        if changed:
            shown = ", ".join(f"{k}={given[k]!r}" for k in changed)
            raise ValueError(
                f"{shown}: these apply to conversations about images: give messages_key= (the "
                "member or column holding each record's messages); caption pairs take "
                "text_key=, tokenizer= and max_length=."
            )
        return
    cache = given["token_cache"]
    if not isinstance(cache, (str, os.PathLike, type(None))) and cache is not False:
        raise TypeError(
            f"token_cache={cache!r} is not accepted: use a directory, None (the default "
            "cache) or False (render at every setup)."
        )
    accepted = "a member or column name such as 'json', or a dotted key such as 'json.messages'"
    key = check_string(messages_key, "messages_key", accepted)
    if not all(key.split(".")):
        raise ValueError(f"messages_key={messages_key!r} is not accepted: use {accepted}.")
    if given["tokenizer"] is None:
        raise ValueError(
            f"messages_key={messages_key!r} needs tokenizer=: a transformers tokenizer with a "
            "chat template (or a tokenizers.Tokenizer with chat_template=) in which "
            f"image_token={given['image_token']!r} is one token."
        )
    for name, default in (("text_key", "txt"), ("max_length", 77)):
        if given[name] != default:
            raise ValueError(
                f"{name}={given[name]!r} applies to caption pairs, not to conversations "
                f"(messages_key={messages_key!r}): padded conversations are padded to the "
                "batch's longest; packing=True, seq_length= bounds them. Leave "
                f"{name} at its default."
            )
    token = check_string(given["image_token"], "image_token", "a non-empty placeholder string")
    if not token:
        raise ValueError("image_token='' is not accepted: use a placeholder such as '<image>'.")
    check_int(given["image_tokens"], "image_tokens", 1, allow_none=True)
    check_bool(given["packing"], "packing")
    check_int(given["seq_length"], "seq_length", 1, allow_none=True)
    check_int(given["max_images"], "max_images", 1, allow_none=True)
    check_choice(given["overlong"], "overlong", OVERLONG)
    if given["packing"] and given["seq_length"] is None:
        raise ValueError("packing=True needs seq_length= (tokens per packed row).")
    if not given["packing"]:
        for name in ("seq_length", "max_images"):
            if given[name] is not None:
                raise ValueError(
                    f"{name}={given[name]!r} is a budget of packing=True: give packing=True "
                    "too (padded conversations take batch_size records a batch)."
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
