"""ImageTextDataModule's conversations about images (``messages_key=``): the expansion against
transformers' LlavaProcessor, images in placeholder order, masks, packing under both budgets,
placeholder mismatches, overlong records, DDP and resume."""

from __future__ import annotations

import io
import json
import tarfile
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

from datamodules import ImageTextDataModule
from datamodules.conversations import ConversationError
from tests.datamodules.contract import ContractCase, assert_resume_mid_epoch_is_exact, run_ddp
from tests.datamodules.image_text.vlm_data import (
    png,
    record,
    vlm_tokenizer,
    write_conversation_tars,
)

transformers = pytest.importorskip("transformers")

RECORDS = 36
IMAGE_TOKENS = 4
KEYS = "0.png;1.png;2.png"


@pytest.fixture(scope="module")
def tok() -> Any:
    return vlm_tokenizer()


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vlm")
    write_conversation_tars(root / "train", range(RECORDS), shards=3)
    write_conversation_tars(root / "val", range(100, 106), shards=1, prefix="val")
    return root


def make(root: Path | str, tok: Any, files: Any = None, **kwargs: Any) -> ImageTextDataModule:
    options: dict[str, Any] = {
        "messages_key": "json", "image_key": KEYS, "tokenizer": tok, "image_tokens": IMAGE_TOKENS,
        "image_size": 8, "batch_size": 3, "num_workers": 0, "normalize": False,
        "token_cache": Path(root) / "cache",
    }  # fmt: skip
    options.update(kwargs)
    return ImageTextDataModule(files or f"{root}/train/*.tar", **options)


def codes(pixels: torch.Tensor) -> list[tuple[int, int]]:
    """``(record, k)`` of each image (uint8, or float in [0, 1] after the device step)."""
    values = pixels.float() * (255.0 if pixels.is_floating_point() else 1.0)
    means = values.mean(dim=(2, 3)).round().long().tolist()
    return [(r + 256 * g, b) for r, g, b in means]


def record_ids(batch: dict[str, Any]) -> list[int]:
    """The records of a batch in order: those of its images numbered 0."""
    return [r for r, k in codes(batch["pixel_values"]) if k == 0]


def images_of(i: int) -> int:
    return 1 + i % 3


def in_order(rows: list[int]) -> list[tuple[int, int]]:
    """The codes of the images of records ``rows``, record by record, in placeholder order."""
    return [(i, k) for i in rows for k in range(images_of(i))]


# ---------------------------------------------------------------------- the expansion
@pytest.mark.parametrize("n", [1, 2])
def test_input_ids_are_the_llava_processors_for_the_same_conversation(
    tmp_path: Path, tok: Any, n: int
) -> None:
    write_conversation_tars(tmp_path / "train", range(4), shards=1, images_of=lambda i: n)
    dm = make(tmp_path, tok, batch_size=1, shuffle=False)
    batches = list(dm.train_dataloader())
    patch, crop = 4, 8  # (8 / 4)^2 = 4 image tokens per image, LLaVA's "default" strategy
    processor = transformers.LlavaProcessor(
        image_processor=transformers.CLIPImageProcessor(
            size={"shortest_edge": crop}, crop_size={"height": crop, "width": crop}
        ),
        tokenizer=tok, patch_size=patch, vision_feature_select_strategy="default",
        num_additional_image_tokens=1, chat_template=tok.chat_template,
    )  # fmt: skip
    for i, batch in enumerate(batches):
        text = tok.apply_chat_template(record(i, n)["messages"], tokenize=False)
        images = [np.zeros((8, 8, 3), np.uint8)] * n
        theirs = processor(images=images, text=text, return_tensors="np")["input_ids"][0]
        assert batch["input_ids"][0].tolist() == theirs.tolist()
        assert int((batch["input_ids"] == dm.image_token_id).sum()) == n * IMAGE_TOKENS
        assert codes(batch["pixel_values"]) == [(i, k) for k in range(n)]


def test_labels_are_the_assistant_tokens_and_never_an_image_position(
    shards: Path, tok: Any
) -> None:
    dm = make(shards, tok, shuffle=False)
    for batch in dm.train_dataloader():
        ids, labels = batch["input_ids"], batch["labels"]
        assert not (labels[ids == dm.image_token_id] != -100).any()
        for row, i in enumerate(record_ids(batch)):
            trained = ids[row][labels[row] != -100].tolist()
            answer = record(i, images_of(i))["messages"][1]["content"]
            assert tok.decode(trained) == answer + "<|im_end|>\n"  # the turn's text, as chat
            assert (labels[row][batch["attention_mask"][row] == 0] == -100).all()  # padding


