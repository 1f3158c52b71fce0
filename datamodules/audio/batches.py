"""Audio batches: a split of a :class:`~datamodules.audio.clips.ClipIndex`, decoded a batch at a
time into padded waveforms with masks, lengths and labels or transcripts.

A batch is a dict:

* ``input_values`` float32 ``(B, T)`` (``(B, C, T)`` with ``mono=False``), zero-padded; int16
  when every clip of the batch is 16-bit PCM at the target rate with nothing to resample, average
  or transform (half the bytes to move, nothing lost): :func:`float_waveforms` makes it the
  exact float32 on the device (``on_after_batch_transfer``);
* ``attention_mask`` int64 ``(B, T)``: 1 on samples, 0 on padding;
* ``lengths`` int64 ``(B,)``: samples of each clip;
* ``label`` int64 ``(B,)`` for classes; ``labels`` int64 ``(B, L)`` (token ids, -100 padded)
  for transcripts with a tokenizer, else ``text`` (a list of strings).

Every clip comes out exactly as long as the index says (a manifest's duration rounded at the
target rate: a resampled segment is cut or zero-padded by at most a sample or two), so a batch
is as large as its sampler planned. Clips over ``max_seconds`` with ``overlong="truncate"`` are
read as a crop of ``max_seconds``: random in training, centred in evaluation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from datamodules.audio.clips import ClipIndex
from datamodules.audio.decoding import AudioDecodeError, AudioDecoder
from datamodules.core.skipped import SkipChannel
from datamodules.core.views import SplitView

__all__ = ["PCM16_SCALE", "AudioBatchView", "encode_texts", "float_waveforms", "pad_waveforms"]

#: int16 samples / this = soundfile's float32 reading of 16-bit PCM (exact in float32).
PCM16_SCALE = 32768.0


def encode_texts(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Token ids of each text: a ``tokenizers.Tokenizer`` (``encode_batch``) or a
    ``transformers`` tokenizer (called on the list)."""
    if hasattr(tokenizer, "encode_batch") and not callable(getattr(tokenizer, "pad", None)):
        return [encoding.ids for encoding in tokenizer.encode_batch(texts)]
    return [list(ids) for ids in tokenizer(texts)["input_ids"]]


def float_waveforms(batch: dict[str, Any]) -> dict[str, Any]:
    """The batch with int16 ``input_values`` made float32 where they are (the device), exactly
    the float32 the decoder would have given; float32 ones stay as they are."""
    values = batch.get("input_values")
    if isinstance(values, torch.Tensor) and values.dtype == torch.int16:
        batch["input_values"] = values.to(torch.float32) / PCM16_SCALE
    return batch


def pad_waveforms(waves: list[np.ndarray]) -> dict[str, torch.Tensor]:
    """``input_values`` (zero-padded), ``attention_mask`` and ``lengths`` of clips ``(T,)`` or
    ``(C, T)``: int16 when every clip is int16, else float32 (int16 clips scaled)."""
    channels = {w.shape[:-1] for w in waves}
    if len(channels) > 1:
        raise ValueError(
            f"clips of one batch have different channel counts {sorted(c[0] for c in channels)} "
            "(mono=False keeps each file's channels): use mono=True, or files of one layout."
        )
    lengths = torch.tensor([w.shape[-1] for w in waves], dtype=torch.int64)
    longest = int(lengths.max()) if len(waves) else 0
    shape = (len(waves), *waves[0].shape[:-1], longest) if waves else (0, 0)
    pcm16 = all(w.dtype == np.int16 for w in waves)
    if not pcm16:
        waves = [w.astype(np.float32) / np.float32(PCM16_SCALE) if w.dtype == np.int16 else w
                 for w in waves]  # fmt: skip
    values = torch.zeros(shape, dtype=torch.int16 if pcm16 and waves else torch.float32)
    for i, wave in enumerate(waves):
        values[i, ..., : wave.shape[-1]] = torch.from_numpy(wave)
    mask = (torch.arange(longest)[None, :] < lengths[:, None]).to(torch.int64)
    return {"input_values": values, "attention_mask": mask, "lengths": lengths}


