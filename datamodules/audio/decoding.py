"""The audio decoder: a file (or a segment of one) to float32 samples at the target rate.

soundfile (libsndfile: WAV, FLAC, OGG/Vorbis, Opus, MP3) reads the frames, soxr resamples
them, and channels are averaged to mono; a segment (``offset`` / ``duration`` seconds) seeks
and reads only its own frames. ``decoder="torchcodec"`` reads the frames with TorchCodec
instead (other containers, where FFmpeg is installed) and resamples with soxr the same way.
:func:`audio_info` reads a file's header only (frames, rate, channels): durations never need a
decode.
"""

from __future__ import annotations

import io
import os
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "DECODERS",
    "AudioDecodeError",
    "AudioDecoder",
    "AudioInfo",
    "audio_info",
    "resampled_length",
]

#: What ``decoder=`` accepts.
DECODERS = ("soundfile", "torchcodec")


class AudioDecodeError(ValueError):
    """A clip that cannot be read; ``where`` names it (file, and manifest line)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: cannot decode the audio: {reason}")
        self.where, self.reason = where, reason


class AudioInfo(NamedTuple):
    """What a file's header says: frames, frames per second and channels."""

    frames: int
    sample_rate: int
    channels: int

    @property
    def duration(self) -> float:
        """Seconds of audio."""
        return self.frames / self.sample_rate


def audio_info(path: Any, files: Any = None) -> AudioInfo:
    """Reads ``path``'s header (no decode); ``path`` may also be a binary file object.

    Args:
        path: A path, a URL (opened by ``files``) or a binary file object.
        files: Opens paths and URLs (None: local paths only).

    Raises:
        AudioDecodeError: The file is missing, cannot be fetched, or libsndfile cannot read
            its header.
    """
    import soundfile

    try:
        if files is not None and isinstance(path, str):
            with files.open(path) as source:
                info = soundfile.info(source)
        else:
            info = soundfile.info(path)
    except Exception as error:  # soundfile raises LibsndfileError, RuntimeError, OSError
        raise AudioDecodeError(str(path), _reason(error)) from error
    return AudioInfo(int(info.frames), int(info.samplerate), int(info.channels))


def resampled_length(frames: int, rate: int, target: int) -> int:
    """Samples soxr gives for ``frames`` at ``rate`` resampled to ``target`` (rounded)."""
    return frames if rate == target else round(frames * target / rate)


def _downmix(frames: np.ndarray) -> np.ndarray:
    """``frames.mean(axis=1, dtype=float32, keepdims=True)``, bit for bit, 7x faster.

    NumPy's reduction over a short, strided axis is slow; below 8 channels it adds them left
    to right (its pairwise sum unrolls by 8), so adding whole columns in order and dividing
    gives the same floats.
    """
    channels = frames.shape[1]
    if channels >= 8:
        return frames.mean(axis=1, dtype=np.float32, keepdims=True)
    total = frames[:, 0].astype(np.float32)  # a copy
    for channel in range(1, channels):
        total += frames[:, channel]
    total /= np.float32(channels)
    return total[:, None]


