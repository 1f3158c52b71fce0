"""ImageTextDataModule on shards written by webdataset (tars) and Hugging Face datasets (Parquet):
each pair once per epoch with and without workers, the tokenizers' ids, one caption of a list per
epoch, bad pairs under both policies, mixtures, HTTP and dataset indexes, a mid-epoch resume
through the Trainer, and a 2-rank DDP run (disjoint, even) resumed mid-epoch."""

from __future__ import annotations

import inspect
import io
import json
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from datamodules import ImageTextDataModule, Source
from datamodules.shards.errors import RecordError
from tests.counting_http import counting_server
from tests.datamodules.contract import assert_resume_mid_epoch_is_exact, run_ddp

ROOT = Path(__file__).resolve().parents[3]
PAIRS = 30  # in 3 tars of 10
CAPTIONS = 3  # per pair in the JSON member


def jpeg(i: int, size: int = 32) -> bytes:
    pixels = (np.arange(size * size * 3).reshape(size, size, 3) * (i + 1) % 256).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def caption_id(text: str) -> int:
    """``"pair 7"`` -> 7; ``"caption 2 of pair 7"`` -> 72 (the pair and the caption chosen)."""
    words = text.split()
    return int(words[-1]) if len(words) == 2 else int(words[-1]) * 10 + int(words[1])


def text_ids(batch: dict[str, Any]) -> list[int]:
    return [caption_id(t) for t in batch["text"]]


def write_tars(root: Path, pairs: range = range(PAIRS), prefix: str = "train") -> Path:
    import webdataset as wds

    root.mkdir(parents=True, exist_ok=True)
    with wds.ShardWriter(str(root / f"{prefix}-%06d.tar"), maxcount=10, verbose=0) as sink:
        for i in pairs:
            captions = [f"caption {j} of pair {i}" for j in range(CAPTIONS)]
            sink.write(
                {"__key__": f"{i:06d}", "jpg": jpeg(i), "txt": f"pair {i}",
                 "json": {"caption": captions, "id": i}}
            )  # fmt: skip
    return root


@pytest.fixture(scope="module")
def tars(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tars(tmp_path_factory.mktemp("tars"))


@pytest.fixture(scope="module")
def parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    datasets = pytest.importorskip("datasets")
    root = tmp_path_factory.mktemp("parquet")
    images = [Image.open(io.BytesIO(jpeg(i))) for i in range(PAIRS)]
    table = datasets.Dataset.from_dict(
        {"image": images, "caption": [f"pair {i}" for i in range(PAIRS)]}
    ).cast_column("image", datasets.Image())
    for k in range(2):  # two shards written by Hugging Face datasets
        table.select(range(k * 15, (k + 1) * 15)).to_parquet(str(root / f"part-{k}.parquet"))
    return root


def make(files: Any, **kwargs: Any) -> ImageTextDataModule:
    kwargs = {"batch_size": 4, "image_size": 16, "num_workers": 0, "shuffle_buffer": 8, **kwargs}
    return ImageTextDataModule(files, **kwargs)


def epoch_ids(loader: Any) -> list[int]:
    return [i for batch in loader for i in text_ids(batch)]


# ---------------------------------------------------------------------- exactly once
@pytest.mark.parametrize("workers", [0, 2])
def test_webdataset_tars_give_each_pair_once(tars: Path, workers: int) -> None:
    dm = make(str(tars / "train-{000000..000002}.tar"), val_files=str(tars / "*.tar"),
              num_workers=workers)  # fmt: skip
    loader = dm.train_dataloader()
    first = next(iter(loader))
    assert first["image"].dtype == torch.uint8 and first["image"].shape == (4, 3, 16, 16)
    assert set(first) == {"image", "text"}
    for _ in range(2):  # two epochs, reshuffled
        assert sorted(epoch_ids(loader)) == list(range(PAIRS))
    assert sorted(epoch_ids(dm.val_dataloader())) == list(range(PAIRS))
    assert dm.split_size("train") == PAIRS and len(loader) == 8


@pytest.mark.parametrize("workers", [0, 2])
def test_hf_parquet_with_an_image_feature_gives_each_pair_once(parquet: Path, workers: int) -> None:
    dm = make(str(parquet), text_key="caption", image_key="image", num_workers=workers)
    ids = epoch_ids(dm.train_dataloader())
    assert sorted(ids) == list(range(PAIRS))
    assert dm.shards["train"][0].fmt == "parquet"


def test_images_are_normalised_on_the_device_as_the_image_kinds_do(tars: Path) -> None:
    dm = make(str(tars), normalize=True, shuffle=False)
    batch = next(iter(dm.train_dataloader()))
    out = dm.on_after_batch_transfer(batch, 0)
    mean = torch.tensor(dm.mean).view(1, 3, 1, 1)
    std = torch.tensor(dm.std).view(1, 3, 1, 1)
    assert out["image"].dtype == torch.float32
    torch.testing.assert_close(out["image"], (batch["image"].float() / 255 - mean) / std)
    assert "ResizeCenterCrop(size=16" in repr(dm.eval_transforms)
    assert dm.work == "decode"


# ---------------------------------------------------------------------- tokenizers
def bpe() -> Any:
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    model = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    model.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=60, special_tokens=["<pad>", "<unk>"])
    model.train_from_iterator([f"caption {j} of pair {i}" for i in range(50) for j in range(3)],
                              trainer)  # fmt: skip
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=model, pad_token="<pad>",
                                                unk_token="<unk>")  # fmt: skip
    return model, fast


