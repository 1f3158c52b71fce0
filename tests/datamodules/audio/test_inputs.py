"""What AudioDataModule reads and gives: manifests, segments, class folders, transcripts,
duration batches, long clips, bad records and bad arguments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
import soxr
import torch
from tokenizers import Tokenizer, models, pre_tokenizers

from datamodules import AudioDataModule
from tests.datamodules.audio.audio_data import (
    BASE,
    RATE,
    STEP,
    batch_ids,
    tone,
    write_classes,
    write_numbered,
)

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture(scope="module")
def numbered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("numbered")
    write_numbered(root, 12)
    return root


def all_batches(dm: AudioDataModule, split: str = "train") -> list[dict[str, Any]]:
    """The split's batches as a model gets them: waveforms made float32 after the transfer
    (``on_after_batch_transfer``; with ``features``, as the loader sends them)."""
    dm.setup("fit")
    loader = {"train": dm.train_dataloader, "val": dm.val_dataloader}[split]()
    if dm.features != "waveform":
        return list(loader)
    return [dm.on_after_batch_transfer(batch, 0) for batch in loader]


def test_manifest_batches_hold_padded_waveforms_masks_lengths_and_text(numbered: Path) -> None:
    dm = AudioDataModule(numbered / "manifest.jsonl", batch_size=4, val_split=0, num_workers=0)
    for batch in all_batches(dm):
        values, mask, lengths = batch["input_values"], batch["attention_mask"], batch["lengths"]
        assert values.dtype == torch.float32 and values.shape == mask.shape
        assert values.shape[1] == int(lengths.max())
        assert mask.sum(1).tolist() == lengths.tolist()
        assert batch["text"] == [f"clip {i}" for i in batch_ids(batch)]
        for row, i in enumerate(batch_ids(batch)):
            path = numbered / f"audio/clip{i:03d}.{'wav' if i % 2 else 'flac'}"
            np.testing.assert_array_equal(
                values[row, : lengths[row]].numpy(), soundfile.read(path, dtype="float32")[0]
            )
            assert not values[row, lengths[row] :].any()


def test_transcripts_are_tokenized_into_minus_100_padded_labels(numbered: Path) -> None:
    vocab = {c: i for i, c in enumerate(["[UNK]", *"clip 0123456789"])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    dm = AudioDataModule(
        numbered / "manifest.jsonl", tokenizer=tokenizer, batch_size=5, val_split=0, num_workers=0
    )
    for batch in all_batches(dm):
        assert "text" not in batch
        for row, i in zip(batch["labels"].tolist(), batch_ids(batch), strict=True):
            ids = [vocab[c] for c in f"clip {i}"]
            assert row == ids + [-100] * (len(row) - len(ids))


def test_segments_of_a_long_file_read_their_own_samples(tmp_path: Path) -> None:
    soundfile.write(tmp_path / "long.wav", tone(RATE * 3, 250), RATE)
    wave = soundfile.read(tmp_path / "long.wav", dtype="float32")[0]
    records = [
        {"audio_filepath": "long.wav", "offset": 0.5 * k, "duration": 0.25 + 0.125 * k, "text": ""}
        for k in range(4)
    ]
    (tmp_path / "m.json").write_text("".join(json.dumps(r) + "\n" for r in records))
    dm = AudioDataModule(tmp_path / "m.json", batch_size=4, val_split=0, shuffle=False)
    (batch,) = all_batches(dm)
    for row, k in enumerate(range(4)):
        start, n = 8000 * k, 4000 + 2000 * k
        assert int(batch["lengths"][row]) == n
        np.testing.assert_array_equal(
            batch["input_values"][row, :n].numpy(), wave[start : start + n]
        )


def test_class_folders_give_labels_resampled_mono_clips_and_header_lengths(tmp_path: Path) -> None:
    root = write_classes(tmp_path / "sounds")
    dm = AudioDataModule(root, batch_size=8, val_split=0, shuffle=False, bucket=False)
    (batch,) = all_batches(dm)
    assert dm.classes == ["cat", "dog"] and dm.num_classes == 2
    assert batch["label"].tolist() == [0] * 4 + [1] * 4
    for row, path in enumerate(dm.index.paths):
        frames, rate = soundfile.read(path, dtype="float32", always_2d=True)
        mono = frames.mean(axis=1, dtype=np.float32, keepdims=True)
        expected = mono[:, 0] if rate == RATE else soxr.resample(mono, rate, RATE)[:, 0]
        assert int(batch["lengths"][row]) == len(expected) == dm.index.lengths[row]
        np.testing.assert_array_equal(batch["input_values"][row, : len(expected)].numpy(), expected)


def test_max_duration_batches_count_padding_and_cover_every_clip_once(numbered: Path) -> None:
    dm = AudioDataModule(numbered / "manifest.jsonl", max_duration=0.4, val_split=0, num_workers=0)
    batches = all_batches(dm)
    ids = [batch_ids(b) for b in batches]
    assert sorted(i for b in ids for i in b) == list(range(12))
    for batch in batches:
        assert batch["input_values"].numel() <= 0.4 * RATE
    assert len(batches) < 12  # more than one clip a batch
    assert "at most 0.4 s of audio" in dm.summary()


@pytest.mark.parametrize("policy", ["drop", "truncate", "error"])
def test_clips_over_max_seconds_are_dropped_cut_or_refused_and_counted(
    numbered: Path, policy: str
) -> None:
    limit = (BASE + STEP * 8) / RATE  # clips 9, 10, 11 are longer
    dm = AudioDataModule(
        numbered / "manifest.jsonl", max_seconds=limit, overlong=policy, val_split=0,
        batch_size=12, num_workers=0,
    )  # fmt: skip
    if policy == "error":
        with pytest.raises(ValueError, match=r"manifest\.jsonl: line 10: a clip of 0\.11 s"):
            dm.setup("fit")
        return
    with pytest.warns(UserWarning, match=f"3 clips over max_seconds={limit} "):
        (batch,) = all_batches(dm)
    assert dm.overlong_count == 3 and f"(overlong='{policy}')" in dm.summary()
    lengths = sorted(batch["lengths"].tolist())
    if policy == "drop":
        assert lengths == [BASE + STEP * i for i in range(9)]
    else:
        assert lengths == [BASE + STEP * i for i in range(9)] + [BASE + STEP * 8] * 3


def test_an_eval_crop_is_the_centre(tmp_path: Path) -> None:
    soundfile.write(tmp_path / "a.wav", tone(RATE, 100), RATE)
    wave = soundfile.read(tmp_path / "a.wav", dtype="float32")[0]
    (tmp_path / "m.jsonl").write_text(json.dumps({"audio_filepath": "a.wav", "duration": 1.0}))
    dm = AudioDataModule(
        tmp_path / "m.jsonl", val=tmp_path / "m.jsonl", max_seconds=0.5, overlong="truncate"
    )
    with pytest.warns(UserWarning, match="max_seconds"):
        (batch,) = all_batches(dm, "val")
    np.testing.assert_array_equal(batch["input_values"][0].numpy(), wave[4000:12000])


def write_bad(root: Path) -> Path:
    write_numbered(root, 4)
    (root / "audio/broken.wav").write_bytes(b"RIFF\x00\x00 truncated")
    lines = (root / "manifest.jsonl").read_text().splitlines()
    lines += [
        json.dumps({"duration": 1.0, "text": "no path"}),
        json.dumps({"audio_filepath": "audio/missing.wav", "duration": 1.0, "text": "x"}),
        "{not json",
        json.dumps({"audio_filepath": "audio/broken.wav", "duration": 0.1, "text": "broken"}),
    ]
    (root / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    return root / "manifest.jsonl"


@pytest.mark.parametrize("workers", [0, 1])
def test_bad_records_are_named_with_file_and_line_or_skipped_and_counted(
    tmp_path: Path, workers: int
) -> None:
    manifest = write_bad(tmp_path)
    with pytest.raises(ValueError, match=r"manifest\.jsonl: line 5: no 'audio_filepath'"):
        AudioDataModule(manifest).setup("fit")
    dm = AudioDataModule(
        manifest, on_error="skip", val_split=0, batch_size=8, num_workers=workers,
        persistent_workers=False,
    )  # fmt: skip
    with pytest.warns(RuntimeWarning, match=r"left out 1 undecodable clip.*broken\.wav"):
        (batch,) = all_batches(dm)
    assert sorted(batch_ids(batch)) == [0, 1, 2, 3]  # the undecodable clip left out
    skipped = dm.skipped
    assert skipped.records == 4
    wheres = [where for where, _ in skipped]
    assert wheres[:3] == [f"{manifest}: line {n}" for n in (5, 6, 7)]
    assert "does not exist" in skipped[1][1] and "broken.wav" in wheres[3]
    raising = AudioDataModule(manifest, val_split=0, num_workers=0)
    raising.load_manifest = lambda split: (
        [  # type: ignore[method-assign]
            {"audio_filepath": str(tmp_path / "audio/broken.wav"), "duration": 0.1}
        ]
        if split == "train"
        else None
    )
    with pytest.raises(ValueError, match=r"record 0: cannot decode the audio"):
        all_batches(raising)


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"sample_rate": 0}, ValueError, "sample_rate"),
        ({"features": "mfcc"}, ValueError, "features='mfcc'"),
        ({"features": "whisper", "sample_rate": 8000}, ValueError, "sample_rate=8000"),
        ({"features": "log_mel", "mono": False}, ValueError, "mono=False"),
        ({"max_duration": 0}, ValueError, "max_duration"),
        ({"max_seconds": "5s"}, TypeError, "max_seconds"),
        ({"overlong": "cut"}, ValueError, "overlong"),
        ({"decoder": "ffmpeg"}, ValueError, "decoder"),
        ({"on_error": "ignore"}, ValueError, "on_error"),
        ({"max_duration": 1.0, "drop_last": True}, ValueError, "drop_last"),
        ({"n_mels": 0}, ValueError, "n_mels"),
    ],
)
def test_bad_arguments_raise_naming_them(
    numbered: Path, kwargs: dict[str, Any], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        AudioDataModule(numbered / "manifest.jsonl", **kwargs)


def test_bad_inputs_raise_naming_them(numbered: Path, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="train=3"):
        AudioDataModule(3)
    with pytest.raises(ValueError, match="neither a JSONL manifest"):
        AudioDataModule(numbered / "audio" / "clip000.flac").setup("fit")
    with pytest.raises(
        ValueError, match=r"line 2: a clip of 0\.10 s does not fit max_duration=0\.1 \(11 such"
    ):
        AudioDataModule(numbered / "manifest.jsonl", max_duration=0.1).setup("fit")


def test_log_mel_features_come_after_the_transfer(numbered: Path) -> None:
    dm = AudioDataModule(
        numbered / "manifest.jsonl", features="log_mel", n_mels=32, val_split=0, num_workers=0
    )
    (batch,) = all_batches(dm)
    assert "input_values" in batch  # the loader sends waveforms
    out = dm.on_after_batch_transfer(batch, 0)
    assert out["input_features"].shape == (12, 32, int(out["feature_lengths"].max()))


def test_mono_false_keeps_channels_and_refuses_mixed_layouts(tmp_path: Path) -> None:
    for i, channels in enumerate((2, 2, 1)):
        soundfile.write(tmp_path / f"{i}.wav", tone(800 + i, 300, RATE, channels), RATE)
    lines = [json.dumps({"audio_filepath": f"{i}.wav"}) + "\n" for i in range(3)]
    (tmp_path / "two.jsonl").write_text("".join(lines[:2]))
    (tmp_path / "all.jsonl").write_text("".join(lines))
    two = AudioDataModule(tmp_path / "two.jsonl", val_split=0, mono=False, batch_size=2)
    (batch,) = all_batches(two)
    assert batch["input_values"].shape == (2, 2, 801)
    mixed = AudioDataModule(tmp_path / "all.jsonl", val_split=0, mono=False, batch_size=3)
    with pytest.raises(ValueError, match=r"different channel counts \[1, 2\]"):
        all_batches(mixed)


def test_a_hugging_face_audio_parquet_decodes_its_encoded_clips(tmp_path: Path) -> None:
    import io

    import datasets

    rows = []
    for i in range(6):
        rate, encoded = (22050 if i % 2 else RATE), io.BytesIO()
        soundfile.write(encoded, tone(1600 + 16 * i, 300, rate), rate, format="FLAC")
        rows.append({"audio": {"bytes": encoded.getvalue(), "path": f"c{i}.flac"}, "text": f"{i}"})
    rows.append({"audio": {"bytes": b"not audio", "path": "bad.flac"}, "text": "bad"})
    table = datasets.Dataset.from_list(rows).cast_column("audio", datasets.Audio(decode=False))
    table.to_parquet(tmp_path / "train.parquet")
    path = tmp_path / "train.parquet"
    with pytest.raises(ValueError, match=r"train\.parquet: row 7: cannot read the audio header"):
        AudioDataModule(path).setup("fit")
    dm = AudioDataModule(
        path, on_error="skip", val_split=0, batch_size=8, shuffle=False, bucket=False
    )
    (batch,) = all_batches(dm)
    assert batch["text"] == [f"{i}" for i in range(6)] and dm.skipped.records == 1
    for i, row in enumerate(rows[:6]):
        frames, rate = soundfile.read(io.BytesIO(row["audio"]["bytes"]), dtype="float32")
        expected = frames if rate == RATE else soxr.resample(frames[:, None], rate, RATE)[:, 0]
        n = int(batch["lengths"][i])
        assert n == len(expected)
        np.testing.assert_array_equal(batch["input_values"][i, :n].numpy(), expected)


def test_webdataset_tar_shards_give_audio_members_and_transcripts(tmp_path: Path) -> None:
    import io
    import tarfile

    members = []
    for i in range(5):
        encoded = io.BytesIO()
        soundfile.write(encoded, tone(1600 + 16 * i, 300, RATE), RATE, format="WAV")
        members += [(f"s{i}.wav", encoded.getvalue()), (f"s{i}.txt", f"clip {i}".encode())]
    members += [(f"s{5}.txt", b"no audio")]
    with tarfile.open(tmp_path / "shard-0.tar", "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    shard = tmp_path / "shard-0.tar"
    with pytest.raises(ValueError, match=r"shard-0\.tar: key 's5': no audio member"):
        AudioDataModule(shard).setup("fit")
    dm = AudioDataModule(shard, on_error="skip", val_split=0, batch_size=8, num_workers=0)
    (batch,) = all_batches(dm)
    assert dm.skipped.records == 1
    for i, text in zip(batch_ids(batch), batch["text"], strict=True):
        assert text == f"clip {i}"
        wave = soundfile.read(io.BytesIO(members[2 * i][1]), dtype="float32")[0]
        row = batch["text"].index(text)
        np.testing.assert_array_equal(batch["input_values"][row, : len(wave)].numpy(), wave)
