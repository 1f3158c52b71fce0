"""A DataModule's records per split and their token store: a part with its own state.

:class:`RecordCorpus` (ChatDataModule's and PreferenceDataModule's) holds what decides a
split's records (the records, the renderer, ``on_error``, the store's directory, the render
workers and the remote options) and gives, per split, the mapped store
(:meth:`RecordCorpus.store`), rendered once
(:func:`datamodules.conversations.store_build.build_store`) and keyed by the inputs and their
versions, the kind of records (``kind``: ``"chat"``, ``"preference"``), the renderer's
fingerprint (for chat: tokenizer, template, ``train_on``, ``messages_key``) and ``on_error``.
It knows nothing of batches: the DataModule builds the views.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from typing import Any

from datamodules.conversations.records import (
    RecordChunk,
    check_chat_files,
    dataset_chunks,
    file_chunks,
    inputs_identity,
    memory_chunks,
)
from datamodules.conversations.store_build import (
    build_store,
    count_store_skips,
    render_workers,
)
from datamodules.core.checks import check_int
from datamodules.core.skipped import Skipped
from datamodules.remote.retrying import RemoteOptions
from datamodules.tokens.inputs import SPLIT_FILES, find_files
from datamodules.tokens.store import StoredDocuments, store_key

__all__ = ["RecordCorpus", "is_dataset"]


def is_dataset(value: Any) -> bool:
    """Whether ``value`` is a Hugging Face ``datasets.Dataset`` (without importing datasets)."""
    return any(
        k.__name__ == "Dataset" and k.__module__.startswith("datasets") for k in type(value).__mro__
    )


class RecordCorpus:
    """The records of each split, through the token store (see the module docstring).

    Args:
        conversations: A list of records (or bare message lists), a ``datasets.Dataset``, or
            None (files instead).
        files: Per split (``"train"``, ``"val"``, ``"test"``), its checked file items or None.
        renderer: The :class:`~datamodules.conversations.ChatRenderer`.
        on_error: ``"raise"`` or ``"skip"`` records that cannot be rendered.
        directory: Where stores live, or None: a temporary one per corpus (``token_cache=False``).
        tokenize_workers: Render processes: ``"auto"`` or an int (0: this process).
        remote: The remote options for files.
        ranks: Returns ``(local rank, global rank)`` when a store is opened.
        kind: What the records are, part of the store's key (``"chat"``, ``"preference"``).
    """

    def __init__(
        self,
        conversations: Any,
        files: dict[str, list[str] | None],
        renderer: Any,
        on_error: str,
        directory: str | None,
        tokenize_workers: int | str,
        remote: RemoteOptions,
        ranks: Any,
        kind: str = "chat",
    ) -> None:
        check_int(tokenize_workers, "tokenize_workers", 0, words=("auto",))
        self.conversations, self.files, self.renderer = conversations, files, renderer
        self.on_error, self.tokenize_workers = on_error, tokenize_workers
        self.remote, self.ranks, self.kind = remote, ranks, kind
        if directory is None:
            directory = tempfile.mkdtemp(prefix=f"{kind}-tokens-")
            weakref.finalize(self, shutil.rmtree, directory, True)
        self.directory = directory
        #: Records left out under ``on_error="skip"``, from every store opened.
        self.skipped = Skipped()
        self._counted: set[str] = set()

    def has_split(self, split: str) -> bool:
        """Whether ``split`` has inputs of its own (train: always)."""
        return split == "train" or self.files.get(split) is not None

    def store(
        self, split: str, files: list[str] | None = None, source: str | None = None
    ) -> StoredDocuments:
        """The split's mapped store (train: ``conversations`` or ``train_file``), or that of
        ``files`` (the split's source named ``source`` of a blend), rendered into first when
        missing."""
        if files is None and split == "train" and self.conversations is not None:
            if is_dataset(self.conversations):
                names = ["<datasets.Dataset>"]
                kind, chunks = (
                    "dataset",
                    lambda: ((0, c) for c in dataset_chunks(self.conversations)),
                )
            else:
                names = ["<conversations>"]
                kind, chunks = "list", lambda: ((0, c) for c in memory_chunks(self.conversations))
            identity = inputs_identity(kind, self.conversations)
        else:
            argument = SPLIT_FILES[split] + ("" if source is None else f" ({source})")
            items = self.files[split] if files is None else files
            names = find_files(items, argument, self.remote)
            check_chat_files(names, argument)
            identity = inputs_identity("files", names, self.remote)

            def chunks() -> Iterator[tuple[int, RecordChunk]]:
                for i, path in enumerate(names):
                    for chunk in file_chunks(path, self.remote):
                        yield i, chunk

        material = {
            "kind": self.kind,
            "renderer": self.renderer.fingerprint(),
            "inputs": identity,
            "on_error": self.on_error,
        }
        path = os.path.join(self.directory, store_key(material))
        store = build_store(
            path,
            self.renderer,
            names,
            chunks,
            material=material,
            on_error=self.on_error,
            workers=render_workers(self.tokenize_workers),
            ranks=self.ranks(),
        )
        count_store_skips(self.skipped, store, self._counted)
        return store
