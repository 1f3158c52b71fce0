"""Preference records as TRL names them, read and checked: pairs and unpaired feedback.

:func:`parse_preference` turns one record into a :class:`PreferenceRecord`:

* explicit prompt: ``{"prompt", "chosen", "rejected"}``, all strings or all message lists
  (``[{"role", "content"}, ...]``, ShareGPT's ``from`` / ``value`` too);
* implicit prompt: ``{"chosen", "rejected"}`` only (a ``prompt`` string beside message lists
  is ignored, as TRL's ``maybe_extract_prompt`` ignores it): the prompt is what both share at
  their start, found exactly as TRL's ``extract_prompt`` finds it (leading messages, or
  leading characters less a trailing space);
* unpaired feedback (KTO): ``{"prompt", "completion", "label"}``, ``label`` a bool.

A record that cannot be used raises :class:`~datamodules.conversations.ConversationError`
saying why (the DataModule adds the file and line): no ``chosen`` or ``rejected``, an empty
completion, chosen and rejected conversations whose prompts differ (they part before their
last turn, so the completion would hold another user message), a ``label`` that is not a
bool, a prompt and completions of different kinds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from datamodules.conversations.messages import ConversationError, normalize_messages

__all__ = ["PreferenceRecord", "extract_prompt", "parse_preference"]


@dataclass
class PreferenceRecord:
    """One record, normalised: strings, or lists of ``{"role", "content"}`` messages.

    Attributes:
        prompt: The prompt (explicit or extracted).
        chosen: The chosen completion (a pair), else None.
        rejected: The rejected completion (a pair), else None.
        completion: The completion (unpaired feedback), else None.
        label: Whether the completion is desirable (unpaired feedback), else None.
        conversational: Whether the parts are message lists (rendered with the template).
    """

    prompt: Any
    chosen: Any = None
    rejected: Any = None
    completion: Any = None
    label: bool | None = None
    conversational: bool = False

    @property
    def paired(self) -> bool:
        """Whether this is a pair (else unpaired feedback)."""
        return self.completion is None


def _is_messages(value: Any) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, (str, bytes))
        and len(value) > 0
        and isinstance(value[0], Mapping)
    )


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return "a string"
    if _is_messages(value):
        return "a message list"
    if isinstance(value, Sequence) and not isinstance(value, bytes) and not value:
        return "an empty list"
    return f"a {type(value).__name__}"


def extract_prompt(chosen: Any, rejected: Any) -> tuple[Any, Any, Any]:
    """``(prompt, chosen, rejected)``: the start both share, and each one's rest, exactly as
    TRL's ``extract_prompt`` splits them (for strings, a space just before the first
    difference stays with the completions)."""
    idx = 0
    for idx in range(min(len(chosen), len(rejected))):
        if chosen[idx] != rejected[idx]:
            if chosen[idx - 1] == " ":
                idx -= 1
            break
    return chosen[:idx], chosen[idx:], rejected[idx:]


def _empty_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and not value


def _messages(value: Any, key: str) -> list[dict[str, Any]]:
    return [] if _empty_list(value) else normalize_messages(value, key)


def parse_preference(record: Mapping[str, Any]) -> PreferenceRecord:
    """One record as a :class:`PreferenceRecord` (see the module docstring).

    Raises:
        ConversationError: A record that is neither a pair nor unpaired feedback, or whose
            parts cannot be used, saying why.
    """
    if "chosen" in record or "rejected" in record:
        return _pair(record)
    if "completion" in record:
        if "label" not in record:
            raise ConversationError(
                "an unpaired record (prompt, completion) needs 'label' (a bool: desirable or "
                "not); a pair needs 'chosen' and 'rejected'"
            )
        label = record["label"]
        if type(label).__name__ not in ("bool", "bool_"):
            raise ConversationError(
                f"'label' is {label!r} ({type(label).__name__}), not a bool (True: desirable)"
            )
        prompt, completion = record.get("prompt"), record["completion"]
        if prompt is None:
            raise ConversationError("an unpaired record needs 'prompt' beside 'completion'")
        conversational = _is_messages(completion)
        if _is_messages(prompt) != conversational or not isinstance(completion, (str, Sequence)):
            raise ConversationError(
                f"'prompt' is {_kind(prompt)} and 'completion' {_kind(completion)}: give both "
                "as strings or both as message lists"
            )
        if not completion:
            raise ConversationError("'completion' is empty")
        if conversational:
            prompt, completion = _messages(prompt, "prompt"), _messages(completion, "completion")
        return PreferenceRecord(
            prompt, completion=completion, label=bool(label), conversational=conversational
        )
    raise ConversationError(
        f"record has no 'chosen' and 'rejected' (a preference pair) nor 'prompt', 'completion' "
        f"and 'label' (unpaired feedback) (keys: {sorted(map(str, record))[:8]})"
    )


def _pair(record: Mapping[str, Any]) -> PreferenceRecord:
    for key in ("chosen", "rejected"):
        if key not in record or record[key] is None:
            raise ConversationError(
                f"record has no {key!r}: a preference pair needs 'chosen' and 'rejected' "
                f"(keys: {sorted(map(str, record))[:8]})"
            )
    chosen, rejected = record["chosen"], record["rejected"]
    conversational = _is_messages(chosen) or _is_messages(rejected)
    if conversational:
        ok = all(_is_messages(v) or _empty_list(v) for v in (chosen, rejected))
    else:
        ok = isinstance(chosen, str) and isinstance(rejected, str)
    if not ok:
        raise ConversationError(
            f"'chosen' is {_kind(chosen)} and 'rejected' {_kind(rejected)}: give both as "
            "strings or both as message lists"
        )
    prompt = record.get("prompt")
    explicit = prompt is not None and (_is_messages(prompt) == conversational)
    if explicit and conversational:
        prompt = _messages(prompt, "prompt")
        chosen, rejected = _messages(chosen, "chosen"), _messages(rejected, "rejected")
    elif explicit and not isinstance(prompt, str):
        raise ConversationError(f"'prompt' is {_kind(prompt)}: give a string or a message list")
    elif not explicit:
        if conversational:
            chosen, rejected = _messages(chosen, "chosen"), _messages(rejected, "rejected")
        prompt, chosen, rejected = extract_prompt(chosen, rejected)
        if conversational:
            _check_turns(prompt, chosen, rejected)
    for key, value in (("chosen", chosen), ("rejected", rejected)):
        if not value:
            raise ConversationError(
                f"the {key!r} completion is empty"
                + ("" if explicit else " (chosen and rejected are the same after their prompt)")
            )
    return PreferenceRecord(prompt, chosen, rejected, conversational=conversational)


def _check_turns(prompt: list[Any], chosen: list[Any], rejected: list[Any]) -> None:
    """Implicit conversations must part at their last turn: a completion holding a user
    message means the two conversations' prompts differ."""
    if not prompt:
        raise ConversationError(
            "'chosen' and 'rejected' differ from their first message: they share no prompt"
        )
    for key, rest in (("chosen", chosen), ("rejected", rejected)):
        for k, message in enumerate(rest):
            if message.get("role") not in ("assistant", "tool"):
                raise ConversationError(
                    f"'chosen' and 'rejected' differ at message {len(prompt) + 1}, before their "
                    f"last turn ({key!r} message {len(prompt) + k + 1} is a "
                    f"{message.get('role')!r} message): their prompts differ"
                )
