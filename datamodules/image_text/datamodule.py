"""ImageTextDataModule: image-caption pairs from shards for contrastive (CLIP-style) training,
and conversations about images for vision-language models (``messages_key=``).

``ImageTextDataModule("shards/train-{000000..000099}.tar", tokenizer=tokenizer)`` reads what
img2dataset and webdataset write (tar shards of ``jpg`` + ``txt`` + ``json`` members) or
Parquet with an image column (bytes, or Hugging Face's ``Image``) and a caption column; local
or remote, globs, braces, dataset indexes and :class:`~datamodules.Source` mixtures, as streams
read them. Batches are ``{"image": uint8 (B, 3, H, W), "input_ids", "attention_mask"}`` (int64
``(B, max_length)``; ``tokenizer=None``: ``{"image", "text"}``, the captions as strings).

It is assembled from the stream parts (:mod:`datamodules.stream_parts`), not a subclass of
:class:`~datamodules.StreamingDataModule`: the splits (``dm.stream_splits``), the loaders and
train position (``dm.stream_loaders``), the image path of records (``dm.image_records``: the
image kinds' decoder, transforms and overrides, ``decode="scaled"``, uint8 batches in reused
shared memory, normalisation on the device), the captions (one of a list per epoch).
So each pair comes once per epoch across ranks and workers, batches are even under DDP, resume
is exact and elastic; a bad pair is named with its shard and key, and under ``on_error="skip"``
counted in :attr:`ImageTextDataModule.skipped`. Conversations add a part of their own
(``dm.conversations``, :mod:`~datamodules.image_text.conversations`): a store rendered once,
and map-style loaders over padded records or batches planned under two budgets.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch.utils.data import DataLoader

from datamodules.conversations.store_build import store_ranks
from datamodules.core.base import BaseDataModule
from datamodules.core.hardware import AUTO
from datamodules.core.keywords import shared_arguments
from datamodules.core.mix_logging import log_epoch_mix
from datamodules.core.mixture import Mixture, Source
from datamodules.core.skipped import Skipped
from datamodules.core.summary import counted, unsaved_lines
from datamodules.image_text.arguments import (
    check_caption_arguments,
    check_conversation_arguments,
)
from datamodules.image_text.captions import CaptionFields
from datamodules.image_text.conversations import ConversationParts
from datamodules.stream_engine.stream import ShardedStream
from datamodules.stream_parts.arguments import (
    check_files,
    check_mixing,
    check_stream_split_arguments,
)
from datamodules.stream_parts.assembly import stream_parts
from datamodules.stream_parts.image_records import (
    IMAGE_SHUFFLE_BUFFER,
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImageRecords,
    check_image_arguments,
    check_image_records,
)
from datamodules.stream_parts.splits import SPLITS, SplitsFingerprint
from datamodules.tokenizing.adapter import FixedLength, tokenizer_pad_id
from datamodules.tokenizing.loading import load_tokenizer

__all__ = ["ImageTextDataModule"]

# A list first, so that LightningCLI parses a JSON list as a list, not as one path.
Files = Sequence[Source] | Sequence[str | os.PathLike] | str | os.PathLike


class ImageTextDataModule(BaseDataModule):
    """Image-caption pairs from shards: ``ImageTextDataModule("train-*.tar", tokenizer=tok)``.

    Args:
        train_files: Shards of the train split: a path or URL, a glob, braces
            (``"train-{000000..000099}.tar"``), a directory, a dataset index
            (``*.index.json``), or a list of them; or a list of :class:`~datamodules.Source`
            mixed by ``weight`` (a number or a schedule) or ``repeat``. Tar shards
            (webdataset / img2dataset layout) or Parquet.
        val_files: Shards of the validation split (None: no validation).
        test_files: Shards of the test split (None: no test split).
        image_key: The image member or column, or alternatives tried in order
            (``"jpg;png;webp"``); bytes, or Hugging Face's ``{"bytes", "path"}``.
        text_key: The caption member or column; a dotted key reaches into a JSON member
            (``"json.caption"``). A caption that is a list gives one per epoch, in an order
            drawn from ``(shuffle_seed, key)``: n epochs use all n, a resume the same one.
        messages_key: Conversations about images: the member or column holding each record's
            messages (a list, or an object holding ``messages`` or ``conversations``; a
            dotted key reaches into a JSON member). Then ``image_key`` names the record's
            images in order (every one present counts: ``"0.jpg;1.jpg;2.jpg"``; a column may
            hold a list), each ``image_token`` in the text is the next image, and batches are
            padded (``batch_size`` records) or packed; see
            :mod:`~datamodules.image_text.conversations`. None: caption pairs.
        tokenizer: A transformers tokenizer, a ``tokenizers.Tokenizer`` or a callable
            ``text -> ids``, run in the workers: ``input_ids`` are ``tokenizer(text,
            truncation=True, max_length=max_length)["input_ids"]`` padded to ``max_length``
            with its pad id (:mod:`datamodules.tokenizing.adapter`); or a saved one's path (a
            folder, a ``tokenizer.json``). None: the captions as strings. Not saved.
        max_length: Tokens per caption (77, CLIP's context length).
        chat_template: Conversations: the template (None: the tokenizer's).
        train_on: Conversations: ``"assistant"``, ``"last"`` or ``"all"``, as ChatDataModule.
        image_token: Conversations: the placeholder, one token of the tokenizer; a record's
            text without one gets one per image before the first user message's content.
        image_tokens: Conversations: the copies of the image token's id each placeholder
            becomes, with no loss on them (None: 1, the placeholder itself).
        packing: Conversations: pack records whole into rows of ``seq_length``, best fit over
            tokens per row and ``max_images`` images per batch (``batch_size`` rows at most).
        seq_length: Conversations, packing: tokens per row.
        max_images: Conversations, packing: images per batch, at most (None: no budget).
        overlong: Conversations, packing: a record over ``seq_length`` or ``max_images`` is
            ``"drop"``-ped (counted), cut (``"truncate"``: its first tokens and the images
            whose tokens fit) or raises (``"error"``).
        image_size: What the default transforms produce (a square's side, or ``(height,
            width)``): RandomResizedCrop + flip to train, Resize + CenterCrop to evaluate.
        decode: ``"scaled"`` (default: JPEGs the transform shrinks 2x or more decode at a
            DCT scale) or ``"full"`` (:mod:`datamodules.imaging.scaled`).
        normalize: Subtract ``mean`` and divide by ``std`` after scaling to [0, 1], on the
            device.
        mean: Per-channel mean (ImageNet's by default).
        std: Per-channel standard deviation (ImageNet's by default).
        shuffle_buffer: Records each worker holds to shuffle the train split (None: 1,000).
        on_error: ``"raise"``: a bad pair raises, naming shard and key. ``"skip"``: left out
            of its batch and counted (:attr:`skipped`).
        storage_options: Passed to fsspec for remote shards (credentials are not saved).
        retries: Retries of a transient remote failure, resumed at the byte offset.
        timeout: Seconds a remote request may go without producing a byte.
        cache_dir: Keep remote shards in this directory (None: read them in place).
        cache_limit: Bytes (or ``"50GB"``) the cache may hold, least recently used evicted.
        prefetch_shards: Remote shards each worker downloads ahead of the one it reads.
        token_cache: Conversations: where their store (ids, masks, the records' images) is
            kept, keyed by the shards' versions and the renderer (None: the user cache;
            False: a temporary folder).
        tokenize_workers: Conversations: render processes at the first setup (``"auto"``).
        val_split: 0: pairs are not split at random (give ``val_files``); the same holds for
            ``test_split``, ``splits`` and ``stratify``.
        num_workers: As for :class:`~datamodules.BaseDataModule`; ``"auto"`` counts image-text
            pairs as decode work.
        train_transforms: Replaces the default train transform (on uint8 ``(3, H, W)``).
        eval_transforms: Replaces the default evaluation transform.

    Raises:
        TypeError, ValueError: For bad arguments, naming the argument and what is accepted.

    Example:
        >>> dm = ImageTextDataModule("shards/train-*.tar", tokenizer=tok)  # doctest: +SKIP
        >>> trainer.fit(model, datamodule=dm)  # doctest: +SKIP
    """

    work = "decode"
    hparams_ignore = (*BaseDataModule.hparams_ignore, "tokenizer")
    fingerprint = SplitsFingerprint()
    tunable = False  # (the tuner times index-sampled loaders)

    def __init__(
        self,
        train_files: Files | None = None,
        val_files: Files | None = None,
        test_files: Files | None = None,
        *,
        image_key: str = "jpg;png;webp",
        text_key: str = "txt",
        messages_key: str | None = None,
        tokenizer: Any = None,
        max_length: int = 77,
        chat_template: str | None = None,
        train_on: str = "assistant",
        image_token: str = "<image>",
        image_tokens: int | None = None,
        packing: bool = False,
        seq_length: int | None = None,
        max_images: int | None = None,
        overlong: str = "drop",
        image_size: int | tuple[int, int] = 224,
        decode: str = "scaled",
        normalize: bool = True,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        shuffle_buffer: int | None = None,
        on_error: str = "raise",
        storage_options: dict[str, Any] | None = None,
        retries: int = 5,
        timeout: float = 60.0,
        cache_dir: str | os.PathLike | None = None,
        cache_limit: int | str | None = None,
        prefetch_shards: int = 1,
        token_cache: str | os.PathLike | bool | None = None,
        tokenize_workers: int | str = "auto",
        batch_size: int = 32,
        val_split: int | float = 0,
        test_split: int | float = 0,
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
        check_stream_split_arguments(self)
        check_conversation_arguments(messages_key, locals())
        check_caption_arguments(text_key, max_length, shuffle_buffer, on_error)
        files = {
            "train": check_files(train_files, "train_files"),
            "val": check_files(val_files, "val_files"),
            "test": check_files(test_files, "test_files"),
        }
        if files["train"] is None:
            raise ValueError(
                "ImageTextDataModule needs data: train_files= (paths, URLs, globs or a dataset "
                "index of .tar or .parquet shards of image-caption pairs)."
            )
        check_mixing(files, None, None)  # evaluation sources are read once
        keys, _ = check_image_records(
            image_key, None, None, image_size, normalize, mean, std, None, decode
        )
        tokenizer = load_tokenizer(tokenizer)  # a path: the tokenizer saved there
        if tokenizer is not None and messages_key is None:
            FixedLength(tokenizer, max_length)  # refuses what is not a tokenizer, here
        self.image_key, self.text_key, self.messages_key = image_key, text_key, messages_key
        self.tokenizer, self.max_length = tokenizer, int(max_length)
        self.image_size, self.mean, self.std = check_image_arguments(image_size, mean, std)
        self.normalize, self.decode, self.on_error = normalize, decode, on_error
        self.files = files
        self.shuffle_buffer = IMAGE_SHUFFLE_BUFFER if shuffle_buffer is None else shuffle_buffer
        self._skips = Skipped()
        self._mix_logged: int | None = None
        #: The image path of the pairs: decoder, transforms, uint8 batches, device side.
        self.image_records = ImageRecords(
            keys, None, None, image_size, mean, std, normalize, decode, on_error
        )
        self.train_transforms, self.eval_transforms = self.image_records.default_transforms(
            self.train_transforms, self.eval_transforms
        )
        #: The remote options, the splits (shards, sources, mixtures) and the loaders.
        self.remote, self.stream_splits, self.stream_loaders = stream_parts(
            self, files, storage_options, retries, timeout, cache_dir, cache_limit,
            prefetch_shards, shuffle_buffer=self.shuffle_buffer, on_error=on_error,
        )  # fmt: skip
        self.packing, self.seq_length, self.max_images = packing, seq_length, max_images
        #: Conversations (``messages_key=``): store, views, samplers; None for captions.
        self.conversations: ConversationParts | None = None
        if messages_key is not None:
            self.conversations = ConversationParts(
                messages_key, keys, tokenizer, chat_template, train_on, image_token,
                image_tokens, packing, seq_length, max_images, overlong, on_error, token_cache,
                tokenize_workers, self.remote, self._ranks,
            )  # fmt: skip

    # ------------------------------------------------------------------ the stream's parts
    def split_parts(self, split: str, reader: Any) -> tuple[Any, Any, Callable[[list], Any]]:
        """``(reader, transform, collate)`` of a split's stream: records tagged with their
        shard, no record transform, the image collate with the captions."""
        transform = self.train_transforms if split == "train" else self.eval_transforms
        fields = CaptionFields(self.text_key, self.tokenizer, self.max_length, self.shuffle_seed)
        images = self.image_records
        return images.reader(reader), None, images.collate(transform, fields)

    @property
    def skipped(self) -> Skipped:
        """Bad pairs and unreadable shards left out under ``on_error="skip"`` (a
        :class:`~datamodules.core.skipped.Skipped`), with what the workers left out so far;
        with conversations, the records that could not be read or rendered too."""
        skipped = self.image_records.drain(self._skips)
        if self.conversations is not None:
            return self.conversations.with_skipped(skipped)
        return skipped

    # ------------------------------------------------------------------ conversations
    def _ranks(self) -> tuple[int, int]:
        return store_ranks(self._trainer())

    def _conversation_split(self, split: str) -> Any:
        return self.conversations.records(self.stream_splits, split)  # type: ignore[union-attr]

    def build_dataset(self) -> Any:
        """Conversations: the train records, rendered into their store (or mapped)."""
        self.stream_splits.setup(None)  # (refuses train shards without records)
        return self._conversation_split("train")

    def split_sources(self) -> dict[str, Any]:
        """Conversations: the records of ``val_files`` and ``test_files``."""
        found = {s: self._conversation_split(s) for s in ("val", "test")}
        return {s: d for s, d in found.items() if d is not None}

    def make_view(self, split: str, dataset: Any, indices: Any) -> Any:
        """Conversations: padded records, or the split's planned packed batches."""
        return self.conversations.view(self, split, dataset, indices)  # type: ignore[union-attr]

    def make_sampler(self, split: str, view: Any, rank: int, world: int) -> Any:
        """Conversations: batches of records, or planned batches, one a step."""
        return self.conversations.sampler(self, split, view, rank, world)  # type: ignore

    @property
    def image_token_id(self) -> int:
        """Conversations: the id at image positions (``input_ids == image_token_id``)."""
        if self.conversations is None:
            raise AttributeError("image_token_id: caption pairs have no image tokens.")
        return self.conversations.image_token_id

    @property
    def pad_id(self) -> int:
        """The id written at padding: the tokenizer's pad id, else EOS, else 0."""
        parts = self.conversations
        return tokenizer_pad_id(self.tokenizer) if parts is None else int(parts.chat.pad_id)

    @property
    def vocab_size(self) -> int:
        """Conversations: ids the model must embed, ``len(tokenizer)``."""
        if self.conversations is None:
            raise AttributeError("vocab_size: give messages_key= (conversations).")
        return int(self.conversations.chat.vocab_size)

    # ------------------------------------------------------------------ splits
    def setup(self, stage: str | None = None) -> None:
        """Lists and indexes the shards of the splits ``stage`` needs (every split for None;
        :meth:`~datamodules.stream_parts.splits.ShardSplits.setup`).

        Raises:
            ValueError: A ``*_files`` argument matches nothing, the train shards hold no
                records, or a Parquet shard has no column ``text_key`` names.
        """
        if self.conversations is not None:
            BaseDataModule.setup(self, stage)
            self.conversations.announce_overlong()
            return
        self.stream_splits.setup(stage)
        head = self.text_key.partition(".")[0]
        for split, shards in self.stream_splits.shards.items():
            for shard in shards:
                columns = getattr(shard, "columns", None)
                if shard.fmt == "parquet" and columns and head not in columns:
                    raise ValueError(
                        f"{split}_files: {shard.path} has no column {head!r} (text_key="
                        f"{self.text_key!r}); its columns are {list(columns)}."
                    )

    shards = property(lambda self: self.stream_splits.shards, doc="Shards per split (setup).")

    def mixture(self, split: str) -> Mixture | None:
        """A split's mix (:meth:`~datamodules.stream_parts.splits.ShardSplits.mixture`;
        conversations: of its batches)."""
        if self.conversations is not None:
            return getattr(self.view(split), "mixture", None) if self.split_size(split) else None
        return self.stream_splits.mixture(split)

    def quotas(self, epoch: int, split: str = "train") -> dict[str, int]:
        """The pairs (conversations: batches) each source gives in ``epoch``
        (:meth:`~datamodules.stream_parts.splits.ShardSplits.quotas`)."""
        mixture = self.mixture(split) if self.conversations is not None else None
        return (
            self.stream_splits.quotas(epoch, split) if mixture is None else mixture.by_name(epoch)
        )

    def split_size(self, split: str) -> int:
        """Pairs per epoch in ``"train"``, ``"val"`` or ``"test"`` (0 when not given;
        conversations: the records kept)."""
        if self.conversations is not None:
            return BaseDataModule.split_size(self, split)
        epoch = self.stream_loaders.current_epoch(self._trainer())
        return self.stream_splits.split_size(split, epoch)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The train shards' fingerprint, the split sizes and the train stream's position
        (conversations: the train sampler's position over its planned batches)."""
        if self.conversations is not None:
            return BaseDataModule.state_dict(self)
        return self.stream_loaders.state_dict(self.stream_loaders.current_epoch(self._trainer()))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores the train position, also on another world size, worker count or batch
        size (:meth:`~datamodules.stream_parts.loaders.StreamLoaders.load_state_dict`)."""
        if self.conversations is not None:
            BaseDataModule.load_state_dict(self, state_dict)
            return
        self.stream_loaders.load_state_dict(state_dict, self._rank_world()[0])

    # ------------------------------------------------------------------ loaders
    def make_stream(self, split: str, rank: int, world: int) -> ShardedStream:
        """The :class:`~datamodules.stream_engine.stream.ShardedStream` of a split for a rank."""
        return self.stream_loaders.make_stream(self, split, rank, world, self.split_parts)

    def make_loader(self, split: str) -> DataLoader | None:
        """The loader of a split (see :class:`~datamodules.stream_parts.loaders.StreamLoaders`;
        conversations: the map-style loader of the split's view and sampler)."""
        if self.conversations is not None:
            return BaseDataModule.make_loader(self, split)
        return self.stream_loaders.make_loader(self, split, self.split_parts)

    def train_dataloader(self) -> DataLoader:
        """The train loader: shuffled per epoch, disjoint and even across ranks, resumable."""
        if self.conversations is not None:
            return BaseDataModule.train_dataloader(self)
        loader = self.make_loader("train")
        assert loader is not None
        return loader

    def val_dataloader(self) -> DataLoader | list:
        """The validation loader, or an empty list without validation pairs."""
        if self.conversations is not None:
            return BaseDataModule.val_dataloader(self)
        loader = self.stream_loaders.split_loader(self, "val", self.split_parts)
        return [] if loader is None else loader

    def test_dataloader(self) -> DataLoader | list:
        """The test loader."""
        if self.conversations is not None and self.split_size("test"):
            return BaseDataModule.make_loader(self, "test")
        loader = self.stream_loaders.split_loader(self, "test", self.split_parts)
        if loader is None:
            raise ValueError(f"{type(self).__name__} has no test pairs: pass test_files=.")
        return loader

    def predict_dataloader(self) -> DataLoader:
        """A loader over the test pairs, else the validation pairs."""
        if self.conversations is not None:
            return BaseDataModule.predict_dataloader(self)
        return self.stream_loaders.predict_loader(self, self.split_parts)

    # ------------------------------------------------------------------ batches on the device
    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Logs the epoch's mix (``mix/<name>``) at its first train batch."""
        self._mix_logged = log_epoch_mix(self._trainer(), self._mix_logged, self)
        return super().on_before_batch_transfer(batch, dataloader_idx)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """uint8 images to float in [0, 1], normalised, on the device."""
        return self.image_records.on_device(self, batch, dataloader_idx)

    # ------------------------------------------------------------------ summary
    def describe_data(self) -> list[str]:
        """Per split: shards and pairs (for ``python -m datamodules inspect``)."""
        self.setup()
        if self.conversations is not None:
            return self.stream_splits.describe("records") + self.conversations.lines()
        return self.stream_splits.describe("pairs")

    def summary(self) -> str:
        """Shards, pairs and batches per split, loader settings with reasons, bad pairs
        (conversations: records, tokens and images per split, and packing's two
        efficiencies)."""
        if self.conversations is not None:
            return BaseDataModule.summary(self)
        lines = [type(self).__name__]
        world = self._rank_world()[1]
        if not self.shards:
            lines.append("  shards: not indexed yet (call setup())")
        for split in SPLITS:
            shards = self.shards.get(split)
            if not shards:
                lines.extend([] if shards is None else [f"  {split}: none"])
                continue
            n = self.split_size(split)
            formats = ", ".join(sorted({s.fmt for s in shards}))
            lines.append(
                f"  {split}: {counted(len(shards), 'shard')} ({formats}), {counted(n, 'pair')}"
                f" per epoch, batches of <= {self.batch_size} per rank (world={world})"
            )
        settings = self._settings.get("train") or self.loader_settings("train")
        for key in ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor"):
            lines.append(f"  {key}={getattr(settings, key)!r}: {settings.reasons[key]}")
        lines.append(f"  bad pairs: on_error={self.on_error!r}; {self.skipped.summary()}")
        tokens = (
            "captions as strings ('text')"
            if self.tokenizer is None
            else f"input_ids + attention_mask of {self.max_length} tokens"
        )
        labels = f"captions {self.text_key!r}: {tokens}"
        lines.extend(
            self.image_records.lines(
                self.image_key, self.train_transforms, self.eval_transforms, labels
            )
        )
        lines.extend(unsaved_lines(self))
        return "\n".join(lines)

    def extra_summary(self) -> list[str]:
        """Conversations: the records, their store and plans, bad records and the images."""
        assert self.conversations is not None
        lines = self.conversations.lines()
        lines.append(f"  bad records: on_error={self.on_error!r}; {self.skipped.summary()}")
        return lines + self.image_records.lines(
            self.image_key, self.train_transforms, self.eval_transforms, "conversations"
        )

    def __getstate__(self) -> dict[str, Any]:
        """Pickles without the Trainer (for ``spawn`` workers; the loaders drop their own)."""
        return {**super().__getstate__(), "trainer": None}