# ---------------------------------------------------------------------- image order
def test_pixel_values_are_the_images_in_placeholder_order_row_by_row(
    shards: Path, tok: Any
) -> None:
    dm = make(shards, tok, val_files=f"{shards}/val/*.tar")
    dm.setup()
    for loader, expected in ((dm.val_dataloader(), range(100, 106)),
                             (dm.train_dataloader(), range(RECORDS))):  # fmt: skip
        seen = []
        for batch in loader:
            rows = record_ids(batch)
            assert codes(batch["pixel_values"]) == [
                (i, k) for i in rows for k in range(images_of(i))
            ]
            per_row = (batch["input_ids"] == dm.image_token_id).sum(1) // IMAGE_TOKENS
            assert per_row.tolist() == [images_of(i) for i in rows]
            assert batch["pixel_values"].dtype == torch.uint8
            assert batch["pixel_values"].shape[1:] == (3, 8, 8)
            seen += rows
        assert sorted(seen) == list(expected)


def test_a_conversation_without_placeholders_gets_one_per_image_before_the_user_text(
    tmp_path: Path, tok: Any
) -> None:
    write_conversation_tars(tmp_path / "train", range(6), shards=1, placeholders=False)
    dm = make(tmp_path, tok, shuffle=False, batch_size=1)
    for i, batch in enumerate(dm.train_dataloader()):
        messages = record(i, images_of(i))["messages"]  # the same text with placeholders
        assert (
            batch["input_ids"][0].tolist()
            == dm.conversations.renderer({"messages": messages, "images": images_of(i), "key": i})[
                0
            ].tolist()
        )


# ---------------------------------------------------------------------- packing
@pytest.mark.parametrize("workers", [0, 2])
def test_packing_keeps_both_budgets_and_every_record_whole_once(
    shards: Path, tok: Any, workers: int
) -> None:
    dm = make(shards, tok, packing=True, seq_length=160, max_images=5, batch_size=2,
              num_workers=workers)  # fmt: skip
    dm.setup()
    epochs = []
    loader = dm.train_dataloader()
    for _ in range(2):
        seen = []
        for batch in loader:
            assert batch["input_ids"].shape[0] <= 2 and batch["input_ids"].shape[1] == 160
            assert len(batch["pixel_values"]) <= 5
            assert len(batch["pixel_values"]) * IMAGE_TOKENS == int(
                (batch["input_ids"] == dm.image_token_id).sum()
            )
            rows = record_ids(batch)
            assert codes(batch["pixel_values"]) == [
                (i, k) for i in rows for k in range(images_of(i))
            ]
            # A record's tokens are one piece of one row: its images' blocks are in it.
            for row in range(batch["input_ids"].shape[0]):
                docs = batch["document_ids"][row]
                starts = (batch["position_ids"][row] == 0) & (docs >= 0)
                assert int(starts.sum()) == len(set(docs[docs >= 0].tolist()))
            seen += rows
        epochs.append(seen)
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(RECORDS))
    assert epochs[0] != epochs[1]  # the planned batches are shuffled per epoch
    summary = dm.summary()
    assert "token efficiency" in summary and "image efficiency" in summary
    plan = dm.view("train").batches.plan
    assert plan.num_images == sum(images_of(i) for i in range(RECORDS))
    assert plan.batch_images().max() <= 5