def eval_pairs(dm: ImageTextDataModule) -> list[dict[str, Any]]:
    """The pairs of the val split, in file order, each with its caption."""
    return list(dm.val_dataloader())


def test_a_transformers_tokenizer_gives_its_own_ids_padded(tars: Path) -> None:
    _, fast = bpe()
    # In 2 workers (the tokenizer pickled to them); the same worker blocks in both loaders.
    dm = make(str(tars), val_files=str(tars), tokenizer=fast, max_length=5, num_workers=2)
    plain = make(str(tars), val_files=str(tars), num_workers=2)
    texts = [t for batch in eval_pairs(plain) for t in batch["text"]]
    batches = eval_pairs(dm)
    ids = torch.cat([b["input_ids"] for b in batches])
    mask = torch.cat([b["attention_mask"] for b in batches])
    assert ids.dtype == torch.int64 and ids.shape == (PAIRS, 5)
    pad = fast.pad_token_id
    for row, m, text in zip(ids.tolist(), mask.tolist(), texts, strict=True):
        expected = fast(text, truncation=True, max_length=5)["input_ids"]
        assert row == expected + [pad] * (5 - len(expected))
        assert m == [1] * len(expected) + [0] * (5 - len(expected))
    assert set(batches[0]) == {"image", "input_ids", "attention_mask"}


def test_a_tokenizers_tokenizer_and_open_clips_tokenizer_as_a_callable(tars: Path) -> None:
    model, _ = bpe()
    dm = make(str(tars), val_files=str(tars), text_key="json.caption", tokenizer=model,
              max_length=3)  # fmt: skip
    plain = make(str(tars), val_files=str(tars), text_key="json.caption")
    texts = [t for batch in eval_pairs(plain) for t in batch["text"]]
    rows = torch.cat([b["input_ids"] for b in eval_pairs(dm)]).tolist()
    assert rows == [model.encode(t).ids[:3] for t in texts]  # all long: cut, never padded
    assert model.truncation is None  # the tokenizer given is left as it was

    open_clip = pytest.importorskip("open_clip")
    clip = open_clip.tokenizer.SimpleTokenizer()  # ships its vocabulary
    dm = make(str(tars), val_files=str(tars), tokenizer=clip)
    batches = eval_pairs(dm)
    texts = [t for batch in eval_pairs(make(str(tars), val_files=str(tars))) for t in batch["text"]]
    ids = torch.cat([b["input_ids"] for b in batches])
    assert torch.equal(ids, clip(texts))  # open_clip's own (N, 77), zero-padded
    assert torch.equal(torch.cat([b["attention_mask"] for b in batches]), (ids != 0).long())


