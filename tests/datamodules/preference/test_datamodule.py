"""PreferenceDataModule: the shared contract, ids and batches equal to TRL's, and the store."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

from datamodules import PreferenceDataModule
from tests.datamodules.chat.chat_data import CHATML, chat_tokenizer, raw_tokenizer
from tests.datamodules.contract import (
    ContractCase,
    DataModuleContract,
    quiet_trainer,
    run_ddp,
    split_ids,
)
from tests.datamodules.preference.pref_data import (
    messages_pairs,
    string_pairs,
    trl_batch,
    trl_rows,
    unpaired,
)
from tests.recording import RecordingModel

N = 54  # 43 train pairs with val_split=0.2: odd, so DDP shares differ by one


@functools.cache
def _lookup() -> dict[tuple[int, ...], int]:
    tokenizer = chat_tokenizer()
    out = {}
    for i, record in enumerate(messages_pairs(N, seed=1)):
        ids = tokenizer.apply_chat_template(
            record["prompt"] + record["chosen"], tokenize=True, return_dict=True
        )
        out[tuple(ids["input_ids"])] = i
    assert len(out) == N
    return out


def batch_ids(batch: dict[str, torch.Tensor]) -> list[int]:
    """A padded batch's pair ids, from its chosen rows (the first half)."""
    lookup = _lookup()
    pairs = len(batch["input_ids"]) // 2
    rows = zip(batch["input_ids"][:pairs], batch["attention_mask"][:pairs].bool(), strict=True)
    return [lookup[tuple(ids[mask].tolist())] for ids, mask in rows]


def ddp_datamodule(**kwargs: Any) -> tuple[PreferenceDataModule, Any]:
    """Factory for tests/ddp_runner.py: the same data in every process."""
    kwargs = {"val_split": 0.2, "batch_size": 4, "tokenize_workers": 0, **kwargs}
    pairs = messages_pairs(N, seed=1)
    return PreferenceDataModule(pairs, tokenizer=chat_tokenizer(), **kwargs), batch_ids


class TestPreferenceContract(DataModuleContract):
    @pytest.fixture
    def case(self) -> ContractCase:
        records, tokenizer = messages_pairs(N, seed=1), chat_tokenizer()
        return ContractCase(
            make=lambda **kw: PreferenceDataModule(
                records, tokenizer=tokenizer, tokenize_workers=0, **kw
            ),
            batch_ids=batch_ids,
            num_samples=N,
            ddp_factory="tests.datamodules.preference.test_datamodule:ddp_datamodule",
        )

    #: One DDP launch here (each process imports transformers): the contract's 2-rank run, then
    #: the elastic resume on 1 rank in this process.
    test_ddp_two_processes_disjoint_complete_even_and_resume_on_3_and_1 = None

    def test_ddp_two_processes_disjoint_complete_even_and_resume_on_1(
        self, case: ContractCase, tmp_path: Any
    ) -> None:
        checkpoints = tmp_path / "checkpoints"
        ranks = run_ddp(case, tmp_path / "two", extra=("--ckpt-dir", str(checkpoints)))
        dm, ids_of = ddp_datamodule()
        dm.setup("fit")
        assert [r["world"] for r in ranks] == [2, 2]
        for stage in ("train", "val"):
            for epoch in range(2):
                per_rank = [r[stage][epoch] for r in ranks]
                assert len(per_rank[0]) == len(per_rank[1]), f"{stage}: uneven batch counts"
                seen = [[i for b in batches for i in b] for batches in per_rank]
                assert not set(seen[0]) & set(seen[1])
                assert sorted(seen[0] + seen[1]) == split_ids(dm, stage)
        train, step = split_ids(dm, "train"), 2
        seen = [i for r in ranks for batch in r["train"][0][:step] for i in batch]
        model = RecordingModel(ids_of)
        ckpt = checkpoints / f"epoch=0-step={step}.ckpt"
        quiet_trainer(max_epochs=2).fit(model, datamodule=dm, ckpt_path=ckpt)
        epochs = model.train_epochs()
        assert sorted(seen + [i for batch in epochs[0] for i in batch]) == train
        assert sorted(i for batch in epochs[1] for i in batch) == train