def test_records_over_a_budget_are_dropped_and_counted_or_named_or_cut(
    shards: Path, tok: Any
) -> None:
    # Records with 3 images go over max_images=2.
    dm = make(shards, tok, packing=True, seq_length=200, max_images=2, batch_size=2)
    said = f"{RECORDS // 3} records over seq_length=200 or max_images=2 dropped (overlong='drop')"
    with pytest.warns(UserWarning) as caught:
        dm.setup()
    assert [str(w.message) for w in caught] == [f"ImageTextDataModule: {said}"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dm.setup()  # said once
    seen = sorted(i for b in dm.train_dataloader() for i in record_ids(b))
    assert seen == [i for i in range(RECORDS) if images_of(i) <= 2]
    assert f"  train overlong: {said}" in dm.summary().splitlines()
    assert "over a budget" not in dm.summary()  # one count, not a second one of 0
    with pytest.raises(ValueError, match=r"train-00000\d\.tar, record \d+: the record has .* "
                       r"3 image\(s\), over .*max_images=2, and overlong='error'"):  # fmt: skip
        make(shards, tok, packing=True, seq_length=200, max_images=2, overlong="error").setup()
    cut = make(shards, tok, packing=True, seq_length=200, max_images=2, overlong="truncate")
    cut.setup()
    kept = {}
    for batch in cut.train_dataloader():
        for i, k in codes(batch["pixel_values"]):
            kept.setdefault(i, []).append(k)
    assert sorted(kept) == list(range(RECORDS))
    assert all(ks == list(range(min(images_of(i), 2))) for i, ks in kept.items())


# ---------------------------------------------------------------------- bad records
@pytest.fixture(scope="module")
def mismatched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mismatch")
    (root / "train").mkdir()
    with tarfile.open(root / "train" / "train-000000.tar", "w") as tar:
        for i in range(4):
            n = 2 if i == 2 else 1
            members = {f"{k}.png": png(i, k) for k in range(n)}
            members["json"] = json.dumps(record(i, 1)).encode()  # one placeholder each
            for ext, data in members.items():
                info = tarfile.TarInfo(f"sample{i}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return root


def test_a_placeholder_count_that_differs_is_named_or_skipped_and_counted(
    mismatched: Path, tok: Any
) -> None:
    with pytest.raises(
        ConversationError,
        match=r"train-000000\.tar, record 3: key 'sample2': 1 image placeholder\(s\) .* but 2 "
        r"image\(s\) in the record",
    ):
        make(mismatched, tok).setup()
    dm = make(mismatched, tok, on_error="skip")
    seen = sorted(i for b in dm.train_dataloader() for i in record_ids(b))
    assert seen == [0, 1, 3]
    assert dm.skipped.records == 1 and "key 'sample2'" in dm.skipped.messages[0]


def test_bad_arguments_name_what_is_accepted(shards: Path, tok: Any) -> None:
    from tests.datamodules.chat.chat_data import chat_tokenizer

    with pytest.raises(ValueError, match=r"image_token='<image>' is not one token .*add_special"):
        make(shards, chat_tokenizer())
    with pytest.raises(ValueError, match="packing=True needs seq_length="):
        make(shards, tok, packing=True)
    with pytest.raises(ValueError, match="max_images=4 is a budget of packing=True"):
        make(shards, tok, max_images=4)
    with pytest.raises(ValueError, match="overlong='cut' is not accepted"):
        make(shards, tok, packing=True, seq_length=64, overlong="cut")
    with pytest.raises(ValueError, match="max_length=128 applies to caption pairs"):
        make(shards, tok, max_length=128)
    with pytest.raises(TypeError, match="image_tokens"):
        make(shards, tok, image_tokens="4")


def test_a_second_setup_maps_the_store_and_renders_nothing(shards: Path, tok: Any) -> None:
    first = make(shards, tok)
    first.setup()
    again = make(shards, tok)
    again.setup()
    assert again.dataset.store.path == first.dataset.store.path
    assert not again.dataset.store.built
    assert [record_ids(b) for b in again.train_dataloader()] == [
        record_ids(b) for b in first.train_dataloader()
    ]


# ---------------------------------------------------------------------- resume and DDP
def test_resume_mid_epoch_is_exact_through_the_trainer(
    shards: Path, tok: Any, tmp_path: Path
) -> None:
    def plain_data(path: Path, epoch: int, done: int) -> None:
        saved = torch.load(path, weights_only=True)  # no pickled objects: plain data
        assert saved["ImageTextDataModule"]["train_sampler"]["batches_consumed"] == done

    assert_resume_mid_epoch_is_exact(
        lambda: make(shards, tok, packing=True, seq_length=160, max_images=5, batch_size=2),
        record_ids, tmp_path, check_checkpoint=plain_data,
    )  # fmt: skip


def ddp_factory(root: str) -> tuple[ImageTextDataModule, Any]:
    """Factory for tests/ddp_runner.py: the same records in every process."""
    dm = make(root, vlm_tokenizer(), packing=True, seq_length=160, max_images=5, batch_size=2)
    return dm, record_ids


def test_two_ranks_are_disjoint_and_even_and_resume_mid_epoch(
    shards: Path, tok: Any, tmp_path: Path
) -> None:
    make(shards, tok).setup()  # (the store is built here once; the ranks map it)
    case = ContractCase(
        make=lambda: make(shards, tok), batch_ids=record_ids, num_samples=RECORDS,
        ddp_factory=f"{__name__}:ddp_factory", ddp_kwargs={"root": str(shards)},
    )  # fmt: skip
    ckpts = tmp_path / "ckpt"
    full = run_ddp(case, tmp_path / "full", epochs=1, extra=("--ckpt-dir", str(ckpts)))
    batches = [r["train"][0] for r in full]
    assert len(batches[0]) == len(batches[1]) > 2  # even
    seen = [i for b in batches for batch in b for i in batch]
    planned = make(shards, tok, packing=True, seq_length=160, max_images=5, batch_size=2)
    planned.setup()
    repeated = 2 * len(batches[0]) - planned.view("train").batches.num_batches
    assert repeated in (0, 1)  # an odd count of planned batches repeats one to stay even
    if not repeated:
        assert sorted(seen) == list(range(RECORDS))  # disjoint and complete
    else:
        assert set(seen) == set(range(RECORDS))
    resumed = run_ddp(case, tmp_path / "resumed", epochs=1,
                      extra=("--resume", str(ckpts / "epoch=0-step=2.ckpt")))  # fmt: skip
    for before, after in zip(full, resumed, strict=True):
        assert after["train"][0] == before["train"][0][2:]
    # Elastic: the same checkpoint on one process gives the rest of both ranks' batches.
    from tests.datamodules.contract import quiet_trainer
    from tests.recording import RecordingModel

    alone = RecordingModel(record_ids)
    quiet_trainer(max_epochs=1).fit(
        alone, datamodule=ddp_factory(str(shards))[0], ckpt_path=ckpts / "epoch=0-step=2.ckpt"
    )
    (rest,) = alone.train_epochs()
    total = planned.view("train").batches.num_batches
    assert len(rest) == total - 4  # the planned batches not consumed, none repeated now
    ahead = [b for r in full for b in r["train"][0][2:]]
    assert all(b in ahead for b in rest)
    done = [i for r in full for b in r["train"][0][:2] for i in b]
    assert sorted(done + [i for b in rest for i in b]) == list(range(RECORDS))


# ---------------------------------------------------------------------- inputs and mixtures
def test_parquet_rows_with_a_list_of_images_and_a_messages_column(tmp_path: Path, tok: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = range(10)
    table = pa.table({
        "images": [[{"bytes": png(i, k), "path": None} for k in range(images_of(i))] for i in rows],
        "messages": [record(i, images_of(i))["messages"] for i in rows],
    })  # fmt: skip
    (tmp_path / "train").mkdir()
    pq.write_table(table, tmp_path / "train" / "part-0.parquet", row_group_size=4)
    dm = make(tmp_path, tok, f"{tmp_path}/train/*.parquet", image_key="images",
              messages_key="messages", shuffle=False)  # fmt: skip
    seen = []
    for batch in dm.train_dataloader():
        rows_seen = record_ids(batch)
        assert codes(batch["pixel_values"]) == in_order(rows_seen)
        seen += rows_seen
    assert seen == list(rows)


def mixed_sources(root: Path) -> list[Any]:
    from datamodules import Source

    write_conversation_tars(root / "captions", range(200, 212), shards=1, prefix="cap",
                            images_of=lambda i: 1)  # fmt: skip
    write_conversation_tars(root / "vqa", range(300, 306), shards=1, prefix="vqa",
                            images_of=lambda i: 2)  # fmt: skip
    return [
        Source(f"{root}/captions/*.tar", weight=[[0, 3.0], [1, 1.0]], name="captions"),
        Source(f"{root}/vqa/*.tar", weight=1.0, name="vqa"),
    ]


def test_a_mix_of_sources_follows_its_schedule_in_batches_of_one_source(
    tmp_path: Path, tok: Any
) -> None:
    sources = mixed_sources(tmp_path)
    dm = make(tmp_path, tok, sources, batch_size=2)
    dm.setup()
    loader = dm.train_dataloader()
    # 6 batches of captions and 3 of vqa per pass; weights 3:1, then 1:1, over 9 batches.
    assert dm.quotas(0) == {"captions": 7, "vqa": 2}
    assert dm.quotas(1) == {"captions": 5, "vqa": 4}  # a tie goes to the first source
    records: dict[int, list[int]] = {}
    for epoch in range(2):
        counts = {"captions": 0, "vqa": 0}
        for batch in loader:
            rows = record_ids(batch)
            kind = {r // 100 for r in rows}
            assert len(kind) == 1  # a batch holds one source's records
            counts["captions" if kind == {2} else "vqa"] += 1
            records.setdefault(epoch, []).extend(rows)
            assert codes(batch["pixel_values"]) == [
                (i, k) for i in rows for k in range(i // 100 - 1)
            ]
        assert counts == dm.quotas(epoch)
    # Epoch 0: the captions' whole pass (12 records) and one batch of the next; 2 of 3 vqa
    # batches, no record twice; epoch 1 goes on with each source's run.
    first = records[0]
    assert set(range(200, 212)) <= set(first) and len([r for r in first if r < 300]) == 14
    vqa = [r for r in first if r >= 300]
    assert len(vqa) == len(set(vqa)) == 4
    both = [r for e in (0, 1) for r in records[e] if r >= 300]
    assert sorted(both[:6]) == list(range(300, 306))  # vqa's first pass complete, in epoch 1


def test_a_mix_resumes_mid_epoch_exactly(tmp_path: Path, tok: Any) -> None:
    sources = mixed_sources(tmp_path / "data")
    assert_resume_mid_epoch_is_exact(
        lambda: make(tmp_path, tok, sources, packing=True, seq_length=160, max_images=4,
                     batch_size=2),
        record_ids, tmp_path / "ckpt",
    )  # fmt: skip


def test_a_changed_mix_continues_on_resume_as_chats_does(
    tmp_path: Path, tok: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Captions (6 batches a pass) and vqa (3) at 3:1 then 1:1, interrupted after 2 of epoch
    # 0's 9 batches; resumed at 1:2: epoch 0 ends as planned, then the new mix.
    from lightning.pytorch.callbacks import ModelCheckpoint

    from datamodules import Source
    from tests.datamodules.contract import quiet_trainer
    from tests.recording import RecordingModel

    old = mixed_sources(tmp_path / "data")
    first = RecordingModel(record_ids)
    every = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=1, save_top_k=-1,
                            filename="{step}")  # fmt: skip
    quiet_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[every]).fit(
        first, datamodule=make(tmp_path, tok, old, batch_size=2)
    )
    planned = [i for b in first.train_epochs()[0] for i in b]
    new_sources = [Source(old[0].files, weight=1.0, name="captions"),
                   Source(old[1].files, weight=2.0, name="vqa")]  # fmt: skip
    new = make(tmp_path, tok, new_sources, batch_size=2)
    resumed = RecordingModel(record_ids)
    with caplog.at_level("INFO", logger="datamodules"):
        quiet_trainer(max_epochs=2).fit(
            resumed, datamodule=new, ckpt_path=tmp_path / "ckpt" / "step=2.ckpt"
        )
    assert (
        "'vqa' weight=1 -> weight=2" in caplog.text
        and "the new mix applies from epoch 1" in caplog.text
    )
    head = [i for b in first.train_epochs()[0][:2] for i in b]
    epochs = resumed.train_epochs()
    assert sorted(head + [i for b in epochs[0] for i in b]) == sorted(planned)  # each once
    later = [{r // 100 for r in b} for b in epochs[1]]
    assert all(len(kinds) == 1 for kinds in later)  # a batch holds one source's records
    assert [sum(k == {2} for k in later), sum(k == {3} for k in later)] == [
        new.quotas(1)["captions"],
        new.quotas(1)["vqa"],
    ]
    assert new.quotas(1) != make(tmp_path, tok, old, batch_size=2).quotas(1)  # the new weights


def test_pixel_values_are_normalised_on_the_device(shards: Path, tok: Any) -> None:
    dm = make(shards, tok, normalize=True, mean=(0.5, 0.25, 0.0), std=(0.5, 0.25, 1.0))
    batch = next(iter(dm.train_dataloader()))
    moved = dm.on_after_batch_transfer(dict(batch), 0)
    expected = batch["pixel_values"].float() / 255
    expected = (expected - torch.tensor([0.5, 0.25, 0.0]).view(1, 3, 1, 1)) / torch.tensor(
        [0.5, 0.25, 1.0]
    ).view(1, 3, 1, 1)
    assert moved["pixel_values"].dtype == torch.float32
    assert torch.allclose(moved["pixel_values"], expected)
    assert torch.equal(moved["input_ids"], batch["input_ids"])  # the rest as it was


def test_the_summary_is_logged_once_through_setup_fit_and_test(
    shards: Path, tok: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # As examples/train_vlm.py runs it: setup("fit") first, then fit (train and val), then test.
    from tests.datamodules.contract import quiet_trainer
    from tests.recording import RecordingModel

    val = f"{shards}/val/*.tar"
    dm = make(shards, tok, val_files=val, test_files=val, packing=True, seq_length=160,
              max_images=5, batch_size=2)  # fmt: skip
    dm.setup("fit")
    model = RecordingModel(record_ids)
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1)
    with caplog.at_level("INFO", logger="datamodules"):
        trainer.fit(model, datamodule=dm)
        trainer.test(model, datamodule=dm, verbose=False)
    summaries = [r for r in caplog.records if r.getMessage().startswith("ImageTextDataModule\n")]
    assert len(summaries) == 1 and "max_images" in summaries[0].getMessage()
    assert model.seen["val"] and model.seen["test"]  # both ran, and logged no second summary


class _CountingModel(pl.LightningModule):
    """Trains one parameter on the batch's image count (what LightningCLI needs of a model)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.weight * batch["pixel_values"].float().mean() + self.weight**2

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_lightning_cli_builds_it_with_a_tokenizer_from_its_file(
    shards: Path, tok: Any, tmp_path: Path
) -> None:
    from lightning.pytorch.cli import LightningCLI

    from tests.datamodules.chat.chat_data import tokenizer_config

    # <image> is among the saved tokenizer's special tokens.
    tokenizer = tokenizer_config(tok.backend_tokenizer, tmp_path / "tokenizer.json")
    args = {
        "--data.train_files": f"{shards}/train/*.tar", "--data.messages_key": "json",
        "--data.image_key": KEYS, "--data.tokenizer": tokenizer,
        "--data.chat_template": tok.chat_template, "--data.image_tokens": str(IMAGE_TOKENS),
        "--data.packing": "true", "--data.seq_length": "160", "--data.max_images": "5",
        "--data.image_size": "8", "--data.token_cache": str(tmp_path / "c"),
        "--data.num_workers": "0", "--trainer.max_steps": "2", "--trainer.accelerator": "cpu",
        "--trainer.logger": "false", "--trainer.enable_checkpointing": "false",
        "--trainer.enable_progress_bar": "false",
    }  # fmt: skip
    flat = [x for kv in args.items() for x in kv]
    cli = LightningCLI(
        _CountingModel, ImageTextDataModule, run=False, args=flat, save_config_callback=None
    )
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert cli.trainer.global_step == 2 and cli.datamodule.max_images == 5
    assert cli.datamodule.image_token_id == tok.convert_tokens_to_ids("<image>")


def test_http_shards_are_read_at_the_first_setup_then_the_store_serves_them(
    shards: Path, tok: Any, tmp_path: Path
) -> None:
    from tests.counting_http import counting_server

    size = sum(p.stat().st_size for p in (shards / "train").glob("*.tar"))
    with counting_server(shards / "train") as server:
        url = f"{server.url}/train-{{000000..000002}}.tar"
        dm = make(tmp_path, tok, url)
        seen = sorted(i for b in dm.train_dataloader() for i in record_ids(b))
        assert seen == list(range(RECORDS))
        assert server.total_bytes >= size  # every shard read (its index and its records)
        server.reset()
        again = make(tmp_path, tok, url, num_workers=2)
        seen = sorted(i for b in again.train_dataloader() for i in record_ids(b))
        assert seen == list(range(RECORDS))
        assert not again.dataset.store.built
        assert server.total_bytes < size / 10  # the images came from the store
