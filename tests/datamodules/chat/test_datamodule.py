"""ChatDataModule: the shared contract, padded batches with their labels, and the store."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
import torch

from datamodules import ChatDataModule
from datamodules.conversations import store_build as build
from tests.datamodules.chat.chat_data import CHATML, arithmetic, chat_tokenizer, raw_tokenizer
from tests.datamodules.contract import (
    ContractCase,
    DataModuleContract,
    quiet_trainer,
    run_ddp,
    split_ids,
)
from tests.recording import RecordingModel

N = 54  # 43 train conversations with val_split=0.2: odd, so DDP shares differ by one


def numbered(n: int = N) -> list[dict[str, Any]]:
    """``n`` conversations, each with its number in its first question (distinct ids)."""
    records = arithmetic(n, seed=1, max_turns=2)
    for i, record in enumerate(records):
        first = next(m for m in record["messages"] if m["role"] == "user")
        first["content"] = f"id {i}: " + first["content"]
    return records


@functools.cache
def _lookup() -> dict[tuple[int, ...], int]:
    tokenizer = chat_tokenizer()
    out = {}
    for i, record in enumerate(numbered()):
        ids = tokenizer.apply_chat_template(record["messages"], tokenize=True, return_dict=True)
        out[tuple(ids["input_ids"])] = i
    assert len(out) == N
    return out


def batch_ids(batch: dict[str, torch.Tensor]) -> list[int]:
    """A padded batch's conversation ids: each row's tokens name it."""
    lookup = _lookup()
    rows = zip(batch["input_ids"], batch["attention_mask"].bool(), strict=True)
    return [lookup[tuple(ids[mask].tolist())] for ids, mask in rows]


def ddp_datamodule(**kwargs: Any) -> tuple[ChatDataModule, Any]:
    """Factory for tests/ddp_runner.py: the same data in every process."""
    kwargs = {"val_split": 0.2, "batch_size": 4, "tokenize_workers": 0, **kwargs}
    return ChatDataModule(numbered(), tokenizer=chat_tokenizer(), **kwargs), batch_ids


class TestChatContract(DataModuleContract):
    @pytest.fixture
    def case(self) -> ContractCase:
        records, tokenizer = numbered(), chat_tokenizer()
        return ContractCase(
            make=lambda **kw: ChatDataModule(
                records, tokenizer=tokenizer, tokenize_workers=0, **kw
            ),
            batch_ids=batch_ids,
            num_samples=N,
            ddp_factory="tests.datamodules.chat.test_datamodule:ddp_datamodule",
        )

    #: One DDP launch here (each process imports transformers): the contract's 2-rank run, then
    #: the elastic resume on 1 rank in this process (3 ranks are the text contract's).
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


def expected_labels(tokenizer: Any, record: dict[str, Any], train_on: str = "assistant") -> list:
    """The ids with -100 outside the assistant messages' parts, found on the rendered text:
    each assistant message's content and the end of its turn (ChatML: ``<|im_end|>\\n``)."""
    ids = tokenizer.apply_chat_template(record["messages"], tokenize=True, return_dict=True)
    text = tokenizer.apply_chat_template(record["messages"], tokenize=False)
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    assert encoding["input_ids"] == ids["input_ids"]
    spans, start = [], 0
    for m in record["messages"]:  # in order: the same answer twice is found twice
        if m["role"] != "assistant":
            continue
        piece = m["content"] + "<|im_end|>\n"
        at = text.index("<|im_start|>assistant\n" + piece, start) + len("<|im_start|>assistant\n")
        spans.append((at, at + len(piece)))
        start = at
    if train_on == "last":
        spans = spans[-1:]
    labels = []
    for token, (lo, hi) in zip(ids["input_ids"], encoding["offset_mapping"], strict=True):
        trained = train_on == "all" or any(a <= lo and hi <= b for a, b in spans)
        labels.append(token if trained else -100)
    return labels


