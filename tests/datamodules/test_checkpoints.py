"""Checkpoints hold plain data: every DataModule, built with its richest arguments, saves a
checkpoint through the real Trainer that a process which never imports this library loads with
``torch.load(weights_only=True)``; ``load_from_checkpoint`` rebuilds an equal module that
resumes where the checkpoint stopped, and ``Trainer.fit(ckpt_path=...)`` resumes exactly.

A mixed-source stream (Sources, one with a weight schedule) resumes exactly with 1 and 2 workers,
each source keeping its quotas over the two runs.
"""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from datamodules import (
    AudioDataModule,
    BaseDataModule,
    ChatDataModule,
    ImageFolderDataModule,
    ImageTextDataModule,
    PreferenceDataModule,
    Source,
    StreamingDataModule,
    TensorDataModule,
    TextDataModule,
)
from tests.datamodules.contract import assert_resume_mid_epoch_is_exact
from tests.datamodules.text.test_packing import token_ids

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

#: Run in one fresh interpreter per module: for each ``path<TAB>qualname`` line on stdin it
#: loads the checkpoint as a user who never imports this library would, checks that the parts
#: this library writes are plain data, and prints them as one JSON line.
READER = r"""
import json, sys, traceback, torch
def check(value, where):
    if isinstance(value, dict):
        for key, item in value.items():
            assert isinstance(key, str), (where, key)
            check(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check(item, f"{where}[{i}]")
    else:
        assert type(value) in (str, int, float, bool, type(None)), (where, type(value))
for line in sys.stdin:
    path, qualname = line.rstrip("\n").split("\t")
    try:
        ckpt = torch.load(path, weights_only=True, map_location="cpu")
        ours = [m for m in sys.modules if m.split(".")[0] in ("datamodules", "collates", "tests")]
        assert not ours, ours
        parts = {
            "hparams": ckpt["datamodule_hyper_parameters"],
            "state": ckpt[qualname],
            "loader": ckpt["loops"]["fit_loop"]["state_dict"].get("combined_loader"),
        }
        for name, part in parts.items():
            check(part, name)
        print(json.dumps({"parts": parts}), flush=True)
    except Exception:
        print(json.dumps({"error": traceback.format_exc()}), flush=True)
"""

Reader = Callable[[Path, str], dict[str, Any]]


@pytest.fixture(scope="module")
def read_without_the_library(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reader]:
    """Reads a checkpoint (its path, the DataModule's qualified name) in a fresh interpreter
    that never imports this library (one for the module: each costs seconds to import torch)."""
    process = subprocess.Popen(
        [sys.executable, "-c", READER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path_factory.mktemp("reader"),
        start_new_session=True,
    )
    assert process.stdin is not None and process.stdout is not None

    def read(path: Path, qualname: str) -> dict[str, Any]:
        process.stdin.write(f"{path}\t{qualname}\n")
        process.stdin.flush()
        line = process.stdout.readline()
        assert line, f"the reader ended: {process.communicate()[1][-3000:]}"
        answer = json.loads(line)
        assert "error" not in answer, answer["error"]
        return answer["parts"]

    try:
        yield read
    finally:
        process.kill()
        process.communicate()


@dataclass
class RichCase:
    """A DataModule built with many kinds of argument, and how to read its batches."""

    make: Callable[[], BaseDataModule]
    batch_ids: Callable[[Any], list[int]]
    unsaved: set[str]
    #: What load_from_checkpoint needs again (the arguments that are not saved).
    again: Callable[[], dict[str, Any]] = dict
    extra_checks: list[Callable[[BaseDataModule, dict[str, Any]], None]] = field(
        default_factory=list
    )


def first_column(batch: Any) -> list[int]:
    x = batch["x"] if isinstance(batch, dict) else batch[0]
    return x[:, 0].long().tolist()


def tensor_case(tmp_path: Path) -> RichCase:
    ids = torch.arange(40)
    torch.save({"x": torch.stack([ids.float(), -ids.float()], 1), "y": ids % 4}, tmp_path / "d.pt")
    return RichCase(
        make=lambda: TensorDataModule(
            path=tmp_path / "d.pt",
            label_key="y",
            stratify=True,
            val_split=np.float64(0.2),
            test_split=np.int64(4),
            split_seed=np.int64(3),
            shuffle_seed=11,
            batch_size=4,
            num_workers=0,
            prefetch_factor=None,
            train_transforms=lambda batch: batch,
        ),
        batch_ids=first_column,
        unsaved={"train_transforms"},
        again=lambda: {"train_transforms": lambda batch: batch},
    )


MEAN, STD = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)