def _reason(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def _codec_frames(path: Any, offset: float, duration: float | None) -> tuple[np.ndarray, int]:
    """The frames ``(T, C)`` of a segment decoded with TorchCodec, cut at the samples
    soundfile reads (``round(offset * rate)`` for ``round(duration * rate)``).

    TorchCodec starts a range at the first sample played at or after its start time, which
    for an offset between two samples is one sample later than soundfile's rounding: the
    range asked for starts two samples early and is cut here. A format that cannot seek
    (a short FLAC of one block) is decoded from its start.
    """
    from torchcodec.decoders import AudioDecoder as CodecDecoder

    codec = CodecDecoder(path)
    rate = int(codec.metadata.sample_rate)
    first = round(offset * rate)
    count = None if duration is None else round(duration * rate)
    begin = max(0, first - 2) / rate
    stop = None if count is None else (first + count + 2) / rate
    try:
        samples = codec.get_samples_played_in_range(begin, stop)
    except RuntimeError:  # no seeking in this file: a new decoder, from its start
        if hasattr(path, "seek"):
            path.seek(0)
        samples = CodecDecoder(path).get_samples_played_in_range(0.0, stop)
    data = samples.data.numpy().T
    at = first - round(samples.pts_seconds * rate)
    end = None if count is None else at + count
    return data[max(at, 0) : end].astype(np.float32, copy=False), rate


class AudioDecoder:
    """Reads clips as float32 NumPy arrays at ``sample_rate``: ``(T,)`` mono, or ``(C, T)``.

    Args:
        sample_rate: The rate every clip is resampled to (soxr, high quality).
        mono: Average the channels into one.
        decoder: ``"soundfile"`` or ``"torchcodec"``.
        files: Opens paths and URLs (:class:`~datamodules.audio.files.AudioFiles`; None:
            local paths only).
    """

    def __init__(
        self,
        sample_rate: int = 16000,
        mono: bool = True,
        decoder: str = "soundfile",
        files: Any = None,
    ):
        self.sample_rate, self.mono, self.decoder = sample_rate, mono, decoder
        self.files = files

    def lossless_int16(self, file: Any) -> bool:
        """Whether an open ``soundfile.SoundFile``'s samples reach the batch unchanged as
        int16: 16-bit PCM at the target rate, one channel (or ``mono=False``): nothing to
        resample or average."""
        one_layout = file.channels == 1 or not self.mono
        return file.subtype == "PCM_16" and file.samplerate == self.sample_rate and one_layout

    def _frames(
        self, path: Any, offset: float, duration: float | None, pcm16: bool = False
    ) -> tuple[np.ndarray, int]:
        """The segment's frames ``(T, C)`` float32 (int16 when ``pcm16`` and
        :meth:`lossless_int16`) and the file's rate."""
        if self.decoder == "torchcodec":
            return _codec_frames(path, offset, duration)
        import soundfile

        with soundfile.SoundFile(io.BytesIO(path) if isinstance(path, bytes) else path) as file:
            rate = file.samplerate
            # Always seek, as soundfile.read does: libsndfile's MP3 decoder gives (slightly)
            # other samples after opening than after a seek to frame 0.
            file.seek(min(round(offset * rate), file.frames))
            count = -1 if duration is None else round(duration * rate)
            dtype = "int16" if pcm16 and self.lossless_int16(file) else "float32"
            return file.read(count, dtype=dtype, always_2d=True), rate

    def read(
        self,
        path: str,
        offset: float = 0.0,
        duration: float | None = None,
        where: str | None = None,
        pcm16: bool = False,
    ) -> np.ndarray:
        """Decodes ``duration`` seconds of ``path`` from ``offset`` (None: to the end).

        Args:
            path: The audio file, or its encoded bytes.
            offset: Seconds skipped at the start (only the segment's frames are read).
            duration: Seconds read, or None for the rest of the file.
            where: How errors name the clip (default: the path).
            pcm16: Give a 16-bit PCM file at the target rate (one channel, or ``mono=False``)
                as its int16 samples: ``x / 32768`` is exactly the float32 reading.

        Raises:
            AudioDecodeError: The file is missing or cannot be decoded, or holds no frames.
        """
        name = where or ("encoded bytes" if isinstance(path, bytes) else os.fspath(path))
        source = path if isinstance(path, bytes) else os.fspath(path)
        try:
            if self.files is not None and isinstance(source, str):
                with self.files.open(source) as opened:
                    frames, rate = self._frames(opened, offset, duration, pcm16)
            else:
                frames, rate = self._frames(source, offset, duration, pcm16)
        except Exception as error:
            raise AudioDecodeError(name, _reason(error)) from error
        if not len(frames):
            raise AudioDecodeError(name, "no audio frames (an empty clip)")
        if frames.dtype == np.int16:  # lossless_int16: one channel (or kept), the target rate
            return np.ascontiguousarray(frames[:, 0] if self.mono else frames.T)
        if self.mono and frames.shape[1] > 1:
            frames = _downmix(frames)
        if rate != self.sample_rate:
            import soxr

            frames = soxr.resample(frames, rate, self.sample_rate)
        out: Any = frames[:, 0] if self.mono else frames.T
        return np.ascontiguousarray(out, dtype=np.float32)