def ours(records: list[dict[str, Any]], tokenizer: Any, **kwargs: Any) -> PreferenceDataModule:
    """A DataModule over ``records`` in order (no split, no shuffle), set up."""
    dm = PreferenceDataModule(
        records, tokenizer=tokenizer, val_split=0, shuffle=False, bucket=False,
        tokenize_workers=0, token_cache=False, **kwargs,
    )  # fmt: skip
    dm.setup("fit")
    return dm


@pytest.mark.parametrize(
    "records",
    [
        messages_pairs(24, seed=3),
        messages_pairs(24, seed=4, implicit=True),
        string_pairs(24, seed=5),
        string_pairs(24, seed=6, implicit=True),
    ],
    ids=["messages", "implicit-messages", "strings", "implicit-strings"],
)
def test_ids_masks_and_padded_batches_equal_trls(records: list[dict[str, Any]]) -> None:
    tokenizer = chat_tokenizer()
    assert any(len(r.get("prompt", r["chosen"])) > 3 for r in records)  # multi-turn prompts
    rows = trl_rows(records, tokenizer)
    dm = ours(records, tokenizer, batch_size=5)
    batches = list(dm.train_dataloader())
    for k, batch in enumerate(batches):
        expected = trl_batch(rows[5 * k : 5 * k + 5], dm.pad_id)
        assert set(batch) == set(expected)
        for key in expected:
            assert torch.equal(batch[key], expected[key]), (k, key)
    assert sum(len(b["input_ids"]) for b in batches) == 2 * len(records)


def test_a_tokenizers_tokenizer_with_chat_template_equals_trls_with_that_template() -> None:
    records = messages_pairs(6, seed=8)
    dm = ours(records, raw_tokenizer(), chat_template=CHATML, batch_size=6)
    tokenizer = chat_tokenizer()
    expected = trl_batch(trl_rows(records, tokenizer), dm.pad_id)
    batch = next(iter(dm.train_dataloader()))
    # The tokenizers.Tokenizer has no pad token: padding is 0 there (attention 0 alike).
    real = expected["attention_mask"].bool()
    assert torch.equal(batch["input_ids"][real], expected["input_ids"][real])
    assert torch.equal(batch["completion_mask"], expected["completion_mask"])


def test_string_pairs_with_a_tokenizers_tokenizer_end_with_the_eos_token_given() -> None:
    records = string_pairs(6, seed=9)
    with pytest.raises(ValueError, match=r"tokenizer has no eos_token: give eos_token="):
        ours(records, raw_tokenizer(), batch_size=6)
    dm = ours(records, raw_tokenizer(), eos_token="<|im_end|>", batch_size=6)
    expected = trl_batch(trl_rows(records, chat_tokenizer()), dm.pad_id)  # its EOS: <|im_end|>
    batch = next(iter(dm.train_dataloader()))
    real = expected["attention_mask"].bool()
    assert torch.equal(batch["attention_mask"], expected["attention_mask"])
    assert torch.equal(batch["input_ids"][real], expected["input_ids"][real])
    assert torch.equal(batch["completion_mask"], expected["completion_mask"])
    with pytest.raises(ValueError, match=r"eos_token='<nope>' is not accepted: use a token"):
        PreferenceDataModule(records, tokenizer=raw_tokenizer(), eos_token="<nope>")


def test_unpaired_feedback_batches() -> None:
    records = unpaired(10, seed=2)
    tokenizer = chat_tokenizer()
    dm = ours(records, tokenizer, batch_size=10)
    assert dm.kinds == {"pair": 0, "unpaired": 10} and not dm.paired
    batch = next(iter(dm.train_dataloader()))
    assert batch["label"].tolist() == [r["label"] for r in records]
    for row, record in enumerate(records):
        prompt = tokenizer.apply_chat_template(
            record["prompt"], tokenize=True, add_generation_prompt=True, return_dict=True
        )["input_ids"]
        full = tokenizer.apply_chat_template(
            record["prompt"] + record["completion"], tokenize=True, return_dict=True
        )["input_ids"]
        n = len(full)
        assert batch["input_ids"][row, :n].tolist() == full
        assert batch["attention_mask"][row].sum() == n
        assert batch["completion_mask"][row, :n].tolist() == [0] * len(prompt) + [1] * (
            n - len(prompt)
        )


