"""PreferenceDataModule: chosen / rejected pairs (DPO, reward models) and unpaired feedback (KTO).

``setup`` tokenizes every record once, as TRL 1.16's ``DPOTrainer`` does
(:class:`~datamodules.preference.render.PreferenceRenderer`), into the token store: a pair is
one document (chosen sequence, then rejected), with mask codes that say which tokens are the
completion's and which sequence they belong to. Later setups, runs and ranks map the store.
Since a pair is one document, every part of the tokens layer keeps it whole: splits, DDP shares,
packing (a pair shares a row), blends and resume deal pairs, never sequences. Batches:

* padded (default): TRL's ``DataCollatorForPreference`` layout, ``input_ids``,
  ``attention_mask``, ``completion_mask`` (2P, L): the P chosen rows, then the P rejected rows;
  unpaired feedback: (P, L) and ``label`` (bool, P);
* ``packing=True, seq_length=L``: rows of L tokens, every sequence whole, TextDataModule's
  packed keys plus ``completion_mask``, ``chosen_index`` and ``rejected_index``
  (:mod:`datamodules.preference.batches`).

The parts are the shared layers': :class:`~datamodules.conversations.corpus.RecordCorpus`
(records from files, a list or a Dataset, and their store), the tokens layer's pack planner,
row sampler and blends (:class:`~datamodules.tokens.blends.TokenBlends`, with this kind's
views), :class:`~datamodules.conversations.batching.RecordBatching` (each split's documents,
view and sampler, ``dm.batching``), the core's length buckets.

Extension point: override :meth:`PreferenceDataModule.load_pairs` to return the records of
your own dataset.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from datamodules.conversations.batching import RecordBatching, check_batching
from datamodules.conversations.corpus import is_dataset, record_corpus, source_paths, split_inputs
from datamodules.conversations.store_build import store_ranks
from datamodules.core.base import BaseDataModule
from datamodules.core.checks import check_int
from datamodules.core.hardware import AUTO, GATHERED
from datamodules.core.keywords import shared_arguments
from datamodules.core.mixture import Mixture, Source
from datamodules.core.overlong import OverlongReport
from datamodules.core.samplers import IndexBatchSampler
from datamodules.core.skipped import Skipped
from datamodules.core.summary import counted
from datamodules.core.views import SplitView
from datamodules.preference.render import PreferenceRenderer
from datamodules.preference.views import (
    PairMixedDocView,
    PairMixedPackedView,
    PairPackedView,
    PairPaddedView,
    PreferenceDocuments,
)
from datamodules.tokenizing.loading import load_tokenizer
from datamodules.tokens.blends import TokenBlends
from datamodules.tokens.mixture import BlendCorpus
from datamodules.tokens.packing import PackPlanner

__all__ = ["PreferenceDataModule"]

Files = str | os.PathLike | Sequence[Any] | None


class PreferenceDataModule(BaseDataModule):
    """Preference pairs and unpaired feedback: ``PreferenceDataModule(train_file=...,
    tokenizer=...)``.

    Records, as TRL names them: ``{"prompt", "chosen", "rejected"}`` (explicit prompt),
    ``{"chosen", "rejected"}`` (implicit prompt: what both conversations share at their start),
    or ``{"prompt", "completion", "label"}`` (unpaired feedback, ``label`` a bool); each part a
    string (tokenized with the tokenizer's special tokens, completions ending with EOS) or a
    message list (rendered with the chat template). All records of a DataModule are pairs, or
    all are unpaired.

    A pair's chosen sequence is exactly what TRL's ``DPOTrainer`` builds (the prompt's ids, then
    the chosen completion's), likewise the rejected one; ``completion_mask`` marks the
    completions' tokens.

    Records over the limit (``max_length`` for each sequence; with ``packing=True``,
    ``seq_length`` for a pair's two sequences together, since a pair shares a row) are dropped
    (``overlong="drop"``), cut (``"truncate"``: the prompt's start first, then the completions'
    ends) or refused (``"error"``); never silently: the count is in :meth:`summary`, and one
    warning on rank 0 says it.

    Args:
        pairs: The records in memory: a list of records, or a ``datasets.Dataset``.
        train_file: A path or URL, a glob, a brace pattern, a directory, a dataset index or a
            list of them: JSONL (optionally ``.gz`` / ``.zst``), Parquet or Arrow files of
            records (a ``save_to_disk`` folder: its data files), local or remote; or a blend,
            a list of :class:`~datamodules.Source`.
        val_file: Validation files, replacing the random ``val_split``.
        test_file: Test files, replacing the random ``test_split``.
        tokenizer: A ``transformers`` tokenizer, a ``tokenizers.Tokenizer``, or the path of a
            saved one (a ``save_pretrained`` folder, or a ``tokenizer.json``). Not saved in
            checkpoints: give it again to ``load_from_checkpoint``.
        chat_template: A Jinja chat template replacing the tokenizer's (needed for message
            lists when the tokenizer has none).
        eos_token: The token that ends a string completion, for a tokenizer that declares no
            ``eos_token`` (a ``tokenizers.Tokenizer`` never does); None: the tokenizer's own.
        packing: Pack the sequences into rows of ``seq_length`` tokens, each whole, a pair's
            two in one row.
        seq_length: Tokens per packed row (with ``packing=True``).
        max_length: The most tokens of a padded sequence (None: no limit).
        overlong: ``"drop"``, ``"truncate"`` or ``"error"``, for records over the limit.
        on_error: ``"raise"`` (name the file and line or row, and why) or ``"skip"`` records
            that cannot be used (counted in :attr:`skipped`).
        token_cache: Where token stores live: a directory, None for
            ``$DATAMODULES_CACHE/tokens`` (or ``~/.cache/datamodules/tokens``), or False to
            tokenize at every setup.
        epoch_size: With a weighted train blend: units per epoch (packed rows with
            ``packing=True``, else records), split by weight.
        eval_per_source: With a blended validation (test) split: one loader per source.
        storage_options: Passed to fsspec for remote files; credentials are never saved.
        retries: Retries of a transient remote failure, with exponential backoff.
        timeout: Seconds a remote request may go without producing a byte.
        bucket: Group padded train records of similar length (less padding).
        tokenize_workers: Processes that tokenize a new store: ``"auto"`` or an int (0: this
            process).
    """

    fetch = GATHERED
    hparams_ignore = (*BaseDataModule.hparams_ignore, "pairs", "tokenizer")

    def __init__(
        self,
        pairs: Sequence[Any] | Any | None = None,
        *,
        train_file: Files = None,
        val_file: Files = None,
        test_file: Files = None,
        tokenizer: Any = None,
        chat_template: str | None = None,
        eos_token: str | None = None,
        packing: bool = False,
        seq_length: int | None = None,
        max_length: int | None = None,
        overlong: str = "drop",
        on_error: str = "raise",
        token_cache: str | os.PathLike | bool | None = None,
        epoch_size: int | None = None,
        eval_per_source: bool = False,
        storage_options: dict[str, Any] | None = None,
        retries: int = 5,
        timeout: float = 60.0,
        bucket: bool = True,
        tokenize_workers: int | str = "auto",
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
        tokenizer = load_tokenizer(tokenizer)
        if tokenizer is None:
            raise ValueError(
                "tokenizer=None is not accepted: PreferenceDataModule tokenizes records as "
                "TRL does, with your tokenizer; give a transformers tokenizer, or a "
                "tokenizers.Tokenizer (with chat_template= for message lists)."
            )
        if self.stratify:
            raise ValueError(
                "stratify=True does not apply to PreferenceDataModule: pairs carry no class "
                "labels to keep in proportion across the splits; leave stratify at its default, "
                "False."
            )
        check_batching(
            packing, seq_length, max_length, bucket, overlong, on_error, unit="sequence",
            shortest_row=2, row_limit=" for a pair's two sequences",
        )  # fmt: skip
        self.renderer = PreferenceRenderer(
            tokenizer, chat_template, None if packing else max_length,
            seq_length if packing else None, overlong, eos_token,
        )  # fmt: skip
        self.tokenizer = tokenizer
        self.packing, self.seq_length, self.max_length = packing, seq_length, max_length
        self.overlong, self.on_error, self.bucket = overlong, on_error, bucket
        self.pad_to_multiple_of = None  # read by the blends' padded views
        files, sources = self._check_inputs(pairs, train_file, val_file, test_file)
        check_int(epoch_size, "epoch_size", 1, allow_none=True)
        self.batching = RecordBatching(self, PairPackedView, PairPaddedView)
        self.blends = TokenBlends(
            self, sources, epoch_size, eval_per_source,
            read=self._read_source, files_of=source_paths, given=self.batching.given,
            seq_length=seq_length if packing else None, pack_mode="whole",
            seed=self.shuffle_seed, unit="record", masked=True,
            views=(PairMixedPackedView, PairMixedDocView),
        )  # fmt: skip
        self.epoch_size, self.eval_per_source = epoch_size, eval_per_source
        self.corpus = record_corpus(
            self, pairs, files, token_cache, tokenize_workers,
            (storage_options, retries, timeout), verb="tokenize", kind="preference",
        )  # fmt: skip
        self.token_cache = token_cache
        self.overlong_report = OverlongReport(type(self).__name__, "record", overlong)

    def _check_inputs(
        self, pairs: Any, train_file: Any, val_file: Any, test_file: Any
    ) -> tuple[dict[str, list[str] | None], dict[str, list[Source] | None]]:
        if pairs is not None and train_file is not None:
            raise ValueError("give pairs or train_file, not both.")
        overridden = type(self).load_pairs is not PreferenceDataModule.load_pairs
        if pairs is None and train_file is None and not overridden:
            raise ValueError(
                "PreferenceDataModule needs data: pass pairs (a list of records or a "
                "datasets.Dataset), train_file= (.jsonl / .parquet / .arrow files of records), "
                "or override load_pairs()."
            )
        if pairs is not None and not (is_dataset(pairs) or isinstance(pairs, (list, tuple))):
            raise TypeError(
                f"pairs={type(pairs).__name__} is not accepted: use a list of records or a "
                "datasets.Dataset."
            )
        return split_inputs(train_file, val_file, test_file)

    def _ranks(self) -> tuple[int, int]:
        return store_ranks(self._trainer())

    # ------------------------------------------------------------------ data
    def load_pairs(self) -> Sequence[Any] | Any:
        """The train records when neither ``pairs`` nor ``train_file`` is given: override it
        to serve your own dataset (a list of records, or a ``datasets.Dataset``). Called once,
        in the first ``setup``; the records are tokenized into the store keyed by them.

        Returns:
            The records (the default: ``pairs``).
        """
        return self.corpus.conversations

    def documents(self, split: str) -> PreferenceDocuments | BlendCorpus:
        """The records of ``split``'s own inputs (train: ``pairs``, ``train_file`` or
        :meth:`load_pairs`), tokenized into the store first when missing; a blend of Sources
        gives one per source."""
        return self.batching.split_documents(split, lambda: self._read_split(split))

    def _read_split(self, split: str) -> PreferenceDocuments:
        loaded = split == "train" and self.corpus.files["train"] is None
        if loaded and self.corpus.conversations is None:
            self.corpus.conversations = self._loaded()
        return PreferenceDocuments(self.corpus.store(split))

    def _loaded(self) -> Any:
        records = self.load_pairs()
        if not (is_dataset(records) or isinstance(records, (list, tuple))):
            raise TypeError(
                f"load_pairs() returned a {type(records).__name__}: return a list of records "
                "or a datasets.Dataset."
            )
        return records

    def _read_source(self, split: str, files: list[str], name: str) -> PreferenceDocuments:
        """One source of a split's blend: its records, tokenized (or mapped) first."""
        return PreferenceDocuments(self.corpus.store(split, files, name))

    def build_dataset(self) -> PreferenceDocuments | BlendCorpus:
        return self.documents("train")

    def split_sources(self) -> dict[str, Any]:
        return {s: self.documents(s) for s in self.batching.given_splits()}

    def setup(self, stage: str | None = None) -> None:
        """Tokenizes (or maps) the records and splits them, once; refuses pairs mixed with
        unpaired feedback; warns on rank 0 about records over the limit."""
        super().setup(stage)
        parts = self.batching.parts()
        if sum(p.kinds["pair"] for p in parts) and sum(p.kinds["unpaired"] for p in parts):
            mixed = next(p for p in parts if p.kinds["unpaired"])
            raise ValueError(
                f"{mixed.where(0)}: the records mix preference pairs and unpaired feedback "
                f"({self.kinds}); a DataModule serves one or the other."
            )
        self.overlong_report.announce(*self._overlong_count())

    @property
    def kinds(self) -> dict[str, int]:
        """Records kept by kind: ``{"pair": n, "unpaired": m}`` (after ``setup``)."""
        parts = self.batching.parts()
        return {k: sum(p.kinds[k] for p in parts) for k in ("pair", "unpaired")}

    @property
    def paired(self) -> bool:
        """Whether the records are pairs (else unpaired feedback)."""
        return not self.kinds["unpaired"]

    @property
    def limit(self) -> int | None:
        """The limit: ``seq_length`` (a pair's sequences together) when packing, else
        ``max_length`` (each sequence)."""
        return self.seq_length if self.packing else self.max_length

    def _overlong_count(self) -> tuple[int, str]:
        """Records over the limit, and the limit as set (the prompt's start is cut first)."""
        over = sum(p.overlong for p in self.batching.parts())
        name = "seq_length" if self.packing else "max_length"
        return over, f"{name}={self.limit}"

    @property
    def skipped(self) -> Skipped:
        """Records left out under ``on_error="skip"``, with where they are and why."""
        return self.corpus.skipped

    @property
    def vocab_size(self) -> int:
        """Ids the model must embed: the tokenizer's length."""
        return int(self.renderer.vocab_size)

    @property
    def pad_id(self) -> int:
        """The id written at padding: the tokenizer's pad id, else EOS, else 0."""
        return int(self.renderer.pad_id)

    # ------------------------------------------------------------------ views and samplers
    def planner(self, split: str) -> PackPlanner:
        """The pack planner of a split (``packing=True``): whole records, best fit."""
        return self.batching.planner(split)

    def make_view(self, split: str, dataset: Any, indices: torch.Tensor) -> SplitView:
        return self.batching.make_view(split, dataset, indices)

    def make_sampler(self, split: str, view: SplitView, rank: int, world: int) -> IndexBatchSampler:
        return self.batching.make_sampler(split, view, rank, world)

    # ------------------------------------------------------------------ blends
    def mixture(self, split: str) -> Mixture | None:
        """The :class:`~datamodules.core.mixture.Mixture` of a blended split, else None."""
        return self.blends.mixture(split)

    def quotas(self, epoch: int, split: str = "train") -> dict[str, int]:
        """The units (packed rows with ``packing=True``, else records) each source gives in
        ``epoch``, by source name.

        Raises:
            ValueError: The split is not a blend.
        """
        return self.blends.quotas(epoch, split)

    def source_names(self, split: str) -> list[str]:
        """The names of a blended split's sources, in order; empty for one input."""
        return self.blends.source_names(split)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Logs the train epoch's quotas as ``mix/<name>`` at its first batch (a blend)."""
        self.blends.log_mix()
        return super().on_before_batch_transfer(batch, dataloader_idx)

    def make_loader(self, split: str) -> Any:
        """The base's loader; a blend's train loader re-measured after a held epoch."""
        return self.blends.on_loader(split, super().make_loader(split))

    def val_dataloader(self) -> Any:
        """The validation loader; with ``eval_per_source=True`` and a blend, one per source."""
        return self.blends.eval_loader("val", super().val_dataloader)

    def test_dataloader(self) -> Any:
        """The test loader; with ``eval_per_source=True`` and a blend, one per source."""
        return self.blends.eval_loader("test", super().test_dataloader)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Checks a checkpoint's train blend against this one, then restores as the base does."""
        super().load_state_dict(self.blends.check_state(state_dict))

    # ------------------------------------------------------------------ summary
    def extra_summary(self) -> list[str]:
        """The store, records, tokens and completion tokens per input, overlong and skipped
        records, and (packing) the rows' fill."""
        lines = [
            "  records: " + (f"packed into rows of {self.seq_length}" if self.packing else "padded")
        ]
        return lines + self.batching.summary_lines(
            _describe,
            lambda: self.overlong_report.line(*self._overlong_count()),
        )


def _describe(docs: PreferenceDocuments) -> str:
    """A store's records by kind, tokens and completion tokens (for the summary)."""
    kinds = ", ".join(f"{counted(n, k)}" for k, n in docs.kinds.items() if n)
    tokens = f"{docs.num_tokens:,} tokens, {docs.trained_tokens:,} in completions"
    return f"{kinds or 'no records'}, {tokens}"
