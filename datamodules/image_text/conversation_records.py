"""Conversations about images read from shards, rendered into a store with their images.

A record (a tar sample of the webdataset layout, or a Parquet row) holds a conversation under
``messages_key`` and its images under the members or columns ``image_key`` names:

* the conversation is a list of messages (OpenAI / Hugging Face ``{"role", "content"}`` or
  ShareGPT ``{"from", "value"}``), or an object holding ``messages`` or ``conversations`` (the
  LLaVA form); a tar member holds it as JSON; a dotted key reaches into one
  (``"json.conversations"``). A message content that is a list of parts
  (``[{"type": "image"}, {"type": "text", "text": ...}]``) becomes text with an
  ``image_token`` where each image part is;
* the record's images are the members / columns of ``image_key`` present, in the order named
  (``"0.jpg;1.jpg;2.jpg"``, webdataset's numbering); a column may hold a list of images. An
  image is bytes, or Hugging Face's ``{"bytes", "path"}``.

:class:`ConversationReader` turns the records of one shard into render jobs (the messages, with
one ``image_token`` per image put before the first user message's content when the text has
none, and the image count) and keeps each record's encoded images aside;
:class:`ImageConversationRenderer` renders a job with the
:class:`~datamodules.conversations.ChatRenderer` and expands each placeholder into
``image_tokens`` image ids with no loss
(:func:`collates.image_placeholders.expand_image_placeholders`); a placeholder count that
differs from the record's images raises :class:`~datamodules.conversations.ConversationError`
naming the key, which the store builder prefixes with the shard and record number (or skips
and counts under ``on_error="skip"``).

:func:`build_conversation_store` renders every record of a split once (in ``tokenize_workers``
processes) into the token store (:mod:`datamodules.tokens.store`: ids and the per-token mask)
and writes the kept records' encoded images beside them (``images.bin``,
``image_offsets.npy``, ``record_images.npy``), so that later setups map both and batches read
any record's images at random without reading its shard again, and the kept records' keys
(``record_keys.bin``, UTF-8 one after the other, none for a Parquet row, and
``record_key_offsets.npy``, where each starts), so that an image that fails to decode in a
batch is named by its record's key.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from collates.image_placeholders import add_image_placeholder, expand_image_placeholders
from datamodules.conversations import ConversationError, normalize_messages
from datamodules.conversations.store_build import RecordChunk, rendered, store_meta
from datamodules.core.skipped import KEEP_MESSAGES
from datamodules.imaging.decoding import is_image_bytes
from datamodules.shards.records import read_records
from datamodules.shards.tar_fields import decode_field
from datamodules.tokens.store import StoredDocuments, StoreWriter, token_dtype
from datamodules.tokens.store_build import Progress, write_store

__all__ = [
    "IMAGE_FILES",
    "ConversationReader",
    "ImageConversationRenderer",
    "build_conversation_store",
]

#: The files a conversation store holds beside the token store's own.
IMAGE_FILES = (
    "images.bin", "image_offsets.npy", "record_images.npy", "record_keys.bin",
    "record_key_offsets.npy",
)  # fmt: skip
_CHUNK = 256  # records per render job


def _image_bytes(value: Any) -> bytes | None:
    """An image value's encoded bytes (bytes, or ``{"bytes", "path"}``), or None."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, Mapping) and isinstance(value.get("bytes"), (bytes, bytearray)):
        return bytes(value["bytes"])
    if isinstance(value, Mapping) and isinstance(value.get("path"), str) and value["path"]:
        with open(value["path"], "rb") as f:
            return f.read()
    return None


def _flatten_parts(messages: list[dict[str, Any]], image_token: str) -> list[dict[str, Any]]:
    """Contents that are lists of parts as text: each image part becomes ``image_token``."""
    out = []
    for number, message in enumerate(messages, start=1):
        content = message.get("content")
        if isinstance(content, list):
            text = []
            for part in content:
                kind = part.get("type") if isinstance(part, Mapping) else None
                if kind == "text":
                    text.append(str(part.get("text", "")))
                elif kind in ("image", "image_url"):
                    text.append(image_token)
                else:
                    raise ConversationError(
                        f"message {number} has a content part {part!r:.60}: accepted: "
                        "{'type': 'text', 'text': ...} and {'type': 'image'}"
                    )
            message = {**message, "content": "".join(text)}
        out.append(message)
    return out


