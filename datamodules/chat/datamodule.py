"""ChatDataModule: conversations for fine-tuning, rendered with the model's chat template once,
trained on the assistant's tokens, padded or packed whole.

``setup`` renders every conversation with a
:class:`~datamodules.conversations.ChatRenderer` (the tokenizer's chat template; the loss mask
from the template's generation marks or from where each assistant message lies in the
rendered text) into the token store, in parallel, once: ids and the per-token mask. Later
setups, runs and ranks map the store and render nothing. Batches are gathered from the mapped
buffers in one call:

* padded (default): ``{"input_ids", "labels", "attention_mask"}`` (B, L), ``labels`` -100
  where a token is not trained and at padding; train batches bucketed by length;
* ``packing=True, seq_length=L``: rows of exactly L tokens with TextDataModule's packed keys
  (``input_ids, position_ids, document_ids, labels, attention_mask, cu_seqlens,
  max_seqlen``), each conversation whole in one row (best fit), ``labels`` -100 where not
  trained and at each conversation's first token, position ids restarting there.

The parts are the shared layers': the shard layer reads the files, the token store
(:mod:`datamodules.tokens.store`) keeps the rendered ids, pack planning, packed rows and the
row sampler are :mod:`datamodules.tokens.packing`'s, length buckets
:mod:`datamodules.core.buckets`'; the inputs and their store are a
:class:`~datamodules.conversations.corpus.RecordCorpus`, each split's documents, view and
sampler a :class:`~datamodules.conversations.batching.RecordBatching` (``dm.batching``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from datamodules.chat.views import ChatDocuments, ChatPackedView, ChatPaddedView
from datamodules.conversations import ChatRenderer
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
from datamodules.tokenizing.loading import load_tokenizer
from datamodules.tokens.blends import TokenBlends
from datamodules.tokens.mixture import BlendCorpus
from datamodules.tokens.packing import PackPlanner

__all__ = ["ChatDataModule"]

Files = str | os.PathLike | Sequence[Any] | None


class ChatDataModule(BaseDataModule):
    """Conversations for supervised fine-tuning: ``ChatDataModule(train_file=..., tokenizer=...)``.

    Data comes from ``conversations`` (a list of records, or of bare message lists, or a
    Hugging Face ``datasets.Dataset``) or ``train_file``; ``val_file`` / ``test_file``
    replace the random ``val_split`` / ``test_split``. A record holds ``messages_key``:
    ``[{"role", "content"}, ...]`` (OpenAI / Hugging Face) or ShareGPT's ``[{"from",
    "value"}, ...]`` (human / gpt / system); or ``prompt`` and ``completion`` (TRL's
    prompt-completion records: message lists, or strings tokenized as prompt + completion +
    EOS, trained on the completion and the EOS).

    Conversations longer than the limit (``seq_length`` with ``packing=True``, else
    ``max_length``) are dropped (``overlong="drop"``, the default), cut to the limit
    (``"truncate"``) or refused (``"error"``); never silently: the count is in
    :meth:`summary` and one warning on rank 0 says it.

    Args:
        conversations: The conversations in memory: a list of records (or of message lists),
            or a ``datasets.Dataset`` (its rows are the records).
        train_file: A path or URL, a glob, a brace pattern, a directory, a dataset index or a
            list of them: JSONL (optionally ``.gz`` / ``.zst``), Parquet or Arrow files of records
            (a ``save_to_disk`` folder: its data files), local or remote; or a blend, a list of
            :class:`~datamodules.Source` (weights and schedules, repeats; a packed row never
            mixes sources).
        val_file: Validation files, replacing the random ``val_split``.
        test_file: Test files, replacing the random ``test_split``.
        messages_key: The key (column) of the message list.
        tokenizer: A ``transformers`` tokenizer, or a ``tokenizers.Tokenizer`` (give
            ``chat_template=`` then), or the path of a saved one (a ``save_pretrained``
            folder, or a ``tokenizer.json``: what ``--data.tokenizer PATH`` gives). Not saved
            in checkpoints: give it again to ``load_from_checkpoint``.
        chat_template: A Jinja chat template; replaces the tokenizer's (needed when the
            tokenizer has none).
        train_on: ``"assistant"`` (every assistant message), ``"last"`` (the last one) or
            ``"all"`` (every token).
        eos_token: The token that ends a prompt/completion record of strings, for a tokenizer
            that declares no ``eos_token`` (a ``tokenizers.Tokenizer`` never does), e.g.
            ``"<|im_end|>"``; None: the tokenizer's own.
        packing: Pack the conversations into rows of ``seq_length`` tokens, each whole in
            one row.
        seq_length: Tokens per packed row (with ``packing=True``).
        max_length: The most tokens of a padded conversation (None: no limit); with
            ``packing=True`` the limit is ``seq_length``.
        overlong: ``"drop"``, ``"truncate"`` or ``"error"``, for conversations over the
            limit.
        on_error: ``"raise"`` (name the file, the line or row, and the key or role at
            fault) or ``"skip"`` records that cannot be rendered (counted in
            :attr:`skipped`).
        token_cache: Where token stores live: a directory, None for
            ``$DATAMODULES_CACHE/tokens`` (or ``~/.cache/datamodules/tokens``), or False to
            render at every setup (into a temporary store).
        epoch_size: With a weighted train blend (``train_file=[Source(..., weight=...)]``):
            units per epoch (packed rows with ``packing=True``, else conversations), split by
            weight (default: all the sources' units).
        eval_per_source: With a blended validation (test) split: one loader per source.
        storage_options: Passed to fsspec for remote files; credentials are never saved.
        retries: Retries of a transient remote failure, with exponential backoff.
        timeout: Seconds a remote request may go without producing a byte.
        bucket: Group padded train conversations of similar length (less padding).
        pad_to_multiple_of: Round each padded batch's length up to a multiple of this.
        tokenize_workers: Processes that render a new store: ``"auto"`` (the CPUs) or an int
            (0: this process).
    """

    fetch = GATHERED
    hparams_ignore = (*BaseDataModule.hparams_ignore, "conversations", "tokenizer")

    def __init__(
        self,
        conversations: Sequence[Any] | Any | None = None,
        *,
        train_file: Files = None,
        val_file: Files = None,
        test_file: Files = None,
        messages_key: str = "messages",
        tokenizer: Any = None,
        chat_template: str | None = None,
        train_on: str = "assistant",
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
        pad_to_multiple_of: int | None = None,
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
                "tokenizer=None is not accepted: ChatDataModule renders conversations with "
                "your tokenizer's chat template; give a transformers tokenizer, or a "
                "tokenizers.Tokenizer with chat_template=."
            )
        if self.stratify:
            raise ValueError(
                "stratify=True does not apply to ChatDataModule: conversations carry no class "
                "labels to keep in proportion across the splits; leave stratify at its default, "
                "False."
            )
        self.renderer = ChatRenderer(
            tokenizer,
            chat_template=chat_template,
            train_on=train_on,
            messages_key=messages_key,
            eos_token=eos_token,
        )
        self.tokenizer = tokenizer
        self.train_on, self.messages_key = train_on, messages_key
        check_batching(
            packing, seq_length, max_length, bucket, overlong, on_error, unit="conversation"
        )
        check_int(pad_to_multiple_of, "pad_to_multiple_of", 1, allow_none=True)
        if packing and pad_to_multiple_of is not None:
            raise ValueError("pad_to_multiple_of applies to padded batches, not packing=True.")
        self.packing, self.seq_length, self.max_length = packing, seq_length, max_length
        self.overlong, self.on_error = overlong, on_error
        self.bucket, self.pad_to_multiple_of = bucket, pad_to_multiple_of
        files, sources = self._check_inputs(conversations, train_file, val_file, test_file)
        check_int(epoch_size, "epoch_size", 1, allow_none=True)
        self.batching = RecordBatching(self, ChatPackedView, ChatPaddedView)
        self.blends = TokenBlends(
            self, sources, epoch_size, eval_per_source,
            read=self._read_source, files_of=source_paths, given=self.batching.given,
            seq_length=seq_length if packing else None, pack_mode="whole",
            seed=self.shuffle_seed, unit="conversation", masked=True,
        )  # fmt: skip
        self.epoch_size, self.eval_per_source = epoch_size, eval_per_source
        self.corpus = record_corpus(
            self, conversations, files, token_cache, tokenize_workers,
            (storage_options, retries, timeout), verb="render",
        )  # fmt: skip
        self.token_cache = token_cache
        self.overlong_report = OverlongReport(type(self).__name__, "conversation", overlong)

    def _check_inputs(
        self, conversations: Any, train_file: Any, val_file: Any, test_file: Any
    ) -> tuple[dict[str, list[str] | None], dict[str, list[Source] | None]]:
        if conversations is not None and train_file is not None:
            raise ValueError("give conversations or train_file, not both.")
        if conversations is None and train_file is None:
            raise ValueError(
                "ChatDataModule needs data: pass conversations (a list of records or a "
                "datasets.Dataset) or train_file= (.jsonl / .parquet files of records)."
            )
        if conversations is not None and not (
            is_dataset(conversations) or isinstance(conversations, (list, tuple))
        ):
            raise TypeError(
                f"conversations={type(conversations).__name__} is not accepted: use a list of "
                "records (or of message lists) or a datasets.Dataset."
            )
        return split_inputs(train_file, val_file, test_file)

    def _ranks(self) -> tuple[int, int]:
        return store_ranks(self._trainer())

    # ------------------------------------------------------------------ data
    @property
    def limit(self) -> int | None:
        """The most tokens a conversation may have: ``seq_length`` when packing, else
        ``max_length`` (None: no limit)."""
        return self.seq_length if self.packing else self.max_length

    def documents(self, split: str) -> ChatDocuments | BlendCorpus:
        """The conversations of ``split``'s own inputs (train: ``conversations`` or
        ``train_file``) after ``overlong``, their store rendered first when missing; a blend
        of Sources gives one per source."""
        return self.batching.split_documents(split, lambda: self._read_source(split))

    @property
    def _limit_name(self) -> str:
        return "seq_length" if self.packing else "max_length"

    def _read_source(
        self, split: str, files: list[str] | None = None, name: str | None = None
    ) -> ChatDocuments:
        """The conversations of a split's inputs (or of one source of its blend), rendered
        (or mapped) first."""
        store = self.corpus.store(split, files, name)
        return ChatDocuments(store, self.limit, self.overlong, self._limit_name)

    def build_dataset(self) -> ChatDocuments | BlendCorpus:
        return self.documents("train")

    def split_sources(self) -> dict[str, Any]:
        return {s: self.documents(s) for s in self.batching.given_splits()}

    def setup(self, stage: str | None = None) -> None:
        """Renders (or maps) the conversations and splits them, once; warns on rank 0 about
        conversations over the limit."""
        super().setup(stage)
        self.overlong_report.announce(*self._overlong_count())

    def _overlong_count(self) -> tuple[int, str, str]:
        """(conversations over the limit, the limit as set, tokens cut)."""
        parts = self.batching.parts()
        cut = sum(d.cut_tokens for d in parts)
        limits = f"{self._limit_name}={self.limit}"
        return sum(d.overlong for d in parts), limits, f"{cut:,} tokens"

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
        """The pack planner of a split (``packing=True``): whole conversations, best fit."""
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
        """The units (packed rows with ``packing=True``, else conversations) each source
        gives in ``epoch``, by source name.

        Raises:
            ValueError: The split is not a blend.
        """
        return self.blends.quotas(epoch, split)

    def source_names(self, split: str) -> list[str]:
        """The names of a blended split's sources, in order (the order of the loaders with
        ``eval_per_source=True``); empty for one input."""
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
        """Checks a checkpoint's train blend against this one (a changed mix continues: the
        interrupted epoch ends as planned, the new mix applies from the next), then restores
        as the base does."""
        super().load_state_dict(self.blends.check_state(state_dict))

    # ------------------------------------------------------------------ summary
    def extra_summary(self) -> list[str]:
        """The store, tokens and trained tokens per input, overlong and skipped records, and
        (packing) the rows' fill."""
        lines = [
            f"  rendering: train_on={self.train_on!r}, messages_key={self.messages_key!r}, "
            f"{'packed into rows of ' + str(self.seq_length) if self.packing else 'padded'}"
        ]
        return lines + self.batching.summary_lines(
            lambda docs: (
                f"{counted(len(docs), 'conversation')}, {docs.num_tokens:,} tokens, "
                f"{docs.trained_tokens:,} trained"
            ),
            lambda: self.overlong_report.line(*self._overlong_count()),
        )