def red_ids(batch: Any) -> list[int]:
    """The red channel of each image's top-left pixel (uint8, or normalised on the device)."""
    red = batch[0][:, 0, 0, 0].cpu()
    if red.dtype != torch.uint8:  # normalised on the device: undo it
        red = ((red * STD[0] + MEAN[0]) * 255).round()
    return red.long().tolist()


def image_case(tmp_path: Path) -> RichCase:
    index = 0
    for name in ("cat", "dog"):
        (tmp_path / "img" / name).mkdir(parents=True)
        for j in range(12):
            colour = (index, 0, 7)
            Image.new("RGB", (10, 8), colour).save(tmp_path / "img" / name / f"{j}.png")
            index += 1

    return RichCase(
        make=lambda: ImageFolderDataModule(
            tmp_path / "img",
            image_size=8,
            mean=MEAN,
            std=STD,
            on_error="skip",
            extensions=(".png",),
            val_split=0.25,
            batch_size=4,
            num_workers=0,
            persistent_workers=False,
        ),
        batch_ids=red_ids,
        unsaved=set(),
    )


def texts(n: int = 40) -> list[str]:
    words = ["alpha", "beta", "gamma", "delta", "eps"]
    return [" ".join(words[(i * 3 + j) % 5] for j in range(1 + i % 7)) for i in range(n)]


def bpe(corpus: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=60, special_tokens=["[PAD]", "[UNK]"])
    tokenizer.train_from_iterator(corpus, trainer)
    return tokenizer


def packed_text_case(tmp_path: Path) -> RichCase:
    corpus = texts()
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"body": t}) + "\n" for t in corpus))
    tokenizer = bpe(corpus)
    return RichCase(
        make=lambda: TextDataModule(
            train_file=tmp_path / "train.jsonl",
            text_key="body",
            tokenizer=tokenizer,
            packing=True,
            seq_length=8,
            pack_mode="whole",
            max_length=8,
            val_split=0.2,
            batch_size=3,
            num_workers=0,
        ),
        batch_ids=token_ids,
        unsaved={"tokenizer"},
        again=lambda: {"tokenizer": tokenizer},
    )


def store_text_case(tmp_path: Path) -> RichCase:
    """JSONL shards by a glob and a gzipped validation file, through the token store."""
    corpus = texts(48)
    (tmp_path / "data").mkdir()
    for k in range(2):
        lines = "".join(json.dumps({"text": t}) + "\n" for t in corpus[k:40:2])
        (tmp_path / "data" / f"part-{k}.jsonl").write_text(lines)
    val = "".join(json.dumps({"text": t}) + "\n" for t in corpus[40:])
    (tmp_path / "val.jsonl.gz").write_bytes(gzip.compress(val.encode()))
    tokenizer = bpe(corpus)
    return RichCase(
        make=lambda: TextDataModule(
            train_file=str(tmp_path / "data" / "*.jsonl"),
            val_file=[tmp_path / "val.jsonl.gz"],
            tokenizer=tokenizer,
            token_cache=tmp_path / "tokens",
            tokenize_workers=0,
            storage_options={"anon": True},
            retries=2,
            timeout=30.0,
            packing=True,
            seq_length=8,
            batch_size=3,
            num_workers=0,
        ),
        batch_ids=token_ids,
        unsaved={"tokenizer"},
        again=lambda: {"tokenizer": tokenizer},
    )


def token_files_case(tmp_path: Path) -> RichCase:
    """A nanoGPT-style flat token file split at eos_id, without a tokenizer."""
    generator = np.random.default_rng(0)
    flat = [t for n in range(40) for t in [*generator.integers(1, 60, 1 + n % 9), 0]]
    np.asarray(flat, dtype=np.uint16).tofile(tmp_path / "train.bin")
    return RichCase(
        make=lambda: TextDataModule(
            token_files=tmp_path / "train.bin",
            dtype="uint16",
            eos_id=0,
            vocab_size=64,
            packing=True,
            seq_length=8,
            batch_size=3,
            val_split=0.2,
            num_workers=0,
        ),
        batch_ids=token_ids,
        unsaved=set(),
    )