def test_pairs_mixed_with_unpaired_feedback_are_refused() -> None:
    records = messages_pairs(3) + unpaired(3)
    with pytest.raises(ValueError, match="mix preference pairs and unpaired feedback"):
        ours(records, chat_tokenizer())


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"prompt": "a", "chosen": "b"}, "record has no 'rejected'"),
        ({"prompt": "a", "rejected": "b"}, "record has no 'chosen'"),
        ({"prompt": "a", "chosen": "", "rejected": "b"}, "'chosen' completion is empty"),
        (
            {
                "chosen": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "yes"},
                    {"role": "user", "content": "and?"},
                    {"role": "assistant", "content": "ok"},
                ],
                "rejected": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "no"},
                    {"role": "user", "content": "and?"},
                    {"role": "assistant", "content": "ok"},
                ],
            },
            "their prompts differ",
        ),
        ({"prompt": "a", "completion": "b", "label": 1}, "'label' is 1 \\(int\\), not a bool"),
        ({"prompt": "a", "chosen": "b", "rejected": [{"role": "user"}]}, "give both as strings"),
        ({"text": "a"}, "record has no 'chosen' and 'rejected'"),
    ],
    ids=["no-rejected", "no-chosen", "empty", "prompts-differ", "label", "kinds", "keys"],
)
def test_bad_records_are_named_with_file_and_line(
    tmp_path: Any, record: dict[str, Any], message: str
) -> None:
    import json

    path = tmp_path / "pairs.jsonl"
    good = string_pairs(2)
    path.write_text("".join(json.dumps(r) + "\n" for r in [*good, record]))
    dm = PreferenceDataModule(
        train_file=str(path), tokenizer=chat_tokenizer(), tokenize_workers=0, token_cache=False
    )
    with pytest.raises(ValueError, match=f"pairs.jsonl, line 3: .*{message}"):
        dm.setup("fit")
    skipping = PreferenceDataModule(
        train_file=str(path), tokenizer=chat_tokenizer(), tokenize_workers=0,
        token_cache=False, on_error="skip", val_split=0,
    )  # fmt: skip
    skipping.setup("fit")
    assert skipping.split_size("train") == 2 and skipping.skipped.total == 1


def test_message_lists_without_a_template_name_chat_template() -> None:
    dm = PreferenceDataModule(
        messages_pairs(2), tokenizer=raw_tokenizer(), tokenize_workers=0, token_cache=False
    )
    with pytest.raises(ValueError, match="<conversations>, row 1: .*chat_template="):
        dm.setup("fit")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"tokenizer": None}, ValueError, "tokenizer=None"),
        ({"packing": True}, ValueError, "seq_length"),
        ({"seq_length": 64}, ValueError, "packing=True"),
        ({"packing": True, "seq_length": 64, "max_length": 8}, ValueError, "max_length"),
        ({"overlong": "cut"}, ValueError, "overlong"),
        ({"tokenizer": "gpt2"}, TypeError, "tokenizer"),
        ({"pairs": "x.jsonl"}, TypeError, "pairs=str"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs: dict[str, Any], error: type, match: str) -> None:
    arguments = {"pairs": messages_pairs(2), "tokenizer": chat_tokenizer(), **kwargs}
    with pytest.raises(error, match=match):
        PreferenceDataModule(**arguments)


