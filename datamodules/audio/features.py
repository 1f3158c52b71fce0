"""Features computed on the Trainer's device, a whole batch at once, after the transfer.

The loader sends waveforms (``input_values``); :class:`AudioFeatures` turns them into
``input_features`` in ``on_after_batch_transfer``, where the device makes it cheap:

* ``"log_mel"``: a natural-log mel spectrogram ``(B, n_mels, frames)``, 25 ms Hann windows
  every 10 ms, Slaney mel filters up to half the sample rate; ``feature_lengths`` gives each
  clip's frames (``lengths // hop + 1``), frames past it are 0.
* ``"whisper"``: what transformers' ``WhisperFeatureExtractor(feature_size=n_mels)`` gives
  (16 kHz, each clip zero-padded or cut to 30 s, n_fft 400, hop 160, Slaney mel filters to
  8 kHz, ``log10`` clamped to 8 below the clip's maximum, then ``(x + 4) / 4``): ``(B, n_mels,
  3000)``. The 30-second padding is not transformed: frames whose window holds only padding
  are silence, ``log10(1e-10) = -10`` before the clamp, so the STFT runs over the batch's own
  length plus one window of zeros and the remaining frames are filled with that value
  (a 5-second batch costs a sixth of a padded one; the values are the same, frame by frame).
  A batch of mixed lengths is transformed clip by clip on a CPU, and in groups of similar
  length elsewhere (:func:`length_groups`, from its ``lengths``), so a short clip beside a
  long one costs about its own length, not the long one's.

The mel filters are computed here (as ``transformers.audio_utils.mel_filter_bank`` computes
them with ``norm="slaney", mel_scale="slaney"``), so no transformers import is needed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["FEATURES", "AudioFeatures", "length_groups", "mel_filters"]

#: What ``features=`` accepts.
FEATURES = ("waveform", "log_mel", "whisper")

_MIN_LOG_HERTZ, _MIN_LOG_MEL, _LOGSTEP = 1000.0, 15.0, 27.0 / np.log(6.4)
WHISPER_RATE, WHISPER_SAMPLES, WHISPER_FFT, WHISPER_HOP = 16000, 480000, 400, 160
#: A clip joins a group of longer clips while the group's longest is at most this many times
#: its own length (and a second past it): no clip is transformed over more than about 1.5x
#: its samples, and a batch makes few groups (lengths from 1 to 30 s: at most nine).
GROUP_RATIO, GROUP_SLACK = 1.5, WHISPER_RATE


def length_groups(lengths: list[int], cap: int = WHISPER_SAMPLES) -> list[list[int]]:
    """Rows of a batch grouped by length, longest first: each group's rows, longest first.

    Lengths past ``cap`` count as ``cap`` (Whisper cuts clips at 30 s). A row joins the
    current group while the group's longest is within ``GROUP_RATIO`` times the row's length
    plus ``GROUP_SLACK`` samples.
    """
    order = sorted(range(len(lengths)), key=lambda row: -min(lengths[row], cap))
    groups: list[list[int]] = []
    longest = 0
    for row in order:
        length = min(lengths[row], cap)
        if groups and longest <= GROUP_RATIO * length + GROUP_SLACK:
            groups[-1].append(row)
        else:
            groups.append([row])
            longest = length
    return groups


def _hertz_to_mel(freq: np.ndarray) -> np.ndarray:
    mels = 3.0 * freq / 200.0
    log = freq >= _MIN_LOG_HERTZ
    mels[log] = _MIN_LOG_MEL + np.log(freq[log] / _MIN_LOG_HERTZ) * _LOGSTEP
    return mels


def _mel_to_hertz(mels: np.ndarray) -> np.ndarray:
    freq = 200.0 * mels / 3.0
    log = mels >= _MIN_LOG_MEL
    freq[log] = _MIN_LOG_HERTZ * np.exp((mels[log] - _MIN_LOG_MEL) / _LOGSTEP)
    return freq


def mel_filters(n_fft: int, n_mels: int, sample_rate: int, max_frequency: float) -> np.ndarray:
    """Slaney-normalised triangular mel filters on the Slaney mel scale, ``(n_fft // 2 + 1,
    n_mels)`` float64, from 0 Hz to ``max_frequency``."""
    mel_edges = _hertz_to_mel(np.array([0.0, float(max_frequency)]))
    filter_freqs = _mel_to_hertz(np.linspace(mel_edges[0], mel_edges[1], n_mels + 2))
    fft_freqs = np.linspace(0, sample_rate // 2, n_fft // 2 + 1)
    diff = np.diff(filter_freqs)
    slopes = filter_freqs[None, :] - fft_freqs[:, None]
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    return filters * (2.0 / (filter_freqs[2 : n_mels + 2] - filter_freqs[:n_mels]))[None, :]


def _reflect_padded(waves: torch.Tensor, pad: int, tail: int) -> torch.Tensor:
    """``waves`` (B, T) followed by ``tail`` zeros, reflect-padded by ``pad`` on both sides
    (``torch.stft``'s centring), built in one copy."""
    length = waves.shape[-1]
    if length <= pad + 1 or (tail and tail <= pad):  # short clips, or a short tail: the plain way
        signal = torch.nn.functional.pad(waves, (0, tail)) if tail else waves
        return torch.nn.functional.pad(signal[:, None, :], (pad, pad), mode="reflect")[:, 0]
    out = waves.new_zeros((waves.shape[0], pad + length + tail + pad))
    out[:, pad : pad + length] = waves
    out[:, :pad] = waves[:, 1 : pad + 1].flip(-1)
    if not tail:  # with a tail longer than pad, the reflected end is zeros
        out[:, pad + length :] = waves[:, length - pad - 1 : length - 1].flip(-1)
    return out


class AudioFeatures:
    """Turns a batch's waveforms into ``input_features`` on whatever device they are.

    Args:
        kind: ``"log_mel"`` or ``"whisper"``.
        sample_rate: The waveforms' rate (16000 for ``"whisper"``).
        n_mels: Mel bands (80 or 128 for Whisper models).
    """

    def __init__(self, kind: str, sample_rate: int, n_mels: int) -> None:
        self.kind, self.sample_rate, self.n_mels = kind, sample_rate, n_mels
        if kind == "whisper":
            self.n_fft, self.hop, top = WHISPER_FFT, WHISPER_HOP, 8000.0
        else:
            self.n_fft, self.hop = round(0.025 * sample_rate), round(0.010 * sample_rate)
            top = sample_rate / 2
        self._filters = torch.from_numpy(mel_filters(self.n_fft, n_mels, sample_rate, top)).float()
        self._on: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def _constants(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if device not in self._on:
            window = torch.hann_window(self.n_fft, device=device)
            self._on[device] = (window, self._filters.to(device))
        return self._on[device]

    def _power_mel(self, waves: torch.Tensor, whisper: bool, tail: int = 0) -> torch.Tensor:
        """Mel power ``(B, n_mels, frames)`` of centred, reflect-padded Hann frames of
        ``waves`` followed by ``tail`` zeros.

        Framed by hand (``unfold``, then a real FFT along the contiguous last axis) rather
        than with ``torch.stft``, whose frequency-major output makes the power and the mel
        product stride across memory: on a CPU this is about 1.7x faster, the same values.
        """
        window, filters = self._constants(waves.device)
        padded = _reflect_padded(waves, self.n_fft // 2, tail)
        frames = padded.unfold(-1, self.n_fft, self.hop)
        if whisper:  # Whisper leaves out the last frame
            frames = frames[:, :-1]
        parts = torch.view_as_real(torch.fft.rfft(frames * window, dim=-1))
        real, imag = parts[..., 0], parts[..., 1]
        power = real * real + imag * imag
        return (power @ filters).transpose(-1, -2)

    def _whisper(self, waves: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Whisper's features of ``waves`` (B, T), zero beyond each clip: the frames that
        see audio (up to one window past the batch's length) from the STFT, the rest silence.
        Written into ``out`` (B, n_mels, 3000) where given.
        """
        frames = WHISPER_SAMPLES // self.hop  # 3000: Whisper leaves out the last one
        # Enough zeros after the longest clip that the STFT's reflected end is zeros too, and
        # every later frame's window holds only the padding.
        length = min(WHISPER_SAMPLES, waves.shape[-1] + self.n_fft)
        waves = waves[..., :length]
        tail = length - waves.shape[-1]
        seen = self._power_mel(waves, length == WHISPER_SAMPLES, tail).clamp_(min=1e-10).log10_()
        seen = seen[..., :frames]
        # Silence is log10(1e-10) = -10; the peak is the clip's, over its frames and silence.
        peak = seen.amax(dim=(-2, -1), keepdim=True)
        if seen.shape[-1] < frames:
            peak = peak.clamp(min=-10.0)
        floor = peak - 8.0
        if out is None:
            out = torch.empty((*seen.shape[:-1], frames), dtype=seen.dtype, device=seen.device)
        head = out[..., : seen.shape[-1]]
        torch.maximum(seen, floor, out=head)
        head.add_(4.0).div_(4.0)
        out[..., seen.shape[-1] :] = (floor.clamp(min=-10.0) + 4.0) / 4.0
        return out

    def _whisper_grouped(self, waves: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
        """:meth:`_whisper` of each clip over its own length (on a CPU, where a call costs
        little), or of each :func:`length_groups` group over the group's (elsewhere, where
        each call is a kernel launch): the values are the batch's, since past its length a
        clip is zeros either way."""
        if lengths is None or waves.shape[0] < 2:
            return self._whisper(waves)
        samples = [max(1, min(int(n), waves.shape[-1])) for n in lengths.tolist()]
        out = waves.new_empty((waves.shape[0], self.n_mels, WHISPER_SAMPLES // self.hop))
        if waves.device.type == "cpu":
            for row, length in enumerate(samples):
                self._whisper(waves[row : row + 1, :length], out[row : row + 1])
            return out
        groups = length_groups(samples)
        if len(groups) == 1:
            return self._whisper(waves)
        for rows in groups:
            index = torch.tensor(rows, device=waves.device)
            out[index] = self._whisper(waves[index, : samples[rows[0]]])
        return out

    def __call__(self, batch: dict[str, Any], cpu_threads: int | None = None) -> dict[str, Any]:
        """Replaces ``input_values`` with ``input_features`` (and, for ``"log_mel"``,
        ``feature_lengths``); the rest of the batch stays.

        Args:
            batch: A batch of :func:`~datamodules.audio.batches.pad_waveforms`' keys.
            cpu_threads: On a CPU, at most this many torch threads for the features (the
                process's setting is restored after). Where loader workers hold the cores,
                more threads only wait for them: 1 there used about a third of the CPU time
                of 2 over an epoch (see the benchmarks page).
        """
        waves = batch["input_values"]
        threads = torch.get_num_threads()
        if waves.device.type == "cpu" and cpu_threads is not None and threads > cpu_threads:
            torch.set_num_threads(cpu_threads)
            try:
                return self._features(batch)
            finally:
                torch.set_num_threads(threads)
        return self._features(batch)

    def _features(self, batch: dict[str, Any]) -> dict[str, Any]:
        waves = batch.pop("input_values").float()
        if self.kind == "whisper":
            batch["input_features"] = self._whisper_grouped(waves, batch.get("lengths"))
            return batch
        frames = self._power_mel(waves, False).clamp(min=1e-10).log()
        lengths = torch.div(batch["lengths"], self.hop, rounding_mode="floor") + 1
        keep = torch.arange(frames.shape[-1], device=frames.device)[None, :] < lengths[:, None]
        batch["input_features"] = frames * keep[:, None, :].to(frames.dtype)
        batch["feature_lengths"] = lengths
        return batch