def budget_text_case(tmp_path: Path) -> RichCase:
    corpus = texts()
    return RichCase(
        make=lambda: TextDataModule(
            corpus,
            list(range(len(corpus))),
            tokenizer="word",
            lowercase=True,
            max_length=6,
            batch_by="tokens",
            max_tokens=16,
            pad_to_multiple_of=2,
            eval_bucket=True,
            val_split=0.2,
            num_workers=0,
        ),
        batch_ids=lambda batch: batch["labels"].tolist(),
        unsaved={"texts", "labels"},
        again=lambda: {"texts": corpus, "labels": list(range(len(corpus)))},
    )


def write_sources(root: Path) -> tuple[Path, Path]:
    """Source "web": 2 JSONL shards, ids 0..59; source "code": one Parquet file, ids 100..119."""
    web = root / "web"
    web.mkdir()
    for k, (lo, hi) in enumerate(((0, 35), (35, 60))):
        lines = [json.dumps({"id": i, "x": [i % 3] * 2}) for i in range(lo, hi)]
        (web / f"part-{k}.jsonl").write_text("\n".join(lines) + "\n")
    code = root / "code.parquet"
    ids = list(range(100, 120))
    table = pa.table({"id": ids, "x": [[i % 3] * 2 for i in ids], "junk": ["j"] * 20})
    pq.write_table(table, code, row_group_size=6)
    return web, code


def stream_case(tmp_path: Path, workers: int) -> RichCase:
    web, code = write_sources(tmp_path)
    options = {"anon": False, "key": "AKIA-example", "secret": "never-in-a-checkpoint"}

    def quotas_kept(dm: BaseDataModule, saved: dict[str, Any]) -> None:
        assert [dm.quotas(e) for e in (0, 1)] == [{"web": 48, "code": 16}, {"web": 32, "code": 32}]
        assert saved["hparams"]["train_files"][0]["weight"] == [[0, 3], [1, 1]]
        assert "never-in-a-checkpoint" not in json.dumps(saved)

    return RichCase(
        make=lambda: StreamingDataModule(
            [
                Source(web, weight=[[0, 3], [1, 1]], name="web"),
                Source([code], weight=1, name="code"),
            ],
            epoch_size=64,
            source_key="source",
            columns=("id", "x"),
            storage_options=options,
            retries=2,
            timeout=30,
            cache_dir=tmp_path / "cache",
            cache_limit="1GB",
            index_cache=tmp_path / "index",
            prefetch_shards=2,
            shuffle_buffer=16,
            transform=lambda record: {**record, "id": record["id"]},
            batch_size=8,
            num_workers=workers,
        ),
        batch_ids=lambda batch: batch["id"].tolist(),
        unsaved={"transform", "storage_options.key", "storage_options.secret"},
        again=lambda: {"transform": lambda r: r, "storage_options": options},
        extra_checks=[quotas_kept],
    )


def classes_kept(dm: BaseDataModule, saved: dict[str, Any]) -> None:
    assert saved["hparams"]["classes"] == ["cat", "dog"] and saved["hparams"]["mean"] == [0.5] * 3
    assert dm.classes == ["cat", "dog"] and dm.num_classes == 2


def image_stream_case(tmp_path: Path) -> RichCase:
    """Tar shards of solid-colour PNGs (red = id) with class names in ``txt``."""
    from datamodules.streaming import write_shards

    records = []
    for i in range(24):
        buffer = io.BytesIO()
        Image.new("RGB", (10, 8), (i, 0, 7)).save(buffer, "PNG")
        records.append(
            {"__key__": f"k{i:02d}", "png": buffer.getvalue(), "txt": ("cat", "dog")[i % 2]}
        )
    shards = write_shards(records, tmp_path / "shards", max_records=7)
    return RichCase(
        make=lambda: StreamingDataModule(
            shards,
            image_key="jpg;png",
            label_key="txt",
            classes=("cat", "dog"),
            image_size=8,
            normalize=True,
            mean=MEAN,
            std=STD,
            on_error="skip",
            shuffle_buffer=5,
            index_cache=tmp_path / "index",
            batch_size=4,
            num_workers=0,
        ),
        batch_ids=red_ids,
        unsaved=set(),
        extra_checks=[classes_kept],
    )