class TestPaddedBatches:
    @pytest.mark.parametrize("train_on", ["assistant", "last", "all"])
    def test_labels_are_the_assistant_tokens_and_padding_is_ignored(self, train_on: str) -> None:
        records, tokenizer = numbered(12), chat_tokenizer()
        dm = ChatDataModule(
            records, tokenizer=tokenizer, train_on=train_on, val_split=0, batch_size=5,
            shuffle=False, bucket=False, num_workers=0, tokenize_workers=0,
        )  # fmt: skip
        seen = 0
        for batch in dm.train_dataloader():
            assert set(batch) == {"input_ids", "labels", "attention_mask"}
            for row in range(len(batch["input_ids"])):
                record = records[seen]
                length = int(batch["attention_mask"][row].sum())
                want = expected_labels(tokenizer, record, train_on)
                assert length == len(want)
                assert batch["labels"][row, :length].tolist() == want
                assert (batch["labels"][row, length:] == -100).all()
                assert (batch["input_ids"][row, length:] == dm.pad_id).all()
                seen += 1
        assert seen == 12

    def test_sharegpt_and_prompt_completion_records(self) -> None:
        tokenizer = chat_tokenizer()
        share = {
            "conversations": [
                {"from": "human", "value": "What is 2 plus 3?"},
                {"from": "gpt", "value": "5."},
            ]
        }
        plain = {"prompt": "What is 1 plus 1? ", "completion": "2."}
        dm = ChatDataModule(
            [share, plain], tokenizer=tokenizer, messages_key="conversations", val_split=0,
            batch_size=2, shuffle=False, bucket=False, num_workers=0, tokenize_workers=0,
        )  # fmt: skip
        batch = next(iter(dm.train_dataloader()))
        messages = [{"role": "user", "content": "What is 2 plus 3?"}]
        messages.append({"role": "assistant", "content": "5."})
        want = expected_labels(tokenizer, {"messages": messages})
        assert batch["labels"][0, : len(want)].tolist() == want
        prompt = tokenizer("What is 1 plus 1? ", add_special_tokens=False)["input_ids"]
        completion = tokenizer("2.", add_special_tokens=False)["input_ids"]
        eos = tokenizer.eos_token_id
        n = len(prompt) + len(completion) + 1
        assert batch["input_ids"][1, :n].tolist() == prompt + completion + [eos]
        assert batch["labels"][1, :n].tolist() == [-100] * len(prompt) + completion + [eos]

    def test_strings_with_a_tokenizers_tokenizer_end_with_the_eos_token_given(self) -> None:
        plain = [{"prompt": "What is 1 plus 1? ", "completion": "2."}]
        options = {"chat_template": CHATML, "val_split": 0, "num_workers": 0}
        options["tokenize_workers"] = 0
        with pytest.raises(ValueError, match=r"tokenizer has no eos_token: give eos_token="):
            ChatDataModule(plain, tokenizer=raw_tokenizer(), **options).setup()
        dm = ChatDataModule(plain, tokenizer=raw_tokenizer(), eos_token="<|im_end|>", **options)
        batch = next(iter(dm.train_dataloader()))
        raw = raw_tokenizer()
        prompt = raw.encode("What is 1 plus 1? ", add_special_tokens=False).ids
        completion = raw.encode("2.", add_special_tokens=False).ids
        eos = raw.token_to_id("<|im_end|>")
        assert batch["input_ids"][0].tolist() == prompt + completion + [eos]
        assert batch["labels"][0].tolist() == [-100] * len(prompt) + completion + [eos]
        assert dm.hparams["eos_token"] == "<|im_end|>"
        with pytest.raises(ValueError, match=r"eos_token='<nope>' is not accepted: use a token"):
            ChatDataModule(plain, tokenizer=raw_tokenizer(), eos_token="<nope>", **options)

    def test_stratify_is_refused_naming_why(self) -> None:
        with pytest.raises(ValueError, match=r"stratify=True does not apply to ChatDataModule: "
                           r"conversations carry no class labels"):  # fmt: skip
            ChatDataModule(numbered(6), tokenizer=chat_tokenizer(), stratify=True)

    def test_a_tokenizers_tokenizer_with_chat_template(self) -> None:
        dm = ChatDataModule(
            numbered(6), tokenizer=raw_tokenizer(), chat_template=CHATML, val_split=0,
            batch_size=6, shuffle=False, bucket=False, num_workers=0, tokenize_workers=0,
        )  # fmt: skip
        assert sorted(batch_ids(next(iter(dm.train_dataloader())))) == list(range(6))


class TestStore:
    def test_files_render_once_and_a_second_setup_renders_nothing(
        self, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        records = numbered(30)
        for part in range(2):
            with open(tmp_path / f"chat-{part}.jsonl", "w") as f:
                for record in records[part * 15 : (part + 1) * 15]:
                    f.write(json.dumps(record) + "\n")
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(numbered(8)), tmp_path / "val.parquet")
        calls = []
        real = build.render_chunk

        def counting(*args: Any) -> Any:
            calls.append(len(args[1].records))
            return real(*args)

        monkeypatch.setattr(build, "render_chunk", counting)

        def make() -> ChatDataModule:
            return ChatDataModule(
                train_file=str(tmp_path / "chat-{0..1}.jsonl"), val_file=tmp_path / "val.parquet",
                tokenizer=chat_tokenizer(), token_cache=tmp_path / "cache", batch_size=4,
                num_workers=0, tokenize_workers=0,
            )  # fmt: skip

        first = make()
        first.setup("fit")
        assert sum(calls) == 38 and first.documents("train").store.built
        ids = [i for b in first.train_dataloader() for i in batch_ids(b)]
        assert sorted(ids) == list(range(30))
        assert sorted(i for b in first.val_dataloader() for i in batch_ids(b)) == list(range(8))
        calls.clear()
        second = make()
        second.setup("fit")
        assert calls == [] and not second.documents("train").store.built
        assert [i for b in second.train_dataloader() for i in batch_ids(b)] == ids  # same order
        other = ChatDataModule(
            train_file=str(tmp_path / "chat-*.jsonl"), tokenizer=chat_tokenizer(),
            train_on="last", token_cache=tmp_path / "cache", tokenize_workers=0,
        )  # fmt: skip
        other.setup("fit")  # another train_on: another store
        assert sum(calls) == 30 and other.documents("train").path != first.documents("train").path
