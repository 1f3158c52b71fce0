"""TextDataModule: variable-length text, tokenized once, batched by length buckets or token budget.

``setup`` reads the texts, splits them, builds the vocabulary from the train split (or uses
your tokenizer), and tokenizes every text once into one flat token buffer plus offsets. Files
and Datasets tokenized with your tokenizer go into the on-disk token store instead
(:mod:`datamodules.tokens.store`), once; later setups, runs and ranks memory-map it; token files
(Megatron-LM, nanoGPT) are mapped as they are (:mod:`datamodules.text.corpus`). A
batch is then gathered straight from that buffer by one vectorised indexing call (no
per-sample Python objects, no per-sample collate); it equals what
:class:`collates.PadCollate` makes of the same samples::

    {"input_ids": LongTensor (B, L), "labels": LongTensor (B,),      # labels when labelled
     "attention_mask": LongTensor (B, L), "lengths": LongTensor (B,)}

The train loader's batches come from :class:`~datamodules.core.buckets.BucketBatchSampler`:
similar lengths together (little padding), a new composition every epoch, the same number of
batches on every DDP rank, exact mid-epoch resume. With ``packing=True`` (language modelling,
texts without labels) batches are instead rows of ``seq_length`` tokens with document
boundaries (:mod:`datamodules.tokens.packing`). A blend of Sources is the tokens layer's
:class:`~datamodules.tokens.blends.TokenBlends`, held as ``dm.blends`` (as ChatDataModule
holds it): quotas, per-source loaders, the ``mix/<name>`` logs and a changed mix on resume.

The DataModule holds its parts, each with its own state: ``dm.corpus`` (where each split's
documents come from, :mod:`datamodules.text.corpus`), ``dm.encoding`` (texts to ids and the
vocabulary, :mod:`datamodules.text.encoding`), ``dm.label_vocabulary``, ``dm.views`` (views,
samplers and pack planners, :mod:`datamodules.text.views`), ``dm.blends`` and
``dm.inspection`` (summary and inspect, :mod:`datamodules.text.inspection`).

Extension point: override :meth:`TextDataModule.load_texts` to return ``(texts, labels)`` for
your own dataset.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from datamodules.core.base import BaseDataModule
from datamodules.core.checks import check_string
from datamodules.core.hardware import AUTO, GATHERED
from datamodules.core.keywords import shared_arguments
from datamodules.core.mixture import Mixture, Source
from datamodules.core.samplers import IndexBatchSampler
from datamodules.core.views import SplitView
from datamodules.remote.credentials import restored_storage_options, save_without_credentials
from datamodules.remote.retrying import check_remote_options
from datamodules.text.arguments import check_text_arguments
from datamodules.text.corpus import TextCorpus
from datamodules.text.encoding import TextEncoding
from datamodules.text.inspection import TextInspection
from datamodules.text.labels import LabelVocabulary
from datamodules.text.readers import TextRecords, records_from_memory
from datamodules.text.views import TextViews
from datamodules.tokenizing.loading import load_tokenizer
from datamodules.tokens.blends import TokenBlends, blend_parts
from datamodules.tokens.encoding import EncodedTexts
from datamodules.tokens.packing import PackPlanner, check_packable
from datamodules.tokens.vocab import (
    LEVELS,
    PAD_ID,
    Vocabulary,
    tokenizer_pad_id,
)

__all__ = ["TextDataModule", "Tokenizer"]

Tokenizer = str | Callable[[str], Sequence[int]] | Any
Files = Sequence[Source] | str | os.PathLike | Sequence[str | os.PathLike] | None


class TextDataModule(BaseDataModule):
    """Texts (with optional labels) as padded token batches: ``TextDataModule(texts, labels)``.

    Data comes from, in this order: ``texts`` (and ``labels``) in memory, ``train_file``, or an
    override of :meth:`load_texts`. ``val_file`` / ``test_file`` replace the random split for
    that stage. Int labels pass through unchanged; string labels become ids in a sorted label
    vocabulary (:attr:`label_names`, built over every split).

    Tokenization runs once, in ``setup``: the built-in vocabulary (``tokenizer="char"`` or
    ``"word"``) is built from the **train split only** (pad id 0, unknown id 1) and saved in
    ``state_dict``, so a resumed run or a reloaded DataModule maps texts to the same ids (a
    checkpoint's vocabulary replaces the one built in ``setup``, and the texts are re-tokenized
    with it). Your own tokenizer may be any callable ``str -> list[int]``, or an object with
    ``encode`` (a ``transformers`` tokenizer) or ``encode_batch`` (a ``tokenizers.Tokenizer``).

    Batches (see the module docstring) are padded as :class:`collates.PadCollate` pads them
    with the same ``padding_side`` / ``pad_to_multiple_of``. Train batches group similar
    lengths (``bucket=True``): ``batch_by="samples"`` gives ``batch_size`` samples per batch;
    ``batch_by="tokens"`` fills each batch up to ``size x longest <= max_tokens`` (then
    ``batch_size`` is not used); with ``shuffle=False`` bucketing sorts the train split by
    length (``bucket=False`` keeps its order). Eval loaders keep the split order unless
    ``eval_bucket=True``, which sorts them by length (less padding; still every sample once,
    and the same batch count on every rank).

    Corpora bigger than memory: give ``train_file`` (or a ``datasets.Dataset``) and your
    tokenizer. The first ``setup`` tokenizes them in parallel into a token store under
    ``token_cache``; every later one, in any run and on any rank, maps it and tokenizes
    nothing (one process per machine builds it, under a file lock). Token bytes and
    per-document arrays stay memory-mapped; packing, buckets, token budgets, ``val_split``,
    DDP-even batches and (elastic) resume work on it unchanged.

    Args:
        texts: The texts, one per sample (a list of strings), or a Hugging Face
            ``datasets.Dataset`` (its ``text_key`` column, read in Arrow batches into the
            token store; labels from its ``label_key`` column, when it has one).
        labels: One int or string label per text, or None.
        train_file: A path or URL, a glob, a directory, or a list of them, instead of
            ``texts``: ``.jsonl`` / ``.ndjson``, ``.csv``, ``.tsv`` or ``.txt`` files (each
            optionally ``.gz`` / ``.zst``), ``.parquet`` / ``.pq`` and ``.arrow`` (a Hugging Face
            ``save_to_disk`` folder stands for its data files), read through the shard
            layer (see :mod:`datamodules.tokens.inputs`); or a blend, a list of
            :class:`~datamodules.Source` (:mod:`datamodules.tokens.blends`).
        val_file: File(s) for validation, replacing the random ``val_split``.
        test_file: File(s) for testing, replacing the random ``test_split``.
        text_key: JSON key, CSV/TSV or Parquet column (or Dataset column) of the text.
        label_key: JSON key or column of the label. None (default): the ``"label"`` key or
            column when the records have one, else unlabelled texts; a key given explicitly
            must be in every record (a typo raises in ``setup``).
        token_files: Instead of texts, a pre-tokenized corpus, mapped as it is: a Megatron-LM
            indexed dataset (a path prefix with ``.bin`` + ``.idx``), or a flat token file
            (``.bin`` / ``.npy``, nanoGPT style) split into documents at ``eos_id``
            (:mod:`datamodules.tokens.token_files`); or a blend: a list of Sources.
        epoch_size: With a weighted train blend: units per epoch (packed rows with
            ``packing=True``, else documents), split by weight (default: all its units).
        eval_per_source: With a blended validation (test) split: one loader per source.
        dtype: The token dtype of a flat ``.bin`` (default ``"uint16"``, nanoGPT's).
        eos_id: The end-of-text id. A flat token file is split into documents after each;
            with texts or files (and a tokenizer of yours), it is appended to each document
            that does not already end with it (as Megatron's ``--append-eod``), counting within
            ``max_length`` (a document cut on the right loses it).
        vocab_size: The vocabulary size when no tokenizer says it (token files).
        token_cache: Where token stores live: a directory, None for
            ``$DATAMODULES_CACHE/tokens`` (or ``~/.cache/datamodules/tokens``), or False to
            tokenize files in memory at every setup.
        tokenize_workers: Processes that tokenize a new store: ``"auto"`` (none for a
            tokenizer with ``encode_batch``, which uses every core itself; else the CPUs) or an
            int (0: this process).
        storage_options: Passed to fsspec for remote files (e.g. an S3 ``endpoint_url``);
            credentials in it are never saved in checkpoints.
        retries: Retries of a transient remote failure, with exponential backoff.
        timeout: Seconds a remote request may go without producing a byte.
        tokenizer: ``"char"`` (default), ``"word"`` (whitespace-separated), your tokenizer, or
            the path of a saved one (a ``save_pretrained`` folder, or a ``tokenizer.json``).
        lowercase: Lower-case texts before the built-in vocabulary sees them.
        min_freq: Built-in vocabulary: keep tokens seen at least this often in the train split.
        pad_id: Padding id; defaults to 0 for the built-in vocabulary, else the tokenizer's
            ``pad_token_id`` (or its ``[PAD]``/``<pad>`` token), else 0.
        max_length: Truncate samples to this many tokens at tokenization (None: keep all).
        truncation_side: ``"right"`` keeps the first ``max_length`` tokens, ``"left"`` the last.
        padding_side: ``"right"`` or ``"left"``.
        pad_to_multiple_of: Round each batch's padded length up to a multiple of this.
        batch_by: ``"samples"`` or ``"tokens"``.
        max_tokens: Token budget per batch for ``batch_by="tokens"``.
        bucket: Group train samples by length (pools of ``pool_batches`` batches).
        eval_bucket: Sort eval splits by length instead of keeping their order.
        pool_batches: Batches per bucketing pool (see ``BucketBatchSampler``).
        packing: Pack the texts into rows of ``seq_length`` tokens for language-model
            training (texts without labels): batches of ``batch_size`` rows with
            ``input_ids``, ``position_ids``, ``document_ids``, ``labels``,
            ``attention_mask``, ``cu_seqlens`` and ``max_seqlen`` (see
            :mod:`datamodules.tokens.packing`); ``bucket``, ``eval_bucket``, ``padding_side``
            and ``pad_to_multiple_of`` do not apply.
        seq_length: Tokens per packed row (with ``packing=True``).
        pack_mode: ``"split"`` (documents continue into the next row: every token once per
            epoch) or ``"whole"`` (documents are never split; one longer than
            ``seq_length`` fails in ``setup`` unless ``max_length <= seq_length`` truncates it).
        train_transforms: Applied to whole train batch dicts.
        eval_transforms: Applied to whole validation, test and predict batch dicts.

    Example:
        >>> dm = TextDataModule(["abc", "a", "bcbc", "cab"], ["x", "y", "x", "y"],
        ...                     val_split=0, batch_size=2, shuffle=False, bucket=False)
        >>> batch = next(iter(dm.train_dataloader()))
        >>> batch["input_ids"].tolist(), batch["labels"].tolist(), dm.label_names
        ([[4, 2, 3], [4, 0, 0]], [0, 1], ['x', 'y'])
    """

    fetch = GATHERED
    hparams_ignore = (*BaseDataModule.hparams_ignore, "texts", "labels", "tokenizer")

    def __init__(
        self,
        texts: Sequence[str] | Any | None = None,
        labels: Sequence[int | str] | None = None,
        *,
        train_file: Files = None,
        val_file: Files = None,
        test_file: Files = None,
        text_key: str = "text",
        label_key: str | None = None,
        token_files: Sequence[Source] | str | os.PathLike | None = None,
        epoch_size: int | None = None,
        eval_per_source: bool = False,
        dtype: str | None = None,
        eos_id: int | None = None,
        vocab_size: int | None = None,
        token_cache: str | os.PathLike | bool | None = None,
        tokenize_workers: int | str = "auto",
        storage_options: dict[str, Any] | None = None,
        retries: int = 5,
        timeout: float = 60.0,
        tokenizer: Tokenizer = "char",
        lowercase: bool = False,
        min_freq: int = 1,
        pad_id: int | None = None,
        max_length: int | None = None,
        truncation_side: str = "right",
        padding_side: str = "right",
        pad_to_multiple_of: int | None = None,
        batch_by: str = "samples",
        max_tokens: int | None = None,
        bucket: bool = True,
        eval_bucket: bool = False,
        pool_batches: int = 1000,
        packing: bool = False,
        seq_length: int | None = None,
        pack_mode: str = "split",
        batch_size: int = 32,
        val_split: int | float = 0.1,
        test_split: int | float = 0.0,
        split_seed: int = 42,
        splits: Mapping[str, Any] | None = None,
        stratify: bool = False,
        num_workers: int | str = AUTO,
        pin_memory: bool | str = AUTO,
        persistent_workers: bool | str = AUTO,
        prefetch_factor: int | str | None = AUTO,
        shuffle: bool = True,
        drop_last: bool = False,
        shuffle_seed: int | None = None,
        train_transforms: Callable[[Any], Any] | None = None,
        eval_transforms: Callable[[Any], Any] | None = None,
        reuse_batch_memory: bool = True,
    ) -> None:
        super().__init__(**shared_arguments(locals()))
        tokenizer = load_tokenizer(tokenizer, words=LEVELS)  # a path: the tokenizer saved there
        check_string(text_key, "text_key", "a string", allow_empty=True)
        check_string(label_key, "label_key", "a string or None", allow_none=True, allow_empty=True)
        check_text_arguments(
            tokenizer=tokenizer,
            lowercase=lowercase,
            min_freq=min_freq,
            pad_id=pad_id,
            max_length=max_length,
            truncation_side=truncation_side,
            padding_side=padding_side,
            pad_to_multiple_of=pad_to_multiple_of,
            batch_by=batch_by,
            max_tokens=max_tokens,
            bucket=bucket,
            eval_bucket=eval_bucket,
            pool_batches=pool_batches,
            drop_last=self.drop_last,
            shuffle=self.shuffle,
            packing=packing,
            seq_length=seq_length,
            pack_mode=pack_mode,
            labelled=labels is not None,
        )
        self.packing, self.seq_length, self.pack_mode = packing, seq_length, pack_mode
        self.text_key, self.label_key = text_key, label_key
        self.lowercase, self.min_freq = lowercase, min_freq
        self.max_length, self.truncation_side = max_length, truncation_side
        # token_files: the ids are given, so no tokenizer and no vocabulary
        given_ids = token_files is not None and isinstance(tokenizer, str)
        self.tokenizer = None if given_ids else tokenizer
        storage_options = restored_storage_options(storage_options)
        self.remote = check_remote_options(storage_options, retries, timeout)
        save_without_credentials(self, storage_options)
        #: Where each split's documents come from (:class:`~datamodules.text.corpus.TextCorpus`).
        self.corpus = TextCorpus(
            texts=texts, labels=labels, token_files=token_files, token_cache=token_cache,
            files={"train": train_file, "val": val_file, "test": test_file},
            tokenize_workers=tokenize_workers, dtype=dtype, eos_id=eos_id, vocab_size=vocab_size,
            remote=self.remote, tokenizer=tokenizer,
            text_key=text_key, label_key=label_key, max_length=max_length,
            truncation_side=truncation_side, lowercase=lowercase, trainer=self._trainer,
            overridden=type(self).load_texts is not TextDataModule.load_texts,
        )  # fmt: skip
        self.padding_side, self.pad_to_multiple_of = padding_side, pad_to_multiple_of
        self.batch_by, self.max_tokens = batch_by, max_tokens
        sources = self.corpus.blend_sources()
        #: A blend's quotas, loaders and logs (:class:`~datamodules.tokens.blends.TokenBlends`).
        self.blends = TokenBlends(
            self, sources, epoch_size, eval_per_source,
            read=self.corpus.read_blend_part, files_of=self.corpus.blend_files,
            seq_length=seq_length if packing else None, pack_mode=pack_mode,
            seed=self.shuffle_seed, given=self.corpus.given_split,
            train_argument="token_files= or train_file=",
        )  # fmt: skip
        self.corpus.check_blends(sources, batch_by, max_tokens)
        self.corpus.tokenizer = self.tokenizer  # (None for token files, once checked)
        self.epoch_size, self.eval_per_source = epoch_size, eval_per_source
        self.bucket, self.eval_bucket, self.pool_batches = bucket, eval_bucket, pool_batches
        if pad_id is None:
            pad_id = PAD_ID if isinstance(tokenizer, str) else tokenizer_pad_id(tokenizer)
        self.pad_id = pad_id
        #: Texts to ids (:class:`~datamodules.text.encoding.TextEncoding`): the vocabulary.
        self.encoding = TextEncoding(
            self.tokenizer, lowercase, min_freq, max_length, truncation_side, eos_id
        )
        #: Label ids of the sources (:class:`~datamodules.text.labels.LabelVocabulary`).
        self.label_vocabulary = LabelVocabulary()
        #: Each split's view and batch sampler (:class:`~datamodules.text.views.TextViews`).
        self.views = TextViews(self)
        #: summary() and the inspect hooks (:class:`~datamodules.text.inspection.TextInspection`).
        self.inspection = TextInspection(self)
        self._sources: list[TextRecords] = []

    @property
    def vocab(self) -> Vocabulary | None:
        """The built-in vocabulary once built or restored (None with your tokenizer)."""
        return self.encoding.vocab

    @property
    def label_names(self) -> list[str] | None:
        """The sorted names of string labels, whose ids the batches hold (None: int labels,
        or none)."""
        return self.label_vocabulary.names

    @property
    def num_classes(self) -> int | None:
        """Number of label ids (``len(label_names)``, or the largest int label + 1)."""
        self._require_setup()
        return self.label_vocabulary.num_classes(self._sources)

    def labels(self) -> torch.Tensor:
        """One label id per sample of the main dataset (for ``stratify=True``)."""
        return self.label_vocabulary.stratify_ids(self.dataset)

    # ------------------------------------------------------------------ data
    def load_texts(self) -> TextRecords | tuple[Sequence[str], Sequence[int | str] | None]:
        """Returns the texts and labels to split. Override for a new dataset.

        Returns:
            ``(texts, labels)``: a list of strings and a list of int or string labels (or
            None when unlabelled). The default returns the ``texts``/``labels`` given, else
            the records of ``train_file`` read into memory (files that go through the token
            store are not read here).
        """
        if self.corpus.given is not None:
            return self.corpus.given
        return self.corpus.read_into_memory("train")

    def build_dataset(self) -> Any:
        if type(self).load_texts is TextDataModule.load_texts:
            corpus = self._corpus_of("train")
            if corpus is not None:
                return corpus
        loaded = self.load_texts()
        if isinstance(loaded, TextRecords):
            return loaded
        if not (isinstance(loaded, tuple) and len(loaded) == 2):
            raise TypeError(
                f"load_texts() returned a {type(loaded).__name__}: return (texts, labels), "
                "with labels None when unlabelled."
            )
        return records_from_memory(*loaded)

    def split_sources(self) -> dict[str, Any]:
        sources = {}
        for split in ("val", "test"):
            if self.corpus.files[split] is not None:
                sources[split] = self._corpus_of(split) or self.corpus.read_into_memory(split)
        return sources

    def _corpus_of(self, split: str) -> Any:
        """A split's blend (:attr:`blends`), else its mapped corpus, else None (in memory)."""
        blend = self.blends.corpus(split)
        return blend if blend is not None else self.corpus.corpus_of(split)

    # ------------------------------------------------------------------ setup
    def setup(self, stage: str | None = None) -> None:
        """Reads and splits the texts, then builds the vocabulary and tokenizes, once."""
        super().setup(stage)
        if self._sources:
            return
        sources: list[TextRecords] = blend_parts(self.split_datasets.values())
        self.label_vocabulary.prepare(sources)
        main, train = self.split_datasets["train"], self.split_indices["train"]
        self.encoding.prepare(lambda: [main.texts[i] for i in train.tolist()])
        for records in sources:
            if records.encoded is None:  # texts in memory; a store or token file is mapped
                records.encoded = EncodedTexts(*self.encoding.tokenize(records), None)
            records.encoded.labels = self.label_vocabulary.tensor(records)
            self.views.check_budget(records)
            if self.packing:
                check_packable(records, self.label_key, self.seq_length, self.pack_mode)
        self._sources = sources

    # ------------------------------------------------------------------ views and loaders
    def planner(self, split: str) -> PackPlanner:
        """The pack planner of a split (``packing=True``): its rows for every epoch."""
        return self.views.planner(split)

    def make_view(self, split: str, dataset: TextRecords, indices: torch.Tensor) -> SplitView:
        return self.views.make_view(split, dataset, indices)

    def make_sampler(self, split: str, view: SplitView, rank: int, world: int) -> IndexBatchSampler:
        return self.views.make_sampler(split, view, rank, world)

    def make_loader(self, split: str) -> Any:
        """The base's loader; a blend's train loader re-measured after a held epoch."""
        return self.blends.on_loader(split, super().make_loader(split))

    def val_dataloader(self) -> Any:
        """The validation loader; with ``eval_per_source=True`` and a blend, one per source."""
        return self.blends.eval_loader("val", super().val_dataloader)

    def test_dataloader(self) -> Any:
        """The test loader; with ``eval_per_source=True`` and a blend, one per source."""
        return self.blends.eval_loader("test", super().test_dataloader)

    # ------------------------------------------------------------------ inspection
    def extra_summary(self) -> list[str]:
        """The tokenizer, the tokens, the labels, the batching and a blend's sources."""
        return self.inspection.extra_summary()

    def describe_data(self) -> list[str]:
        """Per split: labels, lengths and padding (``python -m datamodules inspect``)."""
        return self.inspection.describe_data()

    def plot_batch(self, batch: Any, path: str | os.PathLike[str], *, split: str = "train") -> Any:
        """Draws the lengths and padding of ``split`` (or packed rows), ``batch`` marked
        (:meth:`TextInspection.plot_batch
        <datamodules.text.inspection.TextInspection.plot_batch>`)."""
        return self.inspection.plot_batch(batch, path, split=split)

    def encode(self, text: str) -> list[int]:
        """Token ids of a new text, as this module tokenizes (vocabulary and truncation)."""
        self._require_setup()
        records = TextRecords([text])
        flat, _ = self.encoding.tokenize(records)
        return flat.tolist()

    @property
    def vocab_size(self) -> int:
        """Ids the model must embed: the built-in vocabulary's size, the tokenizer's, or the
        largest id seen + 1."""
        self._require_setup()
        return self.encoding.vocab_size(self._sources, self.corpus.declared_vocab_size, self.pad_id)

    # ------------------------------------------------------------------ blends
    def mixture(self, split: str) -> Mixture | None:
        """The :class:`~datamodules.core.mixture.Mixture` of a blended split (None for one
        corpus)."""
        return self.blends.mixture(split)

    def quotas(self, epoch: int, split: str = "train") -> dict[str, int]:
        """The units (packed rows with ``packing=True``, else documents) each source gives in
        ``epoch``, by source name.

        Raises:
            ValueError: The split is not a blend.
        """
        return self.blends.quotas(epoch, split)

    def source_names(self, split: str) -> list[str]:
        """The names of a blended split's sources, in order (the order of the loaders with
        ``eval_per_source=True``); empty for one corpus."""
        return self.blends.source_names(split)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Logs the train epoch's quotas as ``mix/<name>`` at its first batch (a blend)."""
        self.blends.log_mix()
        return super().on_before_batch_transfer(batch, dataloader_idx)

    # ------------------------------------------------------------------ state
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Checks a checkpoint's train blend against this one (a changed mix continues), then
        restores as the base does."""
        super().load_state_dict(self.blends.check_state(state_dict))

    def state_dict(self) -> dict[str, Any]:
        """The base state plus the vocabulary and label names (plain lists)."""
        state = super().state_dict()
        state["vocab"] = self.encoding.state()
        state["label_names"] = self.label_names
        return state

    def _restore_extra_state(self, state_dict: dict[str, Any]) -> None:
        vocab_state = state_dict.get("vocab")
        self.encoding.check_state(vocab_state)
        self.label_vocabulary.restore(state_dict.get("label_names"), self._sources)
        self.encoding.restore(vocab_state, self._sources)