def chat_case(tmp_path: Path) -> RichCase:
    """Packed chat conversations from a JSONL file, the tokenizer given again on reload."""
    from tests.datamodules.chat.chat_data import arithmetic, chat_tokenizer

    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in arithmetic(40)))
    tokenizer = chat_tokenizer()
    return RichCase(
        make=lambda: ChatDataModule(
            train_file=path,
            tokenizer=tokenizer,
            train_on="assistant",
            packing=True,
            seq_length=96,
            overlong="truncate",
            token_cache=tmp_path / "tokens",
            tokenize_workers=0,
            val_split=0,
            batch_size=2,
            num_workers=0,
        ),
        batch_ids=lambda batch: [hash(tuple(row)) for row in batch["input_ids"].tolist()],
        unsaved={"tokenizer"},
        again=lambda: {"tokenizer": tokenizer},
    )


def preference_case(tmp_path: Path) -> RichCase:
    """Packed preference pairs from a JSONL file, the tokenizer given again on reload."""
    from tests.datamodules.chat.chat_data import chat_tokenizer
    from tests.datamodules.preference.pref_data import messages_pairs

    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in messages_pairs(40)))
    tokenizer = chat_tokenizer()
    return RichCase(
        make=lambda: PreferenceDataModule(
            train_file=path,
            tokenizer=tokenizer,
            packing=True,
            seq_length=192,
            overlong="truncate",
            token_cache=tmp_path / "tokens",
            tokenize_workers=0,
            val_split=0,
            batch_size=2,
            num_workers=0,
        ),
        batch_ids=lambda batch: [hash(tuple(row)) for row in batch["input_ids"].tolist()],
        unsaved={"tokenizer"},
        again=lambda: {"tokenizer": tokenizer},
    )


def image_text_conversations_case(tmp_path: Path) -> RichCase:
    """Conversations about 1-3 images per record, packed under both budgets."""
    from tests.datamodules.image_text.test_conversations import record_ids
    from tests.datamodules.image_text.vlm_data import vlm_tokenizer, write_conversation_tars

    write_conversation_tars(tmp_path / "train", range(24), shards=2)
    tokenizer = vlm_tokenizer()
    return RichCase(
        make=lambda: ImageTextDataModule(
            f"{tmp_path}/train/*.tar",
            messages_key="json",
            image_key="0.png;1.png;2.png",
            tokenizer=tokenizer,
            image_token="<image>",
            image_tokens=4,
            packing=True,
            seq_length=160,
            max_images=5,
            image_size=8,
            normalize=False,
            token_cache=tmp_path / "tokens",
            batch_size=2,
            num_workers=0,
        ),
        batch_ids=record_ids,
        unsaved={"tokenizer"},
        again=lambda: {"tokenizer": tokenizer},
    )


def time_series_case(tmp_path: Path) -> RichCase:
    """Windows drawn per epoch over a long frame split in time; the frame given again."""
    from tests.datamodules.time_series.series_data import frame_datamodule, long_frame, window_keys

    frame = long_frame()
    return RichCase(
        make=lambda: frame_datamodule(
            frame,
            store=tmp_path / "store",
            windows_per_series=3,
            val_split=0.2,
            test_split=np.int64(2),
            batch_size=4,
        ),
        batch_ids=lambda batch: [1000 * s + f for s, f in window_keys(batch, 6)],
        unsaved={"data"},
        again=lambda: {"data": frame},
    )


def audio_case(tmp_path: Path) -> RichCase:
    """Duration batches of a NeMo manifest, transcripts tokenized, log-mel on the device."""
    from tests.datamodules.audio.audio_data import batch_ids, write_numbered

    manifest = write_numbered(tmp_path / "audio")
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "clip": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return RichCase(
        make=lambda: AudioDataModule(
            manifest,
            tokenizer=tokenizer,
            features="log_mel",
            n_mels=16,
            max_duration=0.4,
            max_seconds=1.0,
            overlong="truncate",
            val_split=0.2,
            num_workers=0,
        ),
        batch_ids=batch_ids,
        unsaved={"tokenizer"},
        again=lambda: {"tokenizer": tokenizer},
    )


def detection_case(tmp_path: Path) -> RichCase:
    """COCO with aspect-ratio grouped batches, crowd kept, a v2 transform (not saved)."""
    from torchvision.transforms import v2

    from datamodules import DetectionDataModule
    from tests.datamodules.detection.detection_data import image_ids, write_contract_coco

    path = write_contract_coco(tmp_path / "coco")
    return RichCase(
        make=lambda: DetectionDataModule(
            path,
            crowd="keep",
            empty="drop",
            group_by_aspect_ratio=1,
            transforms=v2.RandomHorizontalFlip(0.5),
            batch_size=3,
            val_split=4,
            num_workers=0,
        ),
        batch_ids=image_ids,
        unsaved={"transforms"},
        again=lambda: {"transforms": v2.RandomHorizontalFlip(0.5)},
    )


