"""Features on the device equal transformers' WhisperFeatureExtractor; log-mel frames."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datamodules.audio.batches import pad_waveforms
from datamodules.audio.features import AudioFeatures, length_groups

LENGTHS = (0.7, 2.3, 31.0)


def clips(lengths: tuple[float, ...] = LENGTHS) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = []
    for seconds, frequency in zip(lengths, (300.0, 1234.0, 440.0), strict=True):
        t = np.arange(int(seconds * 16000)) / 16000
        wave = 0.4 * np.sin(2 * np.pi * frequency * t) + 0.05 * rng.standard_normal(len(t))
        out.append(wave.astype(np.float32))
    return out


@pytest.mark.parametrize(
    ("n_mels", "lengths"),
    [
        (80, LENGTHS),  # a clip past 30 s: the whole window is transformed
        (128, LENGTHS),
        (80, (0.7, 2.3, 4.0)),  # short clips only: the padding's frames are filled, not computed
        (80, (0.7, 29.99, 5.0)),  # the longest clip ends less than a window before 30 s
    ],
)
def test_whisper_features_equal_transformers(n_mels: int, lengths: tuple[float, ...]) -> None:
    from transformers import WhisperFeatureExtractor

    waves = clips(lengths)
    waves[0][-400:] = 0.9  # a loud end: the frames at each clip's end see it
    expected = WhisperFeatureExtractor(feature_size=n_mels)(
        waves, sampling_rate=16000, return_tensors="np"
    )["input_features"]
    batch = AudioFeatures("whisper", 16000, n_mels)(pad_waveforms(waves))
    got = batch["input_features"]
    assert got.shape == expected.shape == (3, n_mels, 3000)
    assert "input_values" not in batch
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-3, rtol=0)


def test_log_mel_frames_follow_the_lengths() -> None:
    waves = clips()[:2]
    batch = AudioFeatures("log_mel", 16000, 40)(pad_waveforms(waves))
    features, lengths = batch["input_features"], batch["feature_lengths"]
    assert lengths.tolist() == [len(w) // 160 + 1 for w in waves]
    assert features.shape == (2, 40, int(lengths.max()))
    assert torch.all(features[0, :, int(lengths[0]) :] == 0)
    alone = AudioFeatures("log_mel", 16000, 40)(pad_waveforms(waves[:1]))["input_features"]
    inside = (len(waves[0]) - 200) // 160 + 1  # frames whose window ends within the clip
    torch.testing.assert_close(features[0, :, :inside], alone[0, :, :inside], atol=1e-4, rtol=0)


def test_length_groups_bound_each_clips_padding() -> None:
    second = 16000
    lengths = [s * second for s in (1, 30, 2, 45, 5, 3, 20, 1)]
    groups = length_groups(lengths)
    assert sorted(row for rows in groups for row in rows) == list(range(len(lengths)))
    # Longest first; past 30 s counts as 30 s; within a group the longest is at most 1.5x
    # a member's length plus a second.
    assert groups == [[1, 3, 6], [4, 5], [2, 0, 7]]
    for rows in groups:
        longest = min(lengths[rows[0]], 30 * second)
        assert all(longest <= 1.5 * min(lengths[r], 30 * second) + second for r in rows)


def test_whisper_features_of_mixed_lengths_equal_transformers_row_by_row() -> None:
    """A batch of very different lengths is transformed in groups; each row still equals
    transformers' features of that clip."""
    from transformers import WhisperFeatureExtractor

    lengths = (0.7, 12.0, 2.3, 31.0, 4.0, 1.1)
    rng = np.random.default_rng(1)
    waves = [
        (
            0.3 * np.sin(np.arange(int(s * 16000)) / 7.0)
            + 0.05 * rng.standard_normal(int(s * 16000))
        ).astype(np.float32)
        for s in lengths
    ]
    assert len(length_groups([len(w) for w in waves])) > 2
    expected = WhisperFeatureExtractor()(waves, sampling_rate=16000, return_tensors="np")
    got = AudioFeatures("whisper", 16000, 80)(pad_waveforms(waves))["input_features"]
    assert got.shape == (6, 80, 3000)
    np.testing.assert_allclose(got.numpy(), expected["input_features"], atol=1e-3, rtol=0)


class ThreadsSeen(AudioFeatures):
    """Records the torch threads its features ran on."""

    seen: list[int]

    def _features(self, batch: dict) -> dict:
        self.seen.append(torch.get_num_threads())
        return super()._features(batch)


def test_cpu_threads_caps_the_features_and_restores_the_setting() -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        features = ThreadsSeen("whisper", 16000, 80)
        features.seen = []
        features(pad_waveforms(clips((0.5, 1.0, 0.7))), cpu_threads=1)
        features(pad_waveforms(clips((0.5, 1.0, 0.7))))
        assert features.seen == [1, 2]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(("workers", "capped"), [(0, False), (2, True)])
def test_features_run_on_one_thread_where_loader_workers_hold_the_cores(
    tmp_path, workers: int, capped: bool
) -> None:
    import soundfile

    from datamodules import AudioDataModule

    soundfile.write(tmp_path / "a.wav", clips((0.5, 0.6, 0.7))[0], 16000)
    (tmp_path / "m.jsonl").write_text('{"audio_filepath": "a.wav"}\n')
    dm = AudioDataModule(tmp_path / "m.jsonl", features="whisper", val_split=0, num_workers=workers)
    dm.extractor = ThreadsSeen("whisper", 16000, 80)
    dm.extractor.seen = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        (batch,) = list(dm.train_dataloader())
        features = dm.on_after_batch_transfer(batch, 0)["input_features"]
        assert features.shape == (1, 80, 3000)
        assert dm.extractor.seen == [1 if capped else 2]
    finally:
        torch.set_num_threads(before)
