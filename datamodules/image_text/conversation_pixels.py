"""The images of a batch of conversations, decoded in a worker; a record whose image does not
decode is named or left out.

The store keeps each record's images encoded, checked at setup by their magic bytes only; they
are decoded when a batch is made (:class:`~datamodules.imaging.scaled.ImageDecoder`) and
written through the split's transform into one uint8 batch
(:class:`~datamodules.imaging.batches.ImageBatchWriter`). An image that does not decode (a
JPEG cut short, corrupt bytes behind valid magic bytes):

* ``on_error="raise"``: raises :class:`~datamodules.imaging.decoding.ImageDecodeError` naming
  the record (its shard, record or row number, and key) and which of its images;
* ``on_error="skip"``: its whole record (tokens and images) is left out of the batch and sent
  to the DataModule's ``dm.skipped``
  (:class:`~datamodules.core.skipped.SkipChannel`), as the image kinds leave out a bad
  sample. A batch whose records are all bad holds one good record instead of being empty
  (every rank keeps its number of batches): the split's next record after the batch's last
  whose images decode, the same in a run resumed anywhere, reported in ``dm.skipped`` as
  repeated; only a split without any such record raises.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from datamodules.core.skipped import SkipChannel, where_in
from datamodules.imaging.batches import ImageBatchWriter
from datamodules.imaging.decoding import ImageDecodeError
from datamodules.imaging.scaled import ImageDecoder
from datamodules.imaging.transforms import as_height_width

__all__ = ["FILLED", "BatchPixels"]

#: Why the record that fills a batch of only bad records is in ``dm.skipped``.
FILLED = "repeated to fill a batch whose records were all bad"


class BatchPixels:
    """The images of a batch's records (see the module docstring); picklable for workers.

    Args:
        transform: The split's transform on uint8 ``(3, H, W)`` images.
        decode: ``"scaled"`` or ``"full"``.
        image_size: What the transform produces (for a batch without images).
        on_error: ``"raise"`` or ``"skip"`` a record whose images do not decode.
        skips: Where skipped records are sent (``"skip"``; None: not sent).
    """

    def __init__(
        self, transform: Any, decode: str, image_size: Any, on_error: str = "raise",
        skips: SkipChannel | None = None,
    ) -> None:  # fmt: skip
        self.transform, self.decode = transform, decode
        self.size = as_height_width(image_size)
        self.on_error, self.skips = on_error, skips
        self._decoder: ImageDecoder | None = None

    @property
    def decoder(self) -> ImageDecoder:
        """The decoder (made in the worker that first needs it)."""
        if self._decoder is None:
            self._decoder = ImageDecoder(self.transform, self.decode)
        return self._decoder

    def __call__(self, docs: Any, records: Sequence[int]) -> tuple[torch.Tensor, list[int]]:
        """``(pixel_values, the records kept)``: the images of ``records`` of ``docs`` (an
        :class:`~datamodules.image_text.conversation_views.ImageConversations`) in order,
        those of a record left out under ``"skip"`` missing from both."""
        capacity = sum(int(docs.images[r]) for r in records)
        writer = ImageBatchWriter(capacity, self.transform)
        kept = []
        for record in records:
            decoded = self.record(docs, record, quiet=False)
            if decoded is None:
                continue
            for image, own in decoded:
                writer.add(image, own)
            kept.append(record)
        if writer.count == 0:
            return torch.zeros((0, 3, *self.size), dtype=torch.uint8), kept
        return writer.batch(), kept

    def record(self, docs: Any, record: int, quiet: bool) -> list[tuple[Any, Any]] | None:
        """The decoded images of one record (each ``(image, its own transform)``), or None
        when one does not decode under ``"skip"`` (sent to ``dm.skipped`` unless ``quiet``).

        Raises:
            ImageDecodeError: Under ``"raise"``, naming the record and the image.
        """
        found = docs.image_bytes(record)
        out = []
        for k, data in enumerate(found):
            try:
                out.append(self.decoder.bytes(data, docs.where(record)))
            except ImageDecodeError as error:
                where = where_in(*docs.place(record))
                reason = error.reason or str(error)
                why = f"image {k + 1} of {len(found)} does not decode: {reason}"
                if self.on_error == "raise":
                    raise ImageDecodeError(f"{where}: {why}", path=where, reason=reason) from None
                if not quiet:
                    self.send(docs, record, why)
                return None
        return out

    def send(self, docs: Any, record: int, why: str) -> None:
        """Sends a record to ``dm.skipped`` (``why``: the reason, or :data:`FILLED`)."""
        if self.skips is not None:
            shard, place = docs.place(record)
            self.skips.send(shard, place, why)

    def fill(self, docs: Any, candidates: Iterable[int]) -> int:
        """The first of ``candidates`` (records, in the split's order after the batch's last)
        whose images decode, reported as repeated; the bad ones met are not sent again
        (their own batches report them).

        Raises:
            ImageDecodeError: No candidate's images decode.
        """
        for record in candidates:
            if self.record(docs, record, quiet=True) is not None:
                self.send(docs, record, FILLED)
                return record
        raise ImageDecodeError(
            f"on_error='skip' left out every record of a batch and found no record in "
            f"{docs.path} whose images decode to fill it"
        )

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_decoder": None}