def segmentation_case(tmp_path: Path) -> RichCase:
    """Image and mask folders, Hugging Face batches, a v2 transform (not saved)."""
    from torchvision.transforms import v2

    from datamodules import SegmentationDataModule
    from tests.datamodules.detection.segmentation_data import mask_ids, write_pairs

    pair = tuple(str(folder) for folder in write_pairs(tmp_path / "pairs", 20))
    return RichCase(
        make=lambda: SegmentationDataModule(
            pair,
            num_classes=20,
            batch_format="hf",
            transforms=v2.RandomHorizontalFlip(0.0),
            normalize=False,
            batch_size=3,
            val_split=4,
            num_workers=0,
        ),
        batch_ids=mask_ids,
        unsaved={"transforms"},
        again=lambda: {"transforms": v2.RandomHorizontalFlip(0.0)},
    )


CASES: dict[str, Callable[[Path], RichCase]] = {
    "tensor": tensor_case,
    "image-folder": image_case,
    "text-packed": packed_text_case,
    "text-token-budget": budget_text_case,
    "text-token-store": store_text_case,
    "text-token-files": token_files_case,
    "stream-mixed-1-worker": lambda p: stream_case(p, 1),
    "stream-mixed-2-workers": lambda p: stream_case(p, 2),
    "stream-image-records": image_stream_case,
    "chat-packed": chat_case,
    "image-text-conversations": image_text_conversations_case,
    "preference-packed": preference_case,
    "time-series": time_series_case,
    "audio-duration-batches": audio_case,
    "detection-grouped": detection_case,
    "segmentation-folders": segmentation_case,
}


@pytest.mark.parametrize("name", list(CASES))
def test_checkpoint_is_plain_data_and_rebuilds_and_resumes(
    name: str, tmp_path: Path, read_without_the_library: Reader
) -> None:
    case = CASES[name](tmp_path)
    original = case.make()
    original.setup("fit")
    assert set(original.unsaved_arguments) == case.unsaved
    rebuilt_rest: dict[tuple[int, int], list[list[int]]] = {}

    def check(path: Path, epoch: int, done: int) -> None:
        saved = read_without_the_library(path, type(original).__qualname__)
        assert saved["hparams"] == dict(original.hparams)
        assert saved["state"]["split_fingerprint"] == original.fingerprint
        for extra in case.extra_checks:
            extra(original, saved)
        rebuilt = type(original).load_from_checkpoint(path, **case.again())
        assert type(rebuilt) is type(original)
        assert dict(rebuilt.hparams) == dict(original.hparams)
        rebuilt.setup("fit")
        assert rebuilt.fingerprint == original.fingerprint
        if isinstance(rebuilt, StreamingDataModule):
            assert rebuilt.files == original.files  # Source objects, weights included
        # The rebuilt module restored the checkpoint's position: the rest of that epoch.
        rebuilt_rest[(epoch, done)] = [case.batch_ids(b) for b in rebuilt.train_dataloader()]

    reference = assert_resume_mid_epoch_is_exact(
        case.make, case.batch_ids, tmp_path / "ckpt", steps=lambda n: (2,), check_checkpoint=check
    )
    assert rebuilt_rest == {(0, 2): reference[0][2:]}


def test_a_mixed_stream_keeps_its_quotas_across_a_resume(tmp_path: Path) -> None:
    # Resumed in epoch 0 and in epoch 1, each run of an epoch is the uninterrupted run's rest,
    # so every epoch over both runs holds each of its records once: 48 web + 16 code, then (the
    # schedule) 32 + 32.
    case = stream_case(tmp_path, 2)
    reference = assert_resume_mid_epoch_is_exact(
        case.make, case.batch_ids, tmp_path / "ckpt", steps=lambda n: (3, n + 2)
    )
    epochs = [[i for batch in epoch for i in batch] for epoch in reference]
    for ids, quota in zip(epochs, ({"web": 48, "code": 16}, {"web": 32, "code": 32}), strict=True):
        assert Counter("code" if i >= 100 else "web" for i in ids) == quota
    assert len(set(epochs[0])) == 64  # epoch 0 is within each source's first pass