# ---------------------------------------------------------------------- captions
def test_a_list_of_captions_gives_one_per_epoch_and_all_over_the_epochs(tars: Path) -> None:
    dm = make(str(tars), text_key="json.caption", num_workers=2)
    loader = dm.train_dataloader()
    epochs = [epoch_ids(loader) for _ in range(CAPTIONS)]
    for ids in epochs:  # each pair once per epoch, with one of its captions
        assert sorted(i // 10 for i in ids) == list(range(PAIRS))
    for pair in range(PAIRS):
        chosen = [next(i % 10 for i in ids if i // 10 == pair) for ids in epochs]
        assert sorted(chosen) == list(range(CAPTIONS)), pair  # all 3 over 3 epochs
    again = make(str(tars), text_key="json.caption")  # the same order from (seed, key)
    loader = again.train_dataloader()
    assert [sorted(epoch_ids(loader)) for _ in range(CAPTIONS)] == [sorted(e) for e in epochs]
    other = make(str(tars), text_key="json.caption", shuffle_seed=5).train_dataloader()
    assert sorted(epoch_ids(other)) != sorted(epochs[0])


def test_resume_mid_epoch_is_exact_and_keeps_the_captions(tars: Path, tmp_path: Path) -> None:
    def plain_data(path: Path, epoch: int, done: int) -> None:
        saved = torch.load(path, weights_only=True)  # no pickled objects: plain data
        state = saved["ImageTextDataModule"]
        assert state["split_sizes"]["train"] == PAIRS
        assert saved["datamodule_hyper_parameters"]["text_key"] == "json.caption"

    assert_resume_mid_epoch_is_exact(
        lambda: make(str(tars), text_key="json.caption", batch_size=6), text_ids, tmp_path,
        check_checkpoint=plain_data,
    )  # fmt: skip


def test_a_resume_on_another_worker_count_gives_the_rest_of_the_epoch(
    tars: Path, tmp_path: Path
) -> None:
    from lightning.pytorch.callbacks import ModelCheckpoint

    from tests.datamodules.contract import quiet_trainer
    from tests.recording import RecordingModel

    full = RecordingModel(text_ids)
    every = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1,
                            filename="{epoch}-{step}")  # fmt: skip
    quiet_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[every]).fit(
        full, datamodule=make(str(tars), text_key="json.caption", batch_size=6)
    )
    (seen,) = full.train_epochs()
    resumed = RecordingModel(text_ids)
    quiet_trainer(max_epochs=1).fit(
        resumed, datamodule=make(str(tars), text_key="json.caption", batch_size=6, num_workers=2),
        ckpt_path=tmp_path / "epoch=0-step=2.ckpt",
    )  # fmt: skip
    (rest,) = resumed.train_epochs()
    assert len(rest) == len(seen) - 2  # (elastic: the rest re-split over 2 workers)
    assert sorted(i for b in rest for i in b) == sorted(i for b in seen[2:] for i in b)


# ---------------------------------------------------------------------- inputs
def test_sources_mix_by_weight_and_http_and_dataset_indexes_read(
    tars: Path, tmp_path: Path
) -> None:
    other = write_tars(tmp_path / "other", range(100, 120), prefix="other")
    dm = make([Source(str(tars / "*.tar"), weight=3, name="a"),
               Source(str(other / "*.tar"), weight=2, name="b")])  # fmt: skip
    assert dm.quotas(0) == {"a": 30, "b": 20}
    ids = epoch_ids(dm.train_dataloader())
    assert sorted(ids) == [*range(PAIRS), *range(100, 120)]
    from datamodules.shards.index_cli import index_main

    index = tmp_path / "train.index.json"
    assert index_main([str(tars / "*.tar"), "--output", str(index)]) == 0
    assert json.loads(index.read_text())["__kind__"] == "wids-shard-index-v1"
    assert sorted(epoch_ids(make(str(index)).train_dataloader())) == list(range(PAIRS))
    with counting_server(tars) as server:
        dm = make(f"{server.url}/train-{{000000..000002}}.tar")
        assert sorted(epoch_ids(dm.train_dataloader())) == list(range(PAIRS))


# ---------------------------------------------------------------------- bad pairs
@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import webdataset as wds

    root = tmp_path_factory.mktemp("bad")
    for name, broken in (("bad", (3, 6)), ("nocap", (6,))):
        with wds.ShardWriter(str(root / f"{name}-%06d.tar"), maxcount=100, verbose=0) as sink:
            for i in range(10):
                record = {"__key__": f"{i:06d}", "jpg": jpeg(i), "txt": f"pair {i}"}
                if i == 3 and 3 in broken:
                    record["jpg"] = b"not a jpeg"
                if i == 6 in broken:
                    del record["txt"]
                sink.write(record)
    return root


def test_bad_pairs_raise_naming_shard_and_key_or_are_skipped_and_counted(bad: Path) -> None:
    shard = str(bad / "bad-000000.tar")
    with pytest.raises(RecordError, match=r"bad-000000\.tar.*key '000003'"):
        epoch_ids(make(shard, shuffle=False).train_dataloader())
    nocap = str(bad / "nocap-000000.tar")
    with pytest.raises(RecordError, match=r"nocap-000000\.tar.*key '000006'.*no caption 'txt'"):
        epoch_ids(make(nocap, num_workers=2).train_dataloader())
    dm = make(shard, on_error="skip", val_files=shard)
    with pytest.warns(RuntimeWarning, match="left out 1 bad image record"):
        ids = [i for b in dm.val_dataloader() for i in text_ids(dm.on_after_batch_transfer(b, 0))]
    assert sorted(set(ids)) == [0, 1, 2, 4, 5, 7, 8, 9]  # (a short batch repeats none)
    assert dm.skipped.total == 2 and dm.skipped.counts == {shard: 2}
    messages = sorted(dm.skipped.messages)
    assert "key '000003'" in messages[0] and "field 'jpg'" in messages[0]
    assert "key '000006'" in messages[1] and "no caption 'txt'" in messages[1]


#: Pairs cut short: their JPEG header reads (setup keeps them), their pixels do not decode.
CUT = (0, 1, 6, 7)


@pytest.fixture(scope="module")
def cut(tmp_path_factory: pytest.TempPathFactory) -> str:
    import webdataset as wds

    root = tmp_path_factory.mktemp("cut")
    with wds.ShardWriter(str(root / "cut-%06d.tar"), maxcount=100, verbose=0) as sink:
        for i in range(12):
            image = jpeg(i)[:40] if i in CUT else jpeg(i)
            sink.write({"__key__": f"{i:06d}", "jpg": image, "txt": f"pair {i}"})
    return str(root / "cut-000000.tar")


def cut_dm(shard: str, **kwargs: Any) -> ImageTextDataModule:
    # split_seed 8 (0 workers) and 2 (2 workers) shuffle two bad pairs into the first batch of
    # a worker, before it read any good one, and again later in the epoch.
    return make(shard, batch_size=2, shuffle_buffer=4, on_error="skip", **kwargs)


@pytest.mark.parametrize(("workers", "seed"), [(0, 8), (2, 2)])
def test_a_batch_of_only_bad_pairs_is_filled_wherever_it_falls(
    cut: str, workers: int, seed: int
) -> None:
    dm = cut_dm(cut, num_workers=workers, split_seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (the rank-0 count of left-out pairs)
        batches = [text_ids(b) for b in dm.train_dataloader()]
    good = [i for i in range(12) if i not in CUT]
    assert len(batches) == 6 and min(map(len, batches)) >= 1  # no batch empty, none missing
    repeats = Counter(i for b in batches for i in b) - Counter(good)
    filled = [m for m in dm.skipped.messages if "repeated to fill" in m]
    assert sorted(set(i for b in batches for i in b)) == good  # every good pair delivered
    assert sum(repeats.values()) == len(filled) >= 1  # the fills, each reported as repeated
    assert len(repeats) <= max(workers, 1)  # the first good one of each worker's share fills
    assert dm.skipped.total == len(CUT) + len(filled)
    assert sorted(m.split("key '")[1][:6] for m in dm.skipped.messages if m not in filled) == [
        f"{i:06d}" for i in CUT
    ]


def test_a_resume_around_a_batch_of_only_bad_pairs_is_exact(cut: str, tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert_resume_mid_epoch_is_exact(lambda: cut_dm(cut, split_seed=8), text_ids, tmp_path)


def test_a_caption_key_absent_from_every_record_is_named(bad: Path, parquet: Path) -> None:
    shard = str(bad / "bad-000000.tar")
    with pytest.raises(RecordError, match=r"key '000000'.*no caption 'json.caption'"):
        epoch_ids(make(shard, text_key="json.caption", shuffle=False).train_dataloader())
    with pytest.raises(RecordError, match=r"no caption.*every record of this batch is bad"):
        epoch_ids(make(shard, text_key="caption", on_error="skip").train_dataloader())
    dm = make(str(parquet), text_key="txt", image_key="image")
    with pytest.raises(ValueError, match=r"part-0\.parquet has no column 'txt'.*'caption'"):
        dm.setup()


# ---------------------------------------------------------------------- arguments
def test_the_signature_is_the_contracts_and_conversation_arguments_need_messages_key(
    tars: Path,
) -> None:
    names = list(inspect.signature(ImageTextDataModule).parameters)
    assert names[:27] == [
        "train_files", "val_files", "test_files", "image_key", "text_key", "messages_key",
        "tokenizer", "max_length", "chat_template", "train_on", "image_token", "image_tokens",
        "packing", "seq_length", "max_images", "overlong", "image_size", "decode", "normalize",
        "mean", "std", "shuffle_buffer", "on_error", "storage_options", "retries", "timeout",
        "cache_dir",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="messages_key='messages' needs tokenizer="):
        make(str(tars), messages_key="messages")
    with pytest.raises(ValueError, match=r"packing=True.*apply to conversations.*messages_key="):
        make(str(tars), packing=True)
    with pytest.raises(TypeError, match="tokenizer=5 is not accepted"):
        make(str(tars), tokenizer=5)
    with pytest.raises(ValueError, match="text_key='json.' is not accepted"):
        make(str(tars), text_key="json.")
    with pytest.raises(ValueError, match="val_split=0.1 does not apply to ImageTextDataModule"):
        make(str(tars), val_split=0.1)
    with pytest.raises(TypeError, match="max_length"):
        make(str(tars), max_length="77")
    dm = make(str(tars), tokenizer=bpe()[1])
    assert "tokenizer" not in dm.hparams and dm.hparams["text_key"] == "txt"


# ---------------------------------------------------------------------- DDP
def ddp_factory(root: str) -> tuple[ImageTextDataModule, Any]:
    """Factory for tests/ddp_runner.py: the same pairs in every process."""
    return make(f"{root}/*.tar", text_key="json.caption", batch_size=3), text_ids


def test_two_ranks_are_disjoint_and_even_and_resume_mid_epoch(tars: Path, tmp_path: Path) -> None:
    from tests.datamodules.contract import ContractCase

    case = ContractCase(
        make=make,
        batch_ids=text_ids,
        num_samples=PAIRS,
        ddp_factory=f"{__name__}:ddp_factory",
        ddp_kwargs={"root": str(tars)},
    )
    ckpts = tmp_path / "ckpt"
    full = run_ddp(case, tmp_path / "full", epochs=1, extra=("--ckpt-dir", str(ckpts)))
    batches = [r["train"][0] for r in full]
    assert [len(b) for b in batches] == [5, 5]  # 15 pairs per rank, batches of 3
    seen = [i // 10 for b in batches for batch in b for i in batch]
    assert sorted(seen) == list(range(PAIRS))  # disjoint and complete
    resumed = run_ddp(case, tmp_path / "resumed", epochs=1,
                      extra=("--resume", str(ckpts / "epoch=0-step=2.ckpt")))  # fmt: skip
    for before, after in zip(full, resumed, strict=True):
        assert after["train"][0] == before["train"][0][2:]  # the same pairs and captions
