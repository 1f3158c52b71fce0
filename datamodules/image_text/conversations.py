"""The conversations of ImageTextDataModule (``messages_key=``): a part with its own state.

:class:`ConversationParts` holds what decides the conversations about images (the
:class:`~datamodules.conversations.ChatRenderer`, the placeholder and its expansion, the image
members, packing and its two budgets, ``overlong`` and where the store lives) and gives, per
split, the records (:meth:`ConversationParts.documents`, rendered once into a store keyed by the
shards' versions and the renderer's fingerprint,
:mod:`~datamodules.image_text.conversation_records`), the split's batch view and its sampler
(:mod:`~datamodules.image_text.conversation_views`) and the summary's lines. The DataModule
composes it with the stream's splits (which list and index the shards) and the image path of
records (the transforms, ``decode``, the device normalisation); the loaders are the map-style
ones of :class:`~datamodules.BaseDataModule`, since a plan over both budgets needs every
record's length and image count before the epoch starts.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from typing import Any

import torch

from datamodules.conversations import ChatRenderer
from datamodules.conversations.store_build import count_store_skips, render_workers
from datamodules.core.checks import check_int
from datamodules.core.overlong import OverlongReport
from datamodules.core.samplers import IndexBatchSampler
from datamodules.core.skipped import Skipped
from datamodules.core.summary import counted
from datamodules.image_text.conversation_mixtures import (
    ConversationBlend,
    MixedConversationView,
)
from datamodules.image_text.conversation_pixels import BatchPixels
from datamodules.image_text.conversation_records import (
    ConversationReader,
    ImageConversationRenderer,
    build_conversation_store,
)
from datamodules.image_text.conversation_views import (
    BudgetBatches,
    ImageConversations,
    PackedConversationView,
    PaddedConversationView,
    PlannedBatchSampler,
    image_efficiency_line,
)
from datamodules.remote.listing import cache_root
from datamodules.tokens.mixture import MixedSampler
from datamodules.tokens.store import store_key

__all__ = ["STORE_VERSION", "ConversationParts", "image_token_ids"]

#: Bumped when what the store holds for the same inputs changes.
STORE_VERSION = 2


def image_token_ids(tokenizer: Any, image_token: str) -> int:
    """The one id ``image_token`` encodes as with ``tokenizer``.

    Raises:
        ValueError: The string is not one token of the tokenizer, with how to add it.
    """
    encode = getattr(tokenizer, "encode", None)
    ids = list(encode(image_token, add_special_tokens=False)) if encode is not None else []
    if len(ids) != 1:
        raise ValueError(
            f"image_token={image_token!r} is not one token of the tokenizer (it encodes as "
            f"{ids}): add it as a special token, e.g. tokenizer.add_special_tokens("
            f"{{'additional_special_tokens': [{image_token!r}]}}), and size the model's "
            "embeddings to len(tokenizer)."
        )
    return int(ids[0])


class ConversationParts:
    """Conversations about images: store, views and samplers (see the module docstring).

    Args:
        messages_key: The member or column of the conversation.
        image_keys: The image members or columns, in the order of a record's images.
        tokenizer: A transformers tokenizer (or ``tokenizers.Tokenizer`` with
            ``chat_template``).
        chat_template: The template (None: the tokenizer's).
        train_on: ``"assistant"``, ``"last"`` or ``"all"``.
        image_token: The placeholder string (one token of the tokenizer).
        image_tokens: Positions each placeholder becomes (None: 1, the placeholder itself).
        packing: Pack records into rows of ``seq_length`` under both budgets.
        seq_length: Tokens per row.
        max_images: Images per batch, at most (None: no image budget).
        overlong: ``"drop"``, ``"truncate"`` or ``"error"``.
        on_error: ``"raise"`` or ``"skip"`` records that cannot be read or rendered.
        token_cache: Where stores live (None: the user cache; False: a temporary folder).
        tokenize_workers: Render processes (``"auto"`` or an int; 0: this process).
        remote: The remote options of the shards.
        ranks: Returns ``(local rank, global rank)`` when a store is opened.
    """

    def __init__(
        self, messages_key: str, image_keys: tuple[str, ...], tokenizer: Any,
        chat_template: str | None, train_on: str, image_token: str, image_tokens: int | None,
        packing: bool, seq_length: int | None, max_images: int | None, overlong: str,
        on_error: str, token_cache: Any, tokenize_workers: Any, remote: Any, ranks: Any,
    ) -> None:  # fmt: skip
        self.chat = ChatRenderer(tokenizer, chat_template=chat_template, train_on=train_on)
        self.placeholder_id = image_token_ids(self.chat.tokenizer, image_token)
        self.image_tokens = 1 if image_tokens is None else int(image_tokens)
        self.renderer = ImageConversationRenderer(self.chat, self.placeholder_id, self.image_tokens)
        self.reader = ConversationReader(messages_key, image_keys, image_token, remote, on_error)
        self.messages_key, self.image_keys, self.image_token = messages_key, image_keys, image_token
        self.packing, self.seq_length, self.max_images = packing, seq_length, max_images
        self.overlong, self.on_error = overlong, on_error
        #: The words and the one warning for records over a budget.
        self.overlong_report = OverlongReport("ImageTextDataModule", "record", overlong)
        check_int(tokenize_workers, "tokenize_workers", 0, words=("auto",))
        self.tokenize_workers, self.ranks = tokenize_workers, ranks
        if token_cache is False:
            directory = tempfile.mkdtemp(prefix="image-text-tokens-")
            weakref.finalize(self, shutil.rmtree, directory, True)
        else:
            directory = os.fspath(token_cache or cache_root("tokens"))
        self.directory = directory
        #: Records left out under ``on_error="skip"``, from every store opened.
        self.skipped = Skipped()
        self._counted: set[str] = set()
        self._docs: dict[str, ImageConversations] = {}
        self._batches: dict[str, BudgetBatches] = {}

    @property
    def image_token_id(self) -> int:
        """The id at image positions (the placeholder's own, as Hugging Face's LLaVA has it)."""
        return self.placeholder_id

    # ------------------------------------------------------------------ records
    def records(self, splits: Any, split: str) -> ImageConversations | ConversationBlend | None:
        """A split's records from the stream's indexed shards (``splits``: the
        :class:`~datamodules.stream_parts.splits.ShardSplits`): one store, or a blend of one
        per :class:`~datamodules.Source`; None when the split has no records."""
        shards = splits.shards.get(split)
        if not shards or not sum(shards.counts):
            return None
        mixes = [m for m in splits.mixes.get(split, []) if not m.hidden]
        if not mixes:
            return self.documents(split, shards)
        parts = [
            self.documents(f"{split} ({m.source.label})", [shards[k] for k in m.shards])
            for m in mixes
        ]
        return ConversationBlend(parts, [m.source.label for m in mixes], [m.source for m in mixes])

    def documents(self, split: str, shards: Any) -> ImageConversations:
        """Records after ``overlong`` (of a split, or of one source of it: ``split`` names
        it), rendered into their store first when missing."""
        if split in self._docs:
            return self._docs[split]
        material = {
            "kind": "image-text conversations",
            "version": STORE_VERSION,
            "renderer": self.chat.fingerprint(),
            "messages_key": self.messages_key,
            "image_keys": list(self.image_keys),
            "image_token": self.image_token,
            "image_tokens": self.image_tokens,
            "on_error": self.on_error,
            "inputs": [[s.path, s.version, s.count] for s in shards],
        }
        path = os.path.join(self.directory, store_key(material))
        store = build_conversation_store(
            path, self.reader, self.renderer, list(shards), material=material,
            workers=render_workers(self.tokenize_workers), ranks=self.ranks(),
        )  # fmt: skip
        count_store_skips(self.skipped, store, self._counted)
        limit = self.seq_length if self.packing else None
        images = self.max_images if self.packing else None
        docs = ImageConversations(
            store, self.image_token_id, self.image_tokens, limit, images, self.overlong
        )
        self._docs[split] = docs
        return docs

    def with_skipped(self, skipped: Skipped) -> Skipped:
        """``skipped`` (the shards' bad records) and the records left out here, in one."""
        both = Skipped()
        for part in (skipped, self.skipped):
            for name, count in part.counts.items():
                both.add(name, count, [(w, y) for w, y in part if w.startswith(name)])
            for name, error in part.unreadable.items():
                both.add(name, 0, error=error)
        return both

    # ------------------------------------------------------------------ views and samplers
    def view(
        self, dm: Any, split: str, docs: ImageConversations, indices: torch.Tensor
    ) -> PaddedConversationView | PackedConversationView:
        """The split's batch view: padded records, or its planned packed batches; a blend's
        batches of one source each, as the mix draws them."""
        if isinstance(docs, ConversationBlend):
            return MixedConversationView(dm, docs, self, split)
        pixels = self.pixels(dm, split)
        if not self.packing:
            return PaddedConversationView(docs, indices, pixels, self.chat.pad_id)
        if split not in self._batches:
            assert self.seq_length is not None
            self._batches[split] = BudgetBatches(
                docs, indices, self.seq_length, dm.batch_size, self.max_images,
                shuffle=dm.shuffle and split == "train", seed=dm.shuffle_seed,
            )  # fmt: skip
        return PackedConversationView(docs, self._batches[split], pixels, self.chat.pad_id)

    def pixels(self, dm: Any, split: str) -> BatchPixels:
        """A split's image path: its transform, ``decode``, and ``on_error`` with the
        DataModule's skip channel (records left out in workers counted in ``dm.skipped``)."""
        return BatchPixels(
            dm.transform_for(split), dm.decode, dm.image_size, self.on_error,
            dm.image_records.channel(),
        )  # fmt: skip

    def sampler(self, dm: Any, split: str, view: Any, rank: int, world: int) -> Any:
        """The split's sampler: records in batches of ``batch_size``, or planned batches."""
        train = split == "train"
        if isinstance(view, MixedConversationView):
            sampler = MixedSampler(
                view.mixture, 1, shuffle=dm.shuffle and train, drop_last=dm.drop_last and train,
                seed=dm.shuffle_seed, num_replicas=world, rank=rank,
            )  # fmt: skip
            sampler.unit = "batch"
            sampler.resume = view.continue_mix  # a changed mix continues in the view too
            return sampler
        if isinstance(view, PackedConversationView):
            return PlannedBatchSampler(
                view.batches, shuffle=dm.shuffle and train, drop_last=dm.drop_last and train,
                seed=dm.shuffle_seed, num_replicas=world, rank=rank,
            )  # fmt: skip
        return IndexBatchSampler(
            len(view), dm.batch_size, shuffle=dm.shuffle and train,
            drop_last=dm.drop_last and train, seed=dm.shuffle_seed, num_replicas=world, rank=rank,
        )  # fmt: skip

    # ------------------------------------------------------------------ summary
    @property
    def _limits(self) -> str:
        return f"seq_length={self.seq_length} or max_images={self.max_images}"

    @staticmethod
    def _cut(docs: list[ImageConversations]) -> str:
        tokens, images = sum(d.cut_tokens for d in docs), sum(d.cut_images for d in docs)
        return f"{tokens:,} tokens, {images} images"

    def announce_overlong(self) -> None:
        """Warns once, on rank 0, of the records over a budget in every store opened."""
        docs = list(self._docs.values())
        count = sum(d.overlong for d in docs)
        self.overlong_report.announce(count, self._limits, self._cut(docs))

    def lines(self) -> list[str]:
        """The summary's lines: rendering, records, tokens and images per split, overlong
        records, and (packing) each split's plan with both efficiencies."""
        how = (
            f"packed into rows of {self.seq_length} tokens, "
            f"{'no image budget' if self.max_images is None else f'<= {self.max_images} images'}"
            " a batch"
            if self.packing
            else "padded"
        )
        lines = [
            f"  conversations {self.messages_key!r}, images {'; '.join(self.image_keys)!r}: "
            f"train_on={self.chat.train_on!r}, each {self.image_token!r} -> {self.image_tokens} "
            f"x id {self.image_token_id}; {how}"
        ]
        for split, docs in self._docs.items():
            lines.append(
                f"  {split} records: {counted(len(docs), 'conversation')}, {docs.num_tokens:,} "
                f"tokens, {docs.num_images:,} images (store {docs.path})"
            )
            if docs.overlong:
                line = self.overlong_report.line(docs.overlong, self._limits, self._cut([docs]))
                lines.append(f"  {split} overlong: {line}")
        for split, batches in self._batches.items():
            lines.append(image_efficiency_line(batches, split))
        return lines
