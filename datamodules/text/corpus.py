"""Where TextDataModule's documents come from: memory, files or a Dataset through the token store,
or pre-tokenized token files.

:class:`TextCorpus` is a part :class:`~datamodules.TextDataModule` holds (``dm.corpus``), with
its own state: the inputs given, the files per split, the token-file settings and the store's
settings. It checks the input arguments when made and, in ``setup``, gives each split its
documents:

* ``texts`` (a list) and ``load_texts()`` overrides: texts in memory, tokenized in ``setup``
  (:class:`~datamodules.text.readers.TextRecords`), as are files read with the built-in
  vocabularies (``tokenizer="char"`` / ``"word"``, built from the train split) or with
  ``token_cache=False``;
* files (``train_file`` / ``val_file`` / ``test_file``) and a Hugging Face ``datasets.Dataset``
  given as ``texts``, with your tokenizer: the token store (:mod:`datamodules.tokens.store`),
  tokenized once and memory-mapped by every later setup, run and rank;
* ``token_files``: a Megatron-LM dataset or a flat token file, mapped as it is
  (:mod:`datamodules.tokens.token_files`).
"""

from __future__ import annotations

import os
from typing import Any

from datamodules.core.checks import check_int, check_path
from datamodules.core.mixture import Source
from datamodules.core.samplers import current_rank_and_world
from datamodules.remote.listing import cache_root, file_version
from datamodules.text.arguments import check_eos_id
from datamodules.text.readers import labels_of, read_text_files, records_from_memory
from datamodules.tokens.blends import check_blend
from datamodules.tokens.inputs import (
    CHUNK_TEXTS,
    DEFAULT_LABEL_KEY,
    SPLIT_FILES,
    arrow_chunk,
    check_file_argument,
    find_files,
    read_documents,
    table_labels,
)
from datamodules.tokens.store import StoredDocuments, StoreWriter, store_key, token_dtype
from datamodules.tokens.store_build import (
    Progress,
    resolve_workers,
    write_documents,
    write_store,
)
from datamodules.tokens.token_files import FLAT_DTYPES, read_token_files
from datamodules.tokens.vocab import tokenizer_fingerprint, tokenizer_vocab_size

__all__ = ["TextCorpus", "default_token_cache", "is_dataset"]


def is_dataset(value: Any) -> bool:
    """Whether ``value`` is a Hugging Face ``datasets.Dataset`` (without importing datasets)."""
    return any(
        k.__name__ == "Dataset" and k.__module__.startswith("datasets") for k in type(value).__mro__
    )


def default_token_cache() -> str:
    """``$DATAMODULES_CACHE/tokens``, else ``~/.cache/datamodules/tokens``."""
    return cache_root("tokens")


