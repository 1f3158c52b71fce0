"""A DataModule's records per split and their token store: a part with its own state.

:class:`RecordCorpus` (ChatDataModule's and PreferenceDataModule's) holds what decides a
split's records (the records, the renderer, ``on_error``, the store's directory, the render
workers and the remote options) and gives, per split, the mapped store
(:meth:`RecordCorpus.store`), rendered once
(:func:`datamodules.conversations.store_build.build_store`) and keyed by the inputs and their
versions, the kind of records (``kind``: ``"chat"``, ``"preference"``), the renderer's
fingerprint (for chat: tokenizer, template, ``train_on``, ``messages_key``) and ``on_error``.
It knows nothing of batches: the DataModule builds the views.

:func:`split_inputs` checks a record DataModule's ``train_file`` / ``val_file`` /
``test_file`` (files, or a blend of Sources), and :func:`record_corpus` checks ``token_cache``
and the remote options and builds the corpus, as both kinds do.
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
from datamodules.core.mixture import Source
from datamodules.core.skipped import Skipped
from datamodules.remote.credentials import restored_storage_options, save_without_credentials
from datamodules.remote.listing import cache_root
from datamodules.remote.retrying import RemoteOptions, check_remote_options
from datamodules.tokens.blends import check_blend
from datamodules.tokens.inputs import SPLIT_FILES, check_file_argument, find_files
from datamodules.tokens.store import StoredDocuments, store_key

__all__ = ["RecordCorpus", "is_dataset", "record_corpus", "source_paths", "split_inputs"]


def is_dataset(value: Any) -> bool:
    """Whether ``value`` is a Hugging Face ``datasets.Dataset`` (without importing datasets)."""
    return any(
        k.__name__ == "Dataset" and k.__module__.startswith("datasets") for k in type(value).__mro__
    )


def split_inputs(
    train_file: Any, val_file: Any, test_file: Any
) -> tuple[dict[str, list[str] | None], dict[str, list[Source] | None]]:
    """Per split, its checked files (or None) and its blend's Sources (or None).

    Raises:
        TypeError, ValueError: What :func:`~datamodules.tokens.blends.check_blend` and
            :func:`~datamodules.tokens.inputs.check_file_argument` refuse, naming the argument.
    """
    files: dict[str, list[str] | None] = {}
    sources: dict[str, list[Source] | None] = {}
    for split, value in (("train", train_file), ("val", val_file), ("test", test_file)):
        name = SPLIT_FILES[split]
        sources[split] = None if value is None else check_blend(value, name)
        given = value is not None and sources[split] is None
        files[split] = check_file_argument(value, name) if given else None
    return files, sources


def source_paths(split: str, source: Source) -> list[str]:
    """What a blend reads for a source, as plain data (kept in the checkpoint's mix)."""
    return list(source.paths)


def record_corpus(
    dm: Any,
    records: Any,
    files: dict[str, list[str] | None],
    token_cache: Any,
    tokenize_workers: int | str,
    remote: tuple[Any, int, float],
    verb: str,
    kind: str = "chat",
) -> RecordCorpus:
    """The corpus of a record DataModule (``dm``: its ``renderer``, ``on_error`` and ranks),
    after checking ``token_cache`` and the remote options (``remote``: ``storage_options``,
    ``retries``, ``timeout``; ``dm``'s saved ``storage_options`` lose their credentials).

    Raises:
        TypeError: ``token_cache`` is not a directory, None or False (``verb``: what False
            does at every setup, for the message).
    """
    if not isinstance(token_cache, (str, os.PathLike, type(None))) and token_cache is not False:
        raise TypeError(
            f"token_cache={token_cache!r} is not accepted: use a directory, None (the default "
            f"{cache_root('tokens')}) or False ({verb} at every setup)."
        )
    storage_options, retries, timeout = remote
    storage_options = restored_storage_options(storage_options)
    options = check_remote_options(storage_options, retries, timeout)
    save_without_credentials(dm, storage_options)
    directory = None if token_cache is False else os.fspath(token_cache or cache_root("tokens"))
    return RecordCorpus(
        records, files, dm.renderer, dm.on_error, directory, tokenize_workers, options,
        dm._ranks, kind=kind,
    )  # fmt: skip


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
