"""TextDataModule: variable-length text, tokenized once, batched by length buckets or token budget.

``setup`` reads the texts, splits them, builds the vocabulary from the train split (or uses
your tokenizer), and tokenizes every text once into one flat token buffer plus offsets. A
batch is then gathered straight from that buffer by one vectorised indexing call (no
per-sample Python objects, no per-sample collate); it equals what
:class:`collates.PadCollate` makes of the same samples::

    {"input_ids": LongTensor (B, L), "labels": LongTensor (B,),      # labels when labelled
     "attention_mask": LongTensor (B, L), "lengths": LongTensor (B,)}

The train loader's batches come from :class:`~datamodules.core.buckets.BucketBatchSampler`:
similar lengths together (little padding), a new composition every epoch, the same number of
batches on every DDP rank, exact mid-epoch resume. With ``packing=True`` (language modelling,
texts without labels) batches are instead rows of ``seq_length`` tokens with document
boundaries (:mod:`datamodules.text.packing`).

Extension point: override :meth:`TextDataModule.load_texts` to return ``(texts, labels)`` for
your own dataset.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from datamodules.core.base import BaseDataModule
from datamodules.core.buckets import BucketBatchSampler
from datamodules.core.hardware import AUTO, GATHERED
from datamodules.core.keywords import shared_arguments
from datamodules.core.samplers import IndexBatchSampler
from datamodules.core.views import SplitView
from datamodules.text.arguments import check_text_arguments
from datamodules.text.encoding import EncodedTexts, TextBatchView
from datamodules.text.inspection import TextInspection
from datamodules.text.packing import (
    PackedRowSampler,
    PackedTextView,
    PackPlanner,
    check_packable,
)
from datamodules.text.readers import (
    TextRecords,
    check_labels,
    check_path,
    read_text_files,
    records_from_memory,
)
from datamodules.text.vocab import (
    PAD_ID,
    Vocabulary,
    describe_tokenizer,
    encode_with,
    tokenizer_pad_id,
    tokenizer_vocab_size,
    truncate,
)

Tokenizer = str | Callable[[str], Sequence[int]] | Any


class TextDataModule(TextInspection, BaseDataModule):
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

    Args:
        texts: The texts, one per sample (a list of strings).
        labels: One int or string label per text, or None.
        train_file: A ``.jsonl``, ``.csv``, ``.tsv`` or ``.txt`` file, or a list of them,
            instead of ``texts`` (see :mod:`datamodules.text.readers` for the formats).
        val_file: File(s) for validation, replacing the random ``val_split``.
        test_file: File(s) for testing, replacing the random ``test_split``.
        text_key: JSON key or CSV/TSV column of the text.
        label_key: JSON key or CSV/TSV column of the label. None (default): the
            ``"label"`` key or column when the records have one, else unlabelled texts; a
            key given explicitly must be in every record (a typo raises in ``setup``).
        tokenizer: ``"char"`` (default), ``"word"`` (whitespace-separated), or your tokenizer.
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
            :mod:`datamodules.text.packing`); ``bucket``, ``eval_bucket``, ``padding_side``
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
        texts: Sequence[str] | None = None,
        labels: Sequence[int | str] | None = None,
        *,
        train_file: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
        val_file: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
        test_file: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
        text_key: str = "text",
        label_key: str | None = None,
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
        if texts is not None and train_file is not None:
            raise ValueError("give texts or train_file, not both.")
        if labels is not None and texts is None:
            raise ValueError("labels= needs texts=; files carry their labels under label_key.")
        self._given = records_from_memory(texts, labels) if texts is not None else None
        self.train_files = check_path(train_file, "train_file") if train_file is not None else None
        self.val_files = check_path(val_file, "val_file") if val_file is not None else None
        self.test_files = check_path(test_file, "test_file") if test_file is not None else None
        if (
            self._given is None
            and self.train_files is None
            and type(self).load_texts is TextDataModule.load_texts
        ):
            raise ValueError(
                "TextDataModule needs data: pass texts (TextDataModule(texts, labels)), "
                "train_file= (.jsonl/.csv/.tsv/.txt), or override load_texts()."
            )
        for name, key in (("text_key", text_key), ("label_key", label_key)):
            if not isinstance(key, str) and not (name == "label_key" and key is None):
                raise TypeError(f"{name}={key!r} is not accepted: use a string.")
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
        self.tokenizer = tokenizer
        self.lowercase, self.min_freq = lowercase, min_freq
        self.max_length, self.truncation_side = max_length, truncation_side
        self.padding_side, self.pad_to_multiple_of = padding_side, pad_to_multiple_of
        self.batch_by, self.max_tokens = batch_by, max_tokens
        self.bucket, self.eval_bucket, self.pool_batches = bucket, eval_bucket, pool_batches
        if pad_id is None:
            pad_id = PAD_ID if isinstance(tokenizer, str) else tokenizer_pad_id(tokenizer)
        self.pad_id = pad_id
        self.vocab: Vocabulary | None = None
        self.label_names: list[str] | None = None
        self._sources: list[TextRecords] = []
        self._pending_vocab: dict[str, Any] | None = None
        self._pending_label_names: list[str] | None = None
        self._planners: dict[str, PackPlanner] = {}

    # ------------------------------------------------------------------ data
    def load_texts(self) -> TextRecords | tuple[Sequence[str], Sequence[int | str] | None]:
        """Returns the texts and labels to split. Override for a new dataset.

        Returns:
            ``(texts, labels)``: a list of strings and a list of int or string labels (or
            None when unlabelled). The default returns the ``texts``/``labels`` given, else
            the records of ``train_file``.
        """
        if self._given is not None:
            return self._given
        assert self.train_files is not None
        return read_text_files(self.train_files, self.text_key, self.label_key)

    def build_dataset(self) -> TextRecords:
        loaded = self.load_texts()
        if isinstance(loaded, TextRecords):
            return loaded
        if not (isinstance(loaded, tuple) and len(loaded) == 2):
            raise TypeError(
                f"load_texts() returned a {type(loaded).__name__}: return (texts, labels), "
                "with labels None when unlabelled."
            )
        return records_from_memory(*loaded)

    def split_sources(self) -> dict[str, TextRecords]:
        sources = {}
        for split, files in (("val", self.val_files), ("test", self.test_files)):
            if files is not None:
                sources[split] = read_text_files(files, self.text_key, self.label_key)
        return sources

    def labels(self) -> torch.Tensor:
        """One label id per sample of the main dataset (for ``stratify=True``)."""
        records = self.dataset
        if records.labels is None:
            raise ValueError("stratify=True needs labels: these texts have none.")
        if isinstance(records.labels[0], str):
            names = {name: i for i, name in enumerate(sorted(set(records.labels)))}
            return torch.tensor([names[v] for v in records.labels], dtype=torch.int64)
        return torch.tensor(records.labels, dtype=torch.int64)

    # ------------------------------------------------------------------ setup
    def setup(self, stage: str | None = None) -> None:
        """Reads and splits the texts, then builds the vocabulary and tokenizes, once."""
        super().setup(stage)
        if self._sources:
            return
        sources: list[TextRecords] = []
        for records in self.split_datasets.values():
            if all(records is not s for s in sources):
                sources.append(records)
        self._encode_labels(sources, self._pending_label_names)
        if isinstance(self.tokenizer, str):
            if self._pending_vocab is not None:
                self.vocab = self._vocab_from_state(self._pending_vocab)
            else:
                main = self.split_datasets["train"]
                train_texts = [main.texts[i] for i in self.split_indices["train"].tolist()]
                self.vocab = Vocabulary.build(
                    train_texts, self.tokenizer, self.lowercase, self.min_freq
                )
        self._pending_vocab = self._pending_label_names = None
        for records in sources:
            records.encoded = EncodedTexts(*self._tokenize(records), self._label_tensor(records))
            self._check_budget(records)
            if self.packing:
                check_packable(records, self.label_key, self.seq_length, self.pack_mode)
        self._sources = sources

    def _tokenize(self, records: TextRecords) -> tuple[np.ndarray, np.ndarray]:
        if self.vocab is not None:
            flat, lengths = self.vocab.encode_many(records.texts)
        else:
            flat, lengths = encode_with(self.tokenizer, records.texts, records.where)
        if self.max_length is not None:
            flat, lengths = truncate(flat, lengths, self.max_length, self.truncation_side)
        return flat, lengths

    def _encode_labels(self, sources: list[TextRecords], saved: list[str] | None) -> None:
        """Checks that labelled sources agree in kind and sets :attr:`label_names`."""
        labelled = [s for s in sources if s.labels is not None]
        if not labelled:
            return
        kinds = {type(s.labels[0]) for s in labelled}
        if len(kinds) > 1:
            first = labelled[0]
            other = next(s for s in labelled if type(s.labels[0]) is not type(first.labels[0]))
            raise TypeError(
                f"{other.where(0)}: label {other.labels[0]!r} is a "
                f"{type(other.labels[0]).__name__} but {first.where(0)} has {first.labels[0]!r}: "
                "use ints or strings in every split, not both."
            )
        if kinds != {str}:
            return
        names = sorted({v for s in labelled for v in s.labels})
        if saved is not None:
            unknown = sorted(set(names) - set(saved))
            if unknown:
                raise ValueError(
                    f"the checkpoint's label_names {saved} lack the labels {unknown} found in "
                    "this data: the saved model cannot predict them."
                )
            names = list(saved)
        self.label_names = names

    def _label_tensor(self, records: TextRecords) -> torch.Tensor | None:
        if records.labels is None:
            return None
        if self.label_names is not None:
            ids = {name: i for i, name in enumerate(self.label_names)}
            return torch.tensor([ids[v] for v in records.labels], dtype=torch.int64)
        return torch.tensor(check_labels(records.labels, records.where), dtype=torch.int64)

    def _check_budget(self, records: TextRecords) -> None:
        if self.batch_by != "tokens" or not len(records):
            return
        lengths = records.encoded.lengths
        longest = int(lengths.max())
        padded = longest
        if self.pad_to_multiple_of:
            padded = -(-longest // self.pad_to_multiple_of) * self.pad_to_multiple_of
        if padded > self.max_tokens:
            where = records.where(int(torch.argmax(lengths)))
            raise ValueError(
                f"{where}: {longest} tokens ({padded} padded) exceed max_tokens="
                f"{self.max_tokens}: raise max_tokens or set max_length to truncate."
            )

    def _vocab_from_state(self, state: dict[str, Any]) -> Vocabulary:
        vocab = Vocabulary.from_state(state)
        if (vocab.level, vocab.lowercase) != (self.tokenizer, self.lowercase):
            raise ValueError(
                f"the checkpoint's vocabulary is {vocab.level!r} with lowercase="
                f"{vocab.lowercase}, this module has tokenizer={self.tokenizer!r} and "
                f"lowercase={self.lowercase}: use the checkpoint's settings."
            )
        return vocab

    # ------------------------------------------------------------------ loaders
    def planner(self, split: str) -> PackPlanner:
        """The pack planner of a split (``packing=True``): its rows for every epoch."""
        indices = self._require_setup()[split]
        if split not in self._planners:
            lengths = self.split_datasets[split].encoded.lengths_np[indices.numpy()]
            shuffle = self.shuffle and split == "train"
            self._planners[split] = PackPlanner(
                lengths, self.seq_length, self.pack_mode, shuffle, self.shuffle_seed
            )
        return self._planners[split]

    def make_view(self, split: str, dataset: TextRecords, indices: torch.Tensor) -> SplitView:
        if self.packing:
            planner = self.planner(split)
            return PackedTextView(
                dataset.encoded, indices, self.transform_for(split), planner, self.pad_id
            )
        return TextBatchView(
            dataset.encoded,
            indices,
            self.transform_for(split),
            self.pad_id,
            self.padding_side,
            self.pad_to_multiple_of,
        )

    def make_sampler(self, split: str, view: SplitView, rank: int, world: int) -> IndexBatchSampler:
        train = split == "train"
        if isinstance(view, PackedTextView):
            return PackedRowSampler(
                view.planner,
                self.batch_size,
                drop_last=self.drop_last and train,
                num_replicas=world,
                rank=rank,
            )
        assert isinstance(view, TextBatchView)
        return BucketBatchSampler(
            view.lengths,
            self.batch_size if self.batch_by == "samples" else None,
            batch_by=self.batch_by,
            max_tokens=self.max_tokens,
            bucket=self.bucket if train else self.eval_bucket,
            pool_batches=self.pool_batches,
            pad_to_multiple_of=self.pad_to_multiple_of,
            shuffle=self.shuffle and train,
            drop_last=self.drop_last and train,
            seed=self.shuffle_seed,
            num_replicas=world,
            rank=rank,
        )

    # ------------------------------------------------------------------ inspection
    def encode(self, text: str) -> list[int]:
        """Token ids of a new text, as this module tokenizes (vocabulary and truncation)."""
        self._require_setup()
        records = TextRecords([text])
        flat, _ = self._tokenize(records)
        return flat.tolist()

    @property
    def vocab_size(self) -> int:
        """Ids the model must embed: the built-in vocabulary's size, the tokenizer's, or the
        largest id seen + 1."""
        self._require_setup()
        if self.vocab is not None:
            return len(self.vocab)
        declared = tokenizer_vocab_size(self.tokenizer)
        seen = max(
            (int(s.encoded.tokens.max()) + 1 for s in self._sources if s.encoded.tokens.numel()),
            default=1,
        )
        return max(declared or 0, seen, self.pad_id + 1)

    @property
    def num_classes(self) -> int | None:
        """Number of label ids (``len(label_names)``, or the largest int label + 1)."""
        self._require_setup()
        if self.label_names is not None:
            return len(self.label_names)
        labelled = [s.encoded.labels for s in self._sources if s.encoded.labels is not None]
        return max(int(t.max()) + 1 for t in labelled) if labelled else None

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The base state plus the vocabulary and label names (plain lists)."""
        state = super().state_dict()
        state["vocab"] = self.vocab.state() if self.vocab is not None else None
        state["label_names"] = self.label_names
        return state

    def _restore_extra_state(self, state_dict: dict[str, Any]) -> None:
        vocab_state = state_dict.get("vocab")
        label_names = state_dict.get("label_names")
        if vocab_state is not None and not isinstance(self.tokenizer, str):
            raise ValueError(
                "the checkpoint has a built-in vocabulary but this module uses the tokenizer "
                f"{describe_tokenizer(self.tokenizer)}: the ids would differ."
            )
        if not self._sources:  # before setup: used when setup runs
            self._pending_vocab = vocab_state
            self._pending_label_names = label_names
            return
        if label_names is not None and label_names != self.label_names:
            self._encode_labels(self._sources, label_names)
            for records in self._sources:
                records.encoded.labels = self._label_tensor(records)
        if vocab_state is not None:
            vocab = self._vocab_from_state(vocab_state)
            if vocab != self.vocab:
                self.vocab = vocab  # same lengths (same level and lowercase), new ids
                for records in self._sources:
                    records.encoded.set_tokens(self._tokenize(records)[0])