def test_files_of_every_format_give_the_same_batches(tmp_path: Any) -> None:
    import datasets

    records = messages_pairs(12, seed=9)
    tokenizer = chat_tokenizer()
    reference = [b["input_ids"] for b in ours(records, tokenizer, batch_size=4).train_dataloader()]
    dataset = datasets.Dataset.from_list(records)
    dataset.to_json(str(tmp_path / "pairs.jsonl"))
    dataset.to_parquet(str(tmp_path / "pairs.parquet"))
    dataset.save_to_disk(str(tmp_path / "saved"))
    for given in (
        {"pairs": dataset},
        {"train_file": str(tmp_path / "pairs.jsonl")},
        {"train_file": str(tmp_path / "pairs.parquet")},
        {"train_file": str(tmp_path / "saved")},
    ):
        dm = PreferenceDataModule(
            tokenizer=tokenizer, val_split=0, shuffle=False, bucket=False,
            tokenize_workers=0, token_cache=False, batch_size=4, **given,
        )  # fmt: skip
        dm.setup("fit")
        got = [b["input_ids"] for b in dm.train_dataloader()]
        assert len(got) == len(reference), given
        assert all(torch.equal(a, b) for a, b in zip(got, reference, strict=True)), given


def test_tokenized_once_a_second_setup_maps_the_store(tmp_path: Any) -> None:
    records = messages_pairs(16, seed=10)

    def make(**kw: Any) -> PreferenceDataModule:
        return PreferenceDataModule(
            records, tokenizer=chat_tokenizer(), token_cache=str(tmp_path), tokenize_workers=2,
            **kw,
        )  # fmt: skip

    first = make()
    first.setup("fit")
    assert first.split_datasets["train"].store.built
    second = make()
    second.setup("fit")
    assert not second.split_datasets["train"].store.built
    assert second.split_datasets["train"].path == first.split_datasets["train"].path
    other = make(max_length=1000)  # another limit: another store
    other.setup("fit")
    assert other.split_datasets["train"].path != first.split_datasets["train"].path


class _Model(RecordingModel):
    def __init__(self) -> None:
        super().__init__(lambda batch: batch["chosen_index"].flatten().tolist())


def test_lightning_cli_builds_it_with_a_tokenizer_from_its_file(tmp_path: Any) -> None:
    import json

    from lightning.pytorch.cli import LightningCLI

    from tests.datamodules.chat.chat_data import tokenizer_config

    tokenizer = tokenizer_config(raw_tokenizer(), tmp_path / "tokenizer.json")
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in messages_pairs(12)))
    args = {
        "--data.train_file": str(path), "--data.tokenizer": tokenizer,
        "--data.chat_template": CHATML, "--data.packing": "true", "--data.seq_length": "256",
        "--data.token_cache": str(tmp_path / "c"), "--data.val_split": "0",
        "--data.tokenize_workers": "0", "--data.num_workers": "0", "--trainer.max_steps": "2",
        "--trainer.accelerator": "cpu", "--trainer.logger": "false",
        "--trainer.enable_checkpointing": "false", "--trainer.enable_progress_bar": "false",
    }  # fmt: skip
    flat = [x for kv in args.items() for x in kv]
    cli = LightningCLI(
        _Model, PreferenceDataModule, run=False, args=flat, save_config_callback=None
    )
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert cli.trainer.global_step == 2 and cli.datamodule.seq_length == 256
    assert cli.datamodule.hparams["chat_template"] == CHATML


def test_remote_files_over_http_give_the_local_batches(tmp_path: Any) -> None:
    import json

    from tests.counting_http import counting_server

    records = messages_pairs(12, seed=13)
    (tmp_path / "data").mkdir()
    path = tmp_path / "data" / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    tokenizer = chat_tokenizer()
    local = [b["input_ids"] for b in ours(records, tokenizer, batch_size=4).train_dataloader()]
    with counting_server(tmp_path / "data") as server:
        dm = PreferenceDataModule(
            train_file=f"{server.url}/pairs.jsonl", tokenizer=tokenizer, val_split=0,
            shuffle=False, bucket=False, tokenize_workers=0, token_cache=str(tmp_path / "c"),
            batch_size=4,
        )  # fmt: skip
        dm.setup("fit")
        got = [b["input_ids"] for b in dm.train_dataloader()]
        assert server.total_bytes >= path.stat().st_size
    assert all(torch.equal(a, b) for a, b in zip(got, local, strict=True))
