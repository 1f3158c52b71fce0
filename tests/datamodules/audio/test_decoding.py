"""Decoding: samples equal soundfile's reading then soxr's resampling; segments; headers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile
import soxr

from datamodules.audio.decoding import AudioDecodeError, AudioDecoder, _downmix, audio_info
from tests.datamodules.audio.audio_data import tone, torchcodec_or_skip, write_classes


@pytest.mark.parametrize(
    ("rate", "channels", "fmt"),
    [(16000, 1, "wav"), (44100, 2, "flac"), (8000, 1, "ogg"), (22050, 2, "mp3")],
)
def test_decoded_samples_equal_soundfile_then_soxr(
    tmp_path: Path, rate: int, channels: int, fmt: str
) -> None:
    path = tmp_path / f"clip.{fmt}"
    soundfile.write(path, tone(rate // 4 + 3, 440, rate, channels), rate)
    decoded = AudioDecoder(16000).read(str(path))
    frames, file_rate = soundfile.read(path, dtype="float32", always_2d=True)
    mono = frames.mean(axis=1, dtype=np.float32, keepdims=True)
    expected = mono[:, 0] if file_rate == 16000 else soxr.resample(mono, file_rate, 16000)[:, 0]
    assert decoded.dtype == np.float32 and decoded.ndim == 1
    np.testing.assert_array_equal(decoded, expected)
    stereo = AudioDecoder(16000, mono=False).read(str(path))
    assert stereo.shape[0] == channels and stereo.shape[1] == len(expected)


@pytest.mark.parametrize("channels", [2, 3, 6, 7, 8, 12])
def test_the_downmix_equals_numpys_mean_bit_for_bit(channels: int) -> None:
    frames = np.random.default_rng(channels).standard_normal((10007, channels)).astype(np.float32)
    expected = frames.mean(axis=1, dtype=np.float32, keepdims=True)
    np.testing.assert_array_equal(_downmix(frames), expected)
    columns = np.asfortranarray(frames)
    expected = columns.mean(axis=1, dtype=np.float32, keepdims=True)
    np.testing.assert_array_equal(_downmix(columns), expected)


def test_a_segment_reads_only_its_frames(tmp_path: Path) -> None:
    path = tmp_path / "long.flac"
    wave = tone(48000, 300, 16000)
    soundfile.write(path, wave, 16000)
    segment = AudioDecoder(16000).read(str(path), offset=1.25, duration=0.5)
    np.testing.assert_allclose(segment, wave[20000:28000], atol=1e-4)  # FLAC: 16-bit samples
    assert len(segment) == 8000


def test_headers_give_durations_and_bad_files_are_named(tmp_path: Path) -> None:
    path = tmp_path / "a.wav"
    soundfile.write(path, tone(12345, 300, 22050, 2), 22050)
    info = audio_info(str(path))
    assert (info.frames, info.sample_rate, info.channels) == (12345, 22050, 2)
    (tmp_path / "bad.wav").write_bytes(b"RIFF not audio at all")
    with pytest.raises(AudioDecodeError, match=r"bad\.wav"):
        audio_info(str(tmp_path / "bad.wav"))
    with pytest.raises(AudioDecodeError, match=r"manifest\.jsonl: line 4: cannot decode"):
        AudioDecoder().read(str(tmp_path / "bad.wav"), where="manifest.jsonl: line 4")
    soundfile.write(tmp_path / "empty.wav", np.zeros(0, np.float32), 16000)
    with pytest.raises(AudioDecodeError, match="empty clip"):
        AudioDecoder().read(str(tmp_path / "empty.wav"))


@pytest.mark.parametrize("mono", [True, False])
def test_torchcodec_decodes_the_fixture_clips_as_soundfile_does(tmp_path: Path, mono: bool) -> None:
    torchcodec_or_skip()
    clips = sorted(write_classes(tmp_path / "sounds").rglob("*.*"))  # wav, flac; 8-44.1 kHz
    assert len(clips) == 8
    for path in clips:
        expected = AudioDecoder(16000, mono=mono).read(str(path))
        decoded = AudioDecoder(16000, mono=mono, decoder="torchcodec").read(str(path))
        assert decoded.dtype == np.float32 and decoded.shape == expected.shape, path
        np.testing.assert_allclose(decoded, expected, rtol=0, atol=1e-6, err_msg=str(path))


@pytest.mark.parametrize(
    ("rate", "frames", "offset", "duration"),
    [
        (22050, 8000, 0.05, 0.1),  # an offset between two samples (1,102.5)
        (22050, 8000, 0.05, None),  # to the end
        (8000, 2003, 0.05, 0.1),  # a short FLAC of one block: no seeking
        (16000, 48000, 1.25, 0.5),
    ],
)
def test_torchcodec_reads_a_segment_at_the_samples_soundfile_reads(
    tmp_path: Path, rate: int, frames: int, offset: float, duration: float | None
) -> None:
    torchcodec_or_skip()
    path = tmp_path / f"clip{rate}.flac"
    t = np.arange(frames) / rate
    soundfile.write(path, (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), rate)
    expected = AudioDecoder(rate, mono=True).read(str(path), offset, duration)
    decoded = AudioDecoder(rate, mono=True, decoder="torchcodec").read(str(path), offset, duration)
    assert decoded.shape == expected.shape
    np.testing.assert_allclose(decoded, expected, rtol=0, atol=1e-6)