class AudioBatchView(SplitView):
    """Decodes one batch of clips of a split and collates it (see the module's docstring).

    Args:
        index: The clips.
        indices: Positions of the split's clips in ``index``.
        decoder: Reads the clips.
        transform: Applied to each decoded waveform (a float32 tensor), or None.
        train: Random crops (training) rather than centred ones.
        max_seconds: Clips longer than this are cropped to it (``overlong="truncate"``).
        tokenizer: Encodes transcripts into ``labels``; None gives ``text`` strings.
        on_error: ``"raise"`` or ``"skip"`` (the clip is left out of its batch and sent to
            ``skips``).
        skips: Where workers report skipped clips.
        seed: Seeds the random crops (with the clip and a per-view draw count).
    """

    def __init__(
        self,
        index: ClipIndex,
        indices: torch.Tensor,
        decoder: AudioDecoder,
        transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
        *,
        train: bool = False,
        max_seconds: float | None = None,
        tokenizer: Any = None,
        on_error: str = "raise",
        skips: SkipChannel | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(indices, transform)
        self.index, self.decoder, self.train = index, decoder, train
        self.max_seconds, self.tokenizer = max_seconds, tokenizer
        self.on_error, self.skips = on_error, skips
        self.rng = np.random.default_rng(seed)

    def segment(self, row: int) -> tuple[float, float]:
        """The ``(offset, duration)`` seconds read for clip ``row`` (a crop when overlong)."""
        offset, duration = float(self.index.offsets[row]), float(self.index.durations[row])
        if self.max_seconds is not None and duration > self.max_seconds:
            spare = duration - self.max_seconds
            offset += float(self.rng.uniform(0, spare)) if self.train else spare / 2
            duration = self.max_seconds
        return offset, duration

    def decode(self, row: int) -> np.ndarray | None:
        """Clip ``row`` exactly ``index.lengths[row]`` samples long; None if skipped."""
        index = self.index
        offset, duration = self.segment(row)
        try:
            blob = None if index.blobs is None else index.blobs[row]
            source = index.paths[row] if blob is None else blob
            wave = self.decoder.read(
                source, offset, duration, where=index.where[row], pcm16=self.transform is None
            )
        except AudioDecodeError as error:
            if self.on_error == "raise":
                raise
            if self.skips is not None:
                self.skips.send(index.paths[row], None, error.reason)
            return None
        want = int(index.lengths[row])
        have = wave.shape[-1]
        if have > want:
            wave = wave[..., :want]
        elif have < want:
            wave = np.concatenate(
                [wave, np.zeros((*wave.shape[:-1], want - have), wave.dtype)], axis=-1
            )
        return wave

    def __getitem__(self, batch: torch.Tensor) -> dict[str, Any]:
        rows = self.rows(batch).tolist()
        kept, waves = [], []
        for row in rows:
            wave = self.decode(row)
            if wave is not None:
                kept.append(row)
                waves.append(wave)
        if not kept:
            raise AudioDecodeError(
                ", ".join(self.index.where[r] for r in rows),
                "every clip of this batch failed to decode (on_error='skip' leaves out single "
                "clips, not whole batches)",
            )
        if self.transform is not None:
            waves = [np.asarray(self.transform(torch.from_numpy(w)), np.float32) for w in waves]
        out: dict[str, Any] = pad_waveforms(waves)
        index = self.index
        if index.labels is not None:
            out["label"] = torch.from_numpy(index.labels[np.asarray(kept, dtype=np.int64)])
        if index.texts is not None:
            texts = [index.texts[r] for r in kept]
            if self.tokenizer is None:
                out["text"] = texts
            else:
                ids = encode_texts(self.tokenizer, texts)
                labels = torch.full((len(ids), max(map(len, ids), default=0)), -100)
                for i, row in enumerate(ids):
                    labels[i, : len(row)] = torch.tensor(row, dtype=torch.int64)
                out["labels"] = labels
        return out