class TextCorpus:
    """The inputs of a :class:`~datamodules.TextDataModule` (see the module docstring).

    Args:
        texts: ``texts=`` (a list, or a ``datasets.Dataset``), or None.
        labels: ``labels=``, or None.
        files: Per split, the ``*_file`` argument as given.
        token_files: ``token_files=``.
        token_cache: ``token_cache=``.
        tokenize_workers: ``tokenize_workers=``.
        dtype: ``dtype=`` of a flat token file.
        eos_id: ``eos_id=``.
        vocab_size: ``vocab_size=``.
        remote: The checked remote options.
        tokenizer: The tokenizer (a built-in level, yours, or None for token files).
        text_key: ``text_key=``.
        label_key: ``label_key=``.
        max_length: ``max_length=``.
        truncation_side: ``truncation_side=``.
        lowercase: ``lowercase=``.
        overridden: Whether ``load_texts`` is overridden (then no input is needed).
        trainer: Returns the DataModule's Trainer (or None): which process builds a store.
    """

    def __init__(
        self,
        *,
        texts: Any,
        labels: Any,
        files: dict[str, Any],
        token_files: Any,
        token_cache: Any,
        tokenize_workers: Any,
        dtype: Any,
        eos_id: Any,
        vocab_size: Any,
        remote: Any,
        tokenizer: Any,
        text_key: str,
        label_key: str | None,
        max_length: int | None,
        truncation_side: str,
        lowercase: bool,
        overridden: bool,
        trainer: Any,
    ) -> None:
        self.tokenizer, self.text_key, self.label_key = tokenizer, text_key, label_key
        self.max_length, self.truncation_side = max_length, truncation_side
        self.lowercase, self.trainer = lowercase, trainer
        given = [
            name
            for name, v in (
                ("texts", texts),
                ("train_file", files["train"]),
                ("token_files", token_files),
            )
            if v is not None
        ]
        if len(given) > 1:
            raise ValueError(
                f"give {' or '.join(given)}, not both: one of texts, train_file or token_files."
            )
        if labels is not None and texts is None:
            raise ValueError("labels= needs texts=; files carry their labels under label_key.")
        self.dataset_input = texts if is_dataset(texts) else None
        if self.dataset_input is not None:
            if labels is not None:
                raise ValueError(
                    "labels= does not go with a datasets.Dataset: its label_key column holds them."
                )
            if isinstance(self.tokenizer, str):
                raise ValueError(
                    "texts= a datasets.Dataset needs tokenizer= (an object with encode_batch or "
                    "encode, or a callable): it is tokenized into the token store, and the "
                    f"built-in {self.tokenizer!r} vocabulary is built in memory."
                )
            if token_cache is False:
                raise ValueError(
                    "texts= a datasets.Dataset is read through the token store: drop "
                    "token_cache=False (or give the texts as a list)."
                )
            self.given = None
        else:
            self.given = records_from_memory(texts, labels) if texts is not None else None
        self.remote = remote
        self.files = {
            s: None
            if v is None
            else check_blend(v, SPLIT_FILES[s]) or check_file_argument(v, SPLIT_FILES[s])
            for s, v in files.items()
        }
        if not isinstance(token_cache, (str, os.PathLike, type(None))) and token_cache is not False:
            raise TypeError(
                f"token_cache={token_cache!r} is not accepted: use a directory, None (the default "
                f"{default_token_cache()}) or False (tokenize in memory at every setup)."
            )
        check_int(tokenize_workers, "tokenize_workers", 0, words=("auto",))
        self.token_cache, self.tokenize_workers = token_cache, tokenize_workers
        self._check_token_file_arguments(token_files, dtype, eos_id, vocab_size)
        if (
            self.given is None
            and self.dataset_input is None
            and self.files["train"] is None
            and token_files is None
            and not overridden
        ):
            raise ValueError(
                "TextDataModule needs data: pass texts (TextDataModule(texts, labels)), "
                "train_file= (.jsonl/.csv/.tsv/.txt/.parquet/.arrow), token_files=, or override "
                "load_texts()."
            )

    def _check_token_file_arguments(
        self, token_files: Any, dtype: Any, eos_id: Any, vocab_size: Any
    ) -> None:
        blend = None if token_files is None else check_blend(token_files, "token_files")
        self.token_files = blend or check_path(
            token_files,
            "token_files",
            "the path of one Megatron dataset prefix (.bin + .idx) or one flat token file "
            "(.bin / .npy), or a list of Sources of them",
            allow_none=True,
        )
        if dtype is not None and str(dtype) not in FLAT_DTYPES:
            raise ValueError(f"dtype={dtype!r} is not accepted: use None or one of {FLAT_DTYPES}.")
        check_int(eos_id, "eos_id", 0, allow_none=True)
        check_int(vocab_size, "vocab_size", 1, allow_none=True)
        if token_files is None and dtype is not None:
            raise ValueError("dtype= describes token_files=: give token_files or drop it.")
        if token_files is None and eos_id is not None:
            check_eos_id(eos_id, self.tokenizer)
        if token_files is not None and self.max_length is not None:
            raise ValueError(
                "max_length does not apply to token_files= (tokenized already): truncate when "
                "writing them, or use pack_mode='split'."
            )
        self.dtype, self.eos_id, self.declared_vocab_size = dtype, eos_id, vocab_size

    # ------------------------------------------------------------------ blends
    def blend_sources(self) -> dict[str, list[Source] | None]:
        """Per split, its Sources when given as a blend, else None."""
        return {s: self._blend_sources(s) for s in ("train", "val", "test")}

    def check_blends(self, sources: dict[str, Any], batch_by: str, max_tokens: Any) -> None:
        """Refuses blends the text arguments cannot read or batch."""
        blends = [s for s, given in sources.items() if given is not None]
        files = [s for s in blends if s != "train" or self.token_files is None]
        if files and not self.uses_store():
            raise ValueError(
                f"{', '.join(SPLIT_FILES[s] for s in files)}: a blend of files goes through the "
                "token store: give tokenizer= (yours) and leave token_cache on."
            )
        if (batch_by == "tokens" or max_tokens) and blends:
            raise ValueError("batch_by='tokens' does not apply to a blend: use batch_size.")

    def _blend_sources(self, split: str) -> list[Source] | None:
        """The Sources of a split given as a blend (the train one: ``token_files`` or
        ``train_file``), else None."""
        if split == "train" and isinstance(self.token_files, list):
            return self.token_files
        given = self.files.get(split)
        return given if given and isinstance(given[0], Source) else None

    def given_split(self, split: str) -> bool:
        """Whether ``split`` has files of its own (``val_file`` / ``test_file``)."""
        return self.files.get(split) is not None

    def blend_files(self, split: str, source: Source) -> Any:
        """What :meth:`read_blend_part` reads for a source, as plain data (kept in the
        checkpoint's mix, so that a source removed since can still be read)."""
        if split == "train" and isinstance(self.token_files, list):
            return source.files
        return list(source.paths)

    def read_blend_part(self, split: str, files: Any, name: str) -> Any:
        """One source of a split's blend: a token file (``token_files``) or a store."""
        if split == "train" and isinstance(self.token_files, list):
            return read_token_files(files, self.dtype, self.eos_id, self.declared_vocab_size)
        return self._file_store(find_files(files, f"{SPLIT_FILES[split]} ({name})", self.remote))

    # ------------------------------------------------------------------ per split
    def uses_store(self) -> bool:
        """Whether files (and a Dataset) go through the token store: a tokenizer of yours
        and ``token_cache`` not False."""
        return not isinstance(self.tokenizer, str) and self.token_cache is not False

    def corpus_of(self, split: str) -> Any:
        """The mapped corpus of ``split`` (a store or token file), or None when it is read
        into memory (or the split has no input of its own; a blend is the blends part's)."""
        if split == "train":
            if self.token_files is not None:
                return read_token_files(
                    self.token_files, self.dtype, self.eos_id, self.declared_vocab_size
                )
            if self.dataset_input is not None:
                return self._dataset_store(self.dataset_input)
        files = self.files[split]
        if files is None or not self.uses_store():
            return None
        return self._file_store(find_files(files, SPLIT_FILES[split], self.remote))

    def read_into_memory(self, split: str) -> Any:
        """The records of ``split``'s files, read whole into memory."""
        files = find_files(self.files[split], SPLIT_FILES[split], self.remote)
        return read_text_files(files, self.text_key, self.label_key, self.remote)

    # ------------------------------------------------------------------ the store
    def store_directory(self) -> str:
        """Where this module's token stores live."""
        return os.fspath(self.token_cache) if self.token_cache else default_token_cache()

    def _material(self) -> dict[str, Any]:
        return {
            "tokenizer": tokenizer_fingerprint(self.tokenizer),
            "text_key": self.text_key,
            "label_key": self.label_key,
            "max_length": self.max_length,
            "truncation_side": self.truncation_side,
            "lowercase": self.lowercase,
            # only when given, so that the stores built without it keep their keys
            **({"eos_id": self.eos_id} if self.eos_id is not None else {}),
        }

    def _ranks(self) -> tuple[int, int]:
        trainer = self.trainer()
        if trainer is not None:
            return trainer.local_rank, trainer.global_rank
        rank, _ = current_rank_and_world()
        return int(os.environ.get("LOCAL_RANK", rank)), rank

    def _store(
        self, material: dict[str, Any], names: list[str], chunks: Any, what: str
    ) -> StoredDocuments:
        path = os.path.join(self.store_directory(), store_key(material))

        def fill(writer: StoreWriter, progress: Progress) -> dict[str, Any]:
            workers = resolve_workers(self.tokenize_workers, self.tokenizer)
            per_file = write_documents(
                writer,
                chunks(),
                self.tokenizer,
                names,
                workers,
                self.max_length,
                self.truncation_side,
                progress,
                self.eos_id,
            )
            meta = {"inputs": material, "files": names, "workers": workers}
            meta.update(self._store_labels(writer, names, per_file))
            return meta

        declared = tokenizer_vocab_size(self.tokenizer) or self.declared_vocab_size
        return write_store(path, token_dtype(declared), names, what, fill, self._ranks())

    def _store_labels(
        self, writer: StoreWriter, names: list[str], per_file: dict[int, list[Any]]
    ) -> dict[str, Any]:
        raw: list[Any] = []
        for file, name in enumerate(names):
            labels = per_file.get(file, [])
            if not labels and not name.startswith("<"):
                raise ValueError(f"{name}: no records (the file is empty or blank).")
            raw.extend(table_labels(name, labels))
        labels = labels_of(raw, writer.where, self.label_key or DEFAULT_LABEL_KEY)
        if labels is None:
            return {"label_names": None, "labelled": False}
        import numpy as np

        if isinstance(labels[0], str):
            label_names = sorted(set(labels))
            ids = {n: i for i, n in enumerate(label_names)}
            writer.add_labels(
                np.fromiter((ids[v] for v in labels), dtype=np.int64, count=len(labels))
            )
            return {"label_names": label_names, "labelled": True}
        writer.add_labels(np.asarray(labels, dtype=np.int64))
        return {"label_names": None, "labelled": True}

    def _file_store(self, files: list[str]) -> StoredDocuments:
        versions = [file_version(f, self.remote) or {"path": f, "version": None} for f in files]
        material = {**self._material(), "inputs": versions}
        text_key, label_key, remote = self.text_key, self.label_key, self.remote

        def chunks() -> Any:
            for i, path in enumerate(files):
                for chunk in read_documents(path, text_key, label_key, remote):
                    yield i, chunk

        what = files[0] if len(files) == 1 else f"{len(files)} files"
        return self._store(material, files, chunks, what)

    def _dataset_store(self, dataset: Any) -> StoredDocuments:
        columns = dataset.column_names
        if self.text_key not in columns:
            raise ValueError(
                f"texts: the Dataset has no column {self.text_key!r} (columns: {columns}); set "
                "text_key to the column that holds the text."
            )
        identity = {
            "fingerprint": getattr(dataset, "_fingerprint", None),
            "rows": len(dataset),
            "columns": columns,
        }
        material = {**self._material(), "inputs": [{"dataset": identity}]}
        label_key = self.label_key or DEFAULT_LABEL_KEY
        if self.label_key is not None and label_key not in columns:
            raise ValueError(
                f"texts: the Dataset has no column {label_key!r} (columns: {columns}); set "
                "label_key to the column that holds the label (or leave it unset)."
            )
        keys = [self.text_key] + (
            [label_key] if label_key in columns and label_key != self.text_key else []
        )

        def chunks() -> Any:
            row = 0
            arrow = dataset.select_columns(keys).with_format("arrow")
            labels = label_key if len(keys) == 2 else None
            for batch in arrow.iter(batch_size=CHUNK_TEXTS):
                chunk = arrow_chunk(batch, self.text_key, labels, row, "texts (a datasets.Dataset)")
                yield 0, chunk
                row += len(chunk.texts)

        return self._store(
            material, ["<datasets.Dataset>"], chunks, f"a Dataset of {len(dataset):,} rows"
        )
