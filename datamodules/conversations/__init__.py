"""Conversations rendered with a chat template into token ids and a loss mask.

A shared layer below the data kinds that read conversations (chat, and image-text's
conversations about images). It sits on ``core`` and the tokens layer's store; transformers
is imported when a renderer is built.

* :mod:`~datamodules.conversations.messages`: the record formats (OpenAI / Hugging Face
  messages, ShareGPT, TRL's prompt/completion), normalised and checked;
  :class:`ConversationError`, what a bad record raises.
* :mod:`~datamodules.conversations.render`: :class:`ChatRenderer`, a record into
  ``(input_ids, trained)``, with the rules of the loss mask.
* :mod:`~datamodules.conversations.store_build`: rendering records into the token store, in
  parallel, with the mask (it sits on the tokens layer's store).
* :mod:`~datamodules.conversations.records`: records from files, a list or a
  ``datasets.Dataset``, named by file and line; :mod:`~datamodules.conversations.corpus`:
  :class:`~datamodules.conversations.corpus.RecordCorpus`, a DataModule's inputs per split and
  their store (chat's and preference's).
"""

from __future__ import annotations

from datamodules.conversations.messages import (
    Conversation,
    ConversationError,
    normalize_messages,
    parse_record,
)
from datamodules.conversations.render import ChatRenderer

__all__ = [
    "ChatRenderer",
    "Conversation",
    "ConversationError",
    "normalize_messages",
    "parse_record",
]