class ConversationReader:
    """The render jobs and images of a shard's records (see the module docstring).

    Args:
        messages_key: The member or column of the conversation (a dotted key reaches into a
            JSON member).
        image_keys: The image members or columns, in the order of the record's images.
        image_token: The placeholder string.
        remote: The remote options of the shards.
        on_error: ``"raise"`` or ``"skip"`` (a record whose images are not images).
    """

    def __init__(
        self,
        messages_key: str,
        image_keys: Sequence[str],
        image_token: str,
        remote: Any,
        on_error: str,
    ) -> None:
        self.head, _, rest = messages_key.partition(".")
        self.path = rest.split(".") if rest else []
        self.messages_key = messages_key
        self.image_keys = tuple(image_keys)
        self.image_token = image_token
        self.remote, self.on_error = remote, on_error

    def messages(self, record: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The record's messages, normalised, placeholders where the text has none."""
        if self.head not in record or record[self.head] is None:
            keys = sorted(k for k in record if not str(k).startswith("__"))
            raise ConversationError(f"record has no {self.head!r} (it has {keys})")
        value = record[self.head]
        if isinstance(value, (bytes, bytearray, str)):  # a member (or column) of JSON text
            try:
                value = decode_field("json", value.encode() if isinstance(value, str) else value)
            except ValueError as error:
                raise ConversationError(f"{self.head!r} is not JSON: {error}") from None
        for step in self.path:
            if not isinstance(value, Mapping) or step not in value:
                raise ConversationError(f"{self.messages_key!r}: no {step!r} in the record")
            value = value[step]
        key = self.messages_key
        if isinstance(value, Mapping):
            found = next((k for k in ("messages", "conversations") if k in value), None)
            if found is None:
                raise ConversationError(
                    f"{key!r} is an object without 'messages' or 'conversations' (keys "
                    f"{sorted(value)})"
                )
            value, key = value[found], f"{key}.{found}"
        return _flatten_parts(normalize_messages(value, key), self.image_token)

    def images(self, record: Mapping[str, Any]) -> list[bytes]:
        """The record's encoded images, in the order of ``image_keys``."""
        out: list[bytes] = []
        for name in self.image_keys:
            value = record.get(name)
            if value is None:
                continue
            values = value if isinstance(value, (list, tuple)) else [value]
            for item in values:
                data = _image_bytes(item)
                if data is None or not is_image_bytes(data):
                    raise ConversationError(
                        f"{name!r} is not an encoded image ({type(item).__name__}: "
                        f"{bytes(data or b'')[:12]!r})"
                    )
                out.append(data)
        return out

    def chunks(
        self, shard: Any, bad: Callable[[str, str, str], None]
    ) -> Iterator[tuple[RecordChunk, dict[int, list[bytes]]]]:
        """``(render jobs, images by record number)`` of a shard, a chunk at a time. A record
        whose conversation or images cannot be read raises (``on_error="raise"``) or is given
        to ``bad(shard, where, why)``; record numbers count from 1."""
        unit = "record" if shard.fmt == "tar" else "row"
        records = read_records(
            shard.path, shard.fmt, self.on_error, index=shard, options=self.remote
        )
        jobs: list[Any] = []
        lines: list[int] = []
        images: dict[int, list[bytes]] = {}
        for number, record in enumerate(records, start=1):
            key = record.get("__key__", number) if isinstance(record, Mapping) else number
            try:
                if not isinstance(record, Mapping):
                    raise ConversationError(f"a record is a {type(record).__name__}")
                found = self.images(record)
                messages = self.messages(record)
                if found and not any(
                    self.image_token in str(m.get("content", "")) for m in messages
                ):
                    messages = add_image_placeholder(messages, self.image_token, len(found))
            except ConversationError as error:
                where = f"{shard.path}, {unit} {number}"
                if self.on_error == "raise":
                    raise ConversationError(f"{where}: key {key!r}: {error}") from None
                bad(shard.path, where, f"key {key!r}: {error}")
                continue
            jobs.append({"messages": messages, "images": len(found), "key": key})
            lines.append(number)
            images[number] = found
            if len(jobs) >= _CHUNK:
                yield RecordChunk(jobs, lines), images
                jobs, lines, images = [], [], {}
        if jobs:
            yield RecordChunk(jobs, lines), images


class ImageConversationRenderer:
    """Renders a job of :class:`ConversationReader` into ``(input_ids, trained)`` with each
    image placeholder expanded (picklable, for the render workers).

    Args:
        chat: The :class:`~datamodules.conversations.ChatRenderer`.
        placeholder_id: The id ``image_token`` renders as.
        image_tokens: Positions per image.
        image_token_id: The id repeated at image positions (None: ``placeholder_id``).
    """

    def __init__(
        self, chat: Any, placeholder_id: int, image_tokens: int, image_token_id: int | None = None
    ) -> None:
        self.chat = chat
        self.placeholder_id, self.image_tokens = placeholder_id, image_tokens
        self.image_token_id = placeholder_id if image_token_id is None else image_token_id
        self.vocab_size = chat.vocab_size

    def __call__(self, job: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        ids, trained = self.chat.render_messages(job["messages"])
        try:
            out = expand_image_placeholders(
                ids, trained, placeholder_id=self.placeholder_id,
                image_tokens=self.image_tokens, image_token_id=self.image_token_id,
                num_images=job["images"],
            )  # fmt: skip
        except ValueError as error:
            raise ConversationError(f"key {job['key']!r}: {error}") from None
        return out.input_ids, out.trained


def build_conversation_store(
    path: str,
    reader: ConversationReader,
    renderer: ImageConversationRenderer,
    shards: Sequence[Any],
    *,
    material: dict[str, Any],
    workers: int,
    ranks: tuple[int, int],
) -> StoredDocuments:
    """The store of a split's conversations at ``path``, mapped; rendered first when missing
    (see the module docstring)."""
    names = [s.path for s in shards]
    what = names[0] if len(names) == 1 else f"{len(names)} shards"
    on_error = reader.on_error

    def fill(writer: StoreWriter, progress: Progress) -> dict[str, Any]:
        first: list[tuple[str, str]] = []
        counts: dict[str, int] = {}

        def bad(name: str, where: str, why: str) -> None:
            counts[name] = counts.get(name, 0) + 1
            if len(first) < KEEP_MESSAGES:
                first.append((where, why))

        trained = 0
        empty = np.zeros(0, np.int64)
        writer.add(empty, empty, 0, [], empty)  # the mask file, even for no records
        image_offsets = [0]
        record_images = [0]
        key_offsets = [0]
        with (
            open(os.path.join(writer.tmp, "images.bin"), "wb") as blob,
            open(os.path.join(writer.tmp, "record_keys.bin"), "wb") as keys_file,
        ):

            def jobs() -> Iterator[tuple[RecordChunk, str, str, Any]]:
                for i, shard in enumerate(shards):
                    for chunk, images in reader.chunks(shard, bad):
                        pairs = zip(chunk.lines, chunk.records, strict=True)
                        keys = {n: job["key"] for n, job in pairs}
                        yield chunk, names[i], on_error, (i, images, keys)

            for (file, images, keys), (flat, lengths, mask, kept, failed, _) in rendered(
                renderer, jobs(), workers
            ):
                writer.add(flat, lengths, file, kept, mask)
                for line in kept:
                    key = keys[line]
                    text = b"" if isinstance(key, int) else str(key).encode(errors="replace")
                    keys_file.write(text)
                    key_offsets.append(key_offsets[-1] + len(text))
                    for data in images[line]:
                        blob.write(data)
                        image_offsets.append(image_offsets[-1] + len(data))
                    record_images.append(len(image_offsets) - 1)
                trained += int(mask.sum())
                for where, why in failed:
                    bad(names[file], where, why)
                progress.update(len(lengths), int(lengths.sum()))
        np.save(os.path.join(writer.tmp, "image_offsets.npy"), np.asarray(image_offsets, np.int64))
        np.save(os.path.join(writer.tmp, "record_images.npy"), np.asarray(record_images, np.int64))
        offsets = np.asarray(key_offsets, np.int64)
        np.save(os.path.join(writer.tmp, "record_key_offsets.npy"), offsets)
        meta = store_meta(material, names, workers, counts, first, trained)
        return {**meta, "images": len(image_offsets) - 1}

    return write_store(path, token_dtype(renderer.vocab_size), names, what, fill, ranks)
