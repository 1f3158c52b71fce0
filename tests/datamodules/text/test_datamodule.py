"""TextDataModule: the shared contract plus text-specific behaviour."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from collates import PadCollate
from datamodules import TextDataModule
from datamodules.core.buckets import BucketBatchSampler
from datamodules.remote.retrying import RemoteOptions
from datamodules.text.readers import read_text_files
from datamodules.tokens.encoding import TextBatchView
from datamodules.tokens.inputs import find_files
from datamodules.tokens.vocab import Vocabulary
from tests.datamodules.contract import ContractCase, DataModuleContract, quiet_trainer
from tests.recording import RecordingModel

N = 54  # 43 train samples with val_split=0.2: odd, so DDP shares differ by one


def make_texts(n: int = N, alphabet: str = "abcdefghijklmnopqrstuvwxyz") -> list[str]:
    """Texts of lengths 1..17 (text i is deterministic in i)."""
    k = len(alphabet)
    return ["".join(alphabet[(i * 7 + j) % k] for j in range(1 + (i * 13) % 17)) for i in range(n)]


def batch_ids(batch: dict[str, torch.Tensor]) -> list[int]:
    """In the contract fixture, a sample's int label is its id (int labels pass through)."""
    return batch["labels"].tolist()


def ddp_datamodule(**kwargs: Any) -> tuple[TextDataModule, Any]:
    """Factory for tests/ddp_runner.py: the same data in every process."""
    dm = TextDataModule(make_texts(), list(range(N)), val_split=0.2, batch_size=4, **kwargs)
    return dm, batch_ids


class TestTextContract(DataModuleContract):
    @pytest.fixture
    def case(self) -> ContractCase:
        texts = make_texts()
        return ContractCase(
            make=lambda **kw: TextDataModule(texts, list(range(N)), **kw),
            batch_ids=batch_ids,
            num_samples=N,
            ddp_factory="tests.datamodules.text.test_datamodule:ddp_datamodule",
        )


def reference_batch(dm: TextDataModule, split: str, positions: torch.Tensor, **pad: Any) -> Any:
    """What PadCollate makes of the same samples, tokenized one by one without truncation."""
    rows = dm.split_indices[split][positions].tolist()
    records = dm.split_datasets[split]
    samples = []
    for row in rows:
        ids = torch.tensor(dm.vocab.encode(records.texts[row]), dtype=torch.int64)
        samples.append({"input_ids": ids, "labels": int(records.encoded.labels[row])})
    return PadCollate(pad_value=dm.pad_id, **pad)(samples)


class TestBatches:
    @pytest.mark.parametrize("padding_side", ["right", "left"])
    @pytest.mark.parametrize("pad_to_multiple_of", [None, 4])
    @pytest.mark.parametrize(("max_length", "truncation_side"), [(None, "right"), (8, "left")])
    def test_view_equals_pad_collate(
        self,
        padding_side: str,
        pad_to_multiple_of: int | None,
        max_length: int | None,
        truncation_side: str,
    ) -> None:
        options = {
            "padding_side": padding_side,
            "pad_to_multiple_of": pad_to_multiple_of,
            "max_length": max_length,
            "truncation_side": truncation_side,
        }
        texts = make_texts()
        dm = TextDataModule(texts, [t[-1] for t in texts], val_split=0.2, **options)
        dm.setup("fit")
        generator = torch.Generator().manual_seed(0)
        for split in ("train", "val"):
            view = dm.view(split)
            for size in (1, 5, len(view)):
                positions = torch.randperm(len(view), generator=generator)[:size]
                got = view[positions]
                expected = reference_batch(dm, split, positions, **options)
                assert (
                    list(got)
                    == list(expected)
                    == [
                        "input_ids",
                        "labels",
                        "attention_mask",
                        "lengths",
                    ]
                )
                for key in got:
                    assert got[key].dtype == expected[key].dtype, key
                    assert torch.equal(got[key], expected[key]), key

    def test_tokens_live_in_one_flat_buffer(self) -> None:
        texts = make_texts()
        dm = TextDataModule(texts, val_split=0.2)
        dm.setup("fit")
        train, val = dm.view("train"), dm.view("val")
        assert isinstance(train, TextBatchView)
        assert train.encoded is val.encoded  # one buffer shared by the splits
        encoded = train.encoded
        assert encoded.tokens.dim() == 1 and encoded.tokens.dtype == torch.int32
        assert encoded.tokens.numel() == sum(map(len, texts)) == int(encoded.offsets[-1])
        assert torch.equal(encoded.lengths, torch.tensor([len(t) for t in texts]))
        assert "labels" not in train[torch.arange(3)]

    def test_train_batches_bucket_by_length_and_fit_the_token_budget(self) -> None:
        texts = make_texts(200)
        dm = TextDataModule(texts, val_split=0.1, batch_by="tokens", max_tokens=40)
        dm.setup("fit")
        loader = dm.train_dataloader()
        assert isinstance(loader.sampler, BucketBatchSampler)
        seen = []
        for batch in loader:
            assert batch["input_ids"].numel() <= 40
            seen.extend(batch["lengths"].tolist())
        assert sorted(seen) == sorted(len(texts[i]) for i in dm.split_indices["train"].tolist())

    def test_eval_bucket_sorts_eval_batches_by_length(self) -> None:
        dm = TextDataModule(make_texts(), val_split=0.5, batch_size=4, eval_bucket=True)
        dm.setup("fit")
        lengths = [length for batch in dm.val_dataloader() for length in batch["lengths"]]
        assert lengths == sorted(lengths) and len(lengths) == 27

    def test_word_level_and_lowercase(self) -> None:
        texts = ["The cat", "the dog", "A cat sat", "unseen words here"]
        dm = TextDataModule(texts, tokenizer="word", lowercase=True, splits={"train": [0, 1, 2]})
        dm.setup("fit")
        assert dm.vocab.tokens == ["<pad>", "<unk>", "cat", "the", "a", "dog", "sat"]
        assert dm.encode("THE cat barks") == [3, 2, 1]
        batch = dm.view("train")[torch.tensor([0, 2])]
        assert batch["input_ids"].tolist() == [[3, 2, 0], [4, 2, 6]]


class TestInputs:
    def test_string_labels_get_a_sorted_label_vocabulary(self) -> None:
        dm = TextDataModule(["aa", "b", "cc", "d"], ["pos", "neg", "pos", "mid"], val_split=0)
        dm.setup("fit")
        assert dm.label_names == ["mid", "neg", "pos"] and dm.num_classes == 3
        assert dm.view("train").encoded.labels.tolist() == [2, 1, 2, 0]

    def test_int_labels_pass_through(self) -> None:
        dm = TextDataModule(["aa", "b", "cc"], [7, -1, 3], val_split=0)
        dm.setup("fit")
        assert dm.label_names is None
        assert dm.view("train").encoded.labels.tolist() == [7, -1, 3]

    def test_vocabulary_comes_from_the_train_split_only(self) -> None:
        dm = TextDataModule(["ab", "ab", "xyz"], splits={"train": [0, 1], "val": [2]})
        dm.setup("fit")
        assert dm.vocab.tokens == ["<pad>", "<unk>", "a", "b"]
        assert dm.view("val")[torch.tensor([0])]["input_ids"].tolist() == [[1, 1, 1]]

    @pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".tsv"])
    def test_files_with_val_and_test_files(self, tmp_path: Path, suffix: str) -> None:
        rows = [("hello", "en"), ("hallo, welt", "de"), ("bonjour", "fr"), ("guten tag", "de")]

        def write(name: str, part: list[tuple[str, str]]) -> Path:
            file = tmp_path / f"{name}{suffix}"
            if suffix == ".jsonl":
                lines = [json.dumps({"text": t, "lang": y}) for t, y in part]
                file.write_text("\n".join(lines) + "\n\n")
            else:
                sep = "," if suffix == ".csv" else "\t"
                quote = '"' if suffix == ".csv" else ""
                body = [f"lang{sep}text"] + [f"{y}{sep}{quote}{t}{quote}" for t, y in part]
                file.write_text("\n".join(body) + "\n")
            return file

        dm = TextDataModule(
            train_file=[write("a", rows[:2]), write("b", rows[2:])],
            val_file=write("val", [("hola", "es")]),
            test_file=str(write("test", [("ciao", "it")])),
            label_key="lang",
            batch_size=8,
            shuffle=False,
            bucket=False,
        )
        dm.setup("fit")
        assert dm.label_names == ["de", "en", "es", "fr", "it"]
        assert [dm.split_size(s) for s in ("train", "val", "test")] == [4, 1, 1]
        batch = next(iter(dm.train_dataloader()))
        assert batch["labels"].tolist() == [1, 0, 3, 0]
        assert batch["lengths"].tolist() == [5, 11, 7, 9]
        assert next(iter(dm.test_dataloader()))["labels"].tolist() == [4]

    def test_csv_integer_labels_and_txt_files(self, tmp_path: Path) -> None:
        (tmp_path / "a.csv").write_text("text,label\nab,1\ncd,0\n")
        (tmp_path / "b.txt").write_text("first line\n\nsecond\n")
        dm = TextDataModule(train_file=tmp_path / "a.csv", val_split=0)
        dm.setup("fit")
        assert dm.label_names is None and dm.num_classes == 2
        txt = TextDataModule(
            train_file=tmp_path / "b.txt", val_split=0, shuffle=False, bucket=False
        )
        batch = next(iter(txt.train_dataloader()))
        assert batch["lengths"].tolist() == [10, 6] and "labels" not in batch

    def test_the_shard_tables_extensions_read_as_text(self, tmp_path: Path) -> None:
        """.ndjson, .pq, .gzip, .zstd: text tells formats by the shard layer's one table."""
        import gzip

        import pyarrow as pa
        import pyarrow.parquet as pq
        import zstandard

        (tmp_path / "a.ndjson").write_text(
            '{"text": "ab", "label": 1}\n\n{"text": "c", "label": 0}\n'
        )
        pq.write_table(pa.table({"text": ["de", "f"], "label": [0, 1]}), tmp_path / "b.pq")
        (tmp_path / "c.csv.gzip").write_bytes(gzip.compress(b"text,label\ngh,1\n"))
        data = zstandard.ZstdCompressor().compress(b'{"text": "ij", "label": 0}\n')
        (tmp_path / "d.jsonl.zstd").write_bytes(data)
        (tmp_path / "e.tar").write_bytes(b"")  # a stream's shard, not text's: left out
        records = read_text_files(find_files([str(tmp_path)], "train_file", RemoteOptions()),
                                  "text", None)  # fmt: skip
        assert records.texts == ["ab", "c", "de", "f", "gh", "ij"]
        assert records.labels == [1, 0, 0, 1, 1, 0]
        assert [records.where(i).rsplit("/", 1)[1] for i in (1, 3, 4)] == [
            "a.ndjson, line 3", "b.pq, line 2", "c.csv.gzip, line 2"
        ]  # fmt: skip
        dm = TextDataModule(train_file=tmp_path / "b.pq", val_split=0)
        dm.setup("fit")
        assert dm.num_classes == 2

    def test_a_csv_line_of_only_whitespace_is_not_a_record(self, tmp_path: Path) -> None:
        """The one rule of the shard layer: a blank line is not a record, in every format."""
        file = tmp_path / "a.csv"
        file.write_text("text,label\nab,1\n   \n\ncd,0\n", encoding="utf-8-sig")
        records = read_text_files([file], "text", None)
        assert records.texts == ["ab", "cd"] and records.labels == [1, 0]
        assert records.where(1) == f"{file}, line 5"

    def test_user_tokenizers(self) -> None:
        class Encoding:
            def __init__(self, ids: list[int]) -> None:
                self.ids = ids

        class ObjectTokenizer:
            pad_token_id = 9

            def encode(self, text: str) -> Encoding:
                return Encoding([ord(c) % 7 for c in text])

        texts = ["abc", "de", "f"]
        for tokenizer, pad in ((lambda t: [len(t)] * len(t), 0), (ObjectTokenizer(), 9)):
            dm = TextDataModule(
                texts, tokenizer=tokenizer, val_split=0, shuffle=False, bucket=False
            )
            batch = next(iter(dm.train_dataloader()))
            assert dm.pad_id == pad and dm.vocab is None
            first = [3, 3, 3] if pad == 0 else [ord(c) % 7 for c in "abc"]
            assert batch["input_ids"][0].tolist() == first
            assert batch["input_ids"][2, 1:].tolist() == [pad, pad]

    def test_hugging_face_tokenizer(self) -> None:
        import tokenizers  # a test dependency (pyproject: test extra)

        vocab = {"[PAD]": 0, "[UNK]": 1, "hello": 2, "world": 3}
        tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
        dm = TextDataModule(["hello world", "world", "hello there"], tokenizer=tok, val_split=0)
        dm.setup("fit")
        assert dm.vocab_size == 4 and dm.pad_id == 0
        batch = dm.view("train")[torch.tensor([0, 1, 2])]
        assert batch["input_ids"].tolist() == [[2, 3], [3, 0], [2, 1]]

    def test_numpy_texts_tensor_labels_and_summary(self) -> None:
        dm = TextDataModule(np.array(["ab", "c", "dd"]), torch.tensor([1, 0, 1]), val_split=0)
        dm.setup("fit")
        dm.train_dataloader()
        text = repr(dm)
        assert "char-level vocabulary, vocab_size=6, pad_id=0" in text
        assert "train: 1 batch per rank, padding efficiency 0.833" in text
        assert "texts" not in dm.hparams and dm.hparams["batch_by"] == "samples"

    def test_load_texts_is_the_extension_point(self) -> None:
        class Names(TextDataModule):
            def load_texts(self) -> tuple[list[str], list[str]]:
                return ["anna", "bob", "carl", "dora"], ["f", "m", "m", "f"]

        dm = Names(val_split=0, batch_size=4)
        assert next(iter(dm.train_dataloader()))["labels"].sum() == 2
        assert dm.label_names == ["f", "m"]


class TestState:
    def test_vocabulary_round_trip_through_a_lightning_checkpoint(self, tmp_path: Path) -> None:
        first = TextDataModule(make_texts(), val_split=0.2, batch_size=8)
        checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1)
        trainer = quiet_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[checkpoint])
        trainer.fit(RecordingModel(lambda b: b["lengths"].tolist()), datamodule=first)
        ckpt = sorted(tmp_path.glob("*.ckpt"))[0]  # epoch=0-step=2: mid-epoch
        saved = torch.load(ckpt, weights_only=False)
        assert saved["TextDataModule"]["vocab"] == first.vocab.state()

        # Same sample count, other characters: setup builds another vocabulary...
        other = make_texts(alphabet="zyxwvutsrqponmlkjihgfedcbaABC")
        second = TextDataModule(other, val_split=0.2, batch_size=8)
        second.setup("fit")
        assert second.vocab != first.vocab
        # ...and resuming from the checkpoint restores the first one and re-tokenizes.
        resumed = RecordingModel(lambda b: b["input_ids"].flatten().tolist())
        quiet_trainer(max_epochs=2).fit(resumed, datamodule=second, ckpt_path=ckpt)
        assert second.vocab == first.vocab
        expected = first.vocab.encode_many(other)[0]
        assert torch.equal(second.view("train").encoded.tokens.long(), torch.from_numpy(expected))
        seen = {i for ids in resumed.train_epochs()[-1] for i in ids}
        assert max(seen) < len(first.vocab)

        # A module restored before setup (inference) maps text to the same ids.
        fresh = TextDataModule(other, val_split=0.2)
        fresh.load_state_dict(saved["TextDataModule"])
        fresh.setup("predict")
        assert fresh.vocab == first.vocab
        assert fresh.encode("abcz") == first.encode("abcz")

    def test_checkpoint_label_names_are_kept(self) -> None:
        dm = TextDataModule(["a", "b", "c"], ["x", "z", "x"], val_split=0)
        dm.setup("fit")
        dm.load_state_dict({"label_names": ["w", "x", "z"]})
        assert dm.label_names == ["w", "x", "z"]
        assert dm.view("train").encoded.labels.tolist() == [1, 2, 1]
        with pytest.raises(ValueError, match=r"lack the labels \['z'\]"):
            dm.load_state_dict({"label_names": ["x", "y"]})

    def test_vocab_state_rebuilds_an_equal_vocabulary(self) -> None:
        vocab = Vocabulary.build(["hello", "world"], "char", lowercase=True, min_freq=2)
        assert vocab.tokens == ["<pad>", "<unk>", "l", "o"]
        assert Vocabulary.from_state(vocab.state()) == vocab
        assert vocab.decode(vocab.encode("LOL")) == "lol"


class TestBadInput:
    @pytest.mark.parametrize(
        ("args", "kwargs", "error", "match"),
        [
            ((["a", "b"], [1]), {}, ValueError, "labels has 1 items but texts has 2"),
            (([],), {}, ValueError, "texts is empty"),
            (("abc",), {}, TypeError, "texts is a str"),
            ((["a", 3],), {}, TypeError, r"texts\[1\] is a int"),
            ((["a", "b"], [1, "x"]), {}, TypeError, r"labels\[1\]: label 'x' is a str"),
            ((["a", "b"], [1, 2.5]), {}, TypeError, r"labels\[1\]: label 2.5 \(float\)"),
            ((), {}, ValueError, "needs data"),
            ((["a"],), {"train_file": "x.jsonl"}, ValueError, "not both"),
            ((), {"train_file": "data.xlsx"}, ValueError, r"train_file=.data.xlsx."),
            (
                (),
                {"train_file": "s.tar"},
                ValueError,
                r"train_file='s\.tar' is not accepted: use "
                r"a file ending in \.jsonl, \.ndjson, \.txt, \.csv, \.tsv \(each optionally \+ "
                r"\.gz or \.zst\), or \.parquet, \.pq, \.arrow\.$",
            ),  # fmt: skip
            ((["a"],), {"tokenizer": "bpe"}, ValueError, "tokenizer='bpe'"),
            ((["a"],), {"tokenizer": 3}, TypeError, "tokenizer=3"),
            ((["a"],), {"padding_side": "top"}, ValueError, "padding_side='top'"),
            ((["a"],), {"batch_by": "tokens"}, ValueError, "max_tokens=None"),
            ((["a"],), {"max_tokens": 64}, ValueError, "no effect"),
            ((["a"],), {"batch_by": "tokens", "max_tokens": 8, "max_length": 9}, ValueError, "9"),
            ((["a"],), {"max_length": 10, "pad_to_multiple_of": 4}, ValueError, "multiple"),
        ],
    )
    def test_bad_arguments_raise_early(
        self, args: tuple, kwargs: dict, error: type[Exception], match: str
    ) -> None:
        with pytest.raises(error, match=match):
            TextDataModule(*args, **kwargs)

    @pytest.mark.parametrize(
        ("content", "match"),
        [
            ('{"text": "a", "label": 1}\n{"text": "b", label: 2}\n', "line 2: invalid JSON"),
            ('{"text": "a"}\n\n["b"]\n', "line 3: expected a JSON object"),
            ('{"text": "a"}\n{"body": "b"}\n', r"line 2: no 'text' key \(keys: \['body'\]\)"),
            ('{"text": 5}\n', "line 1: 'text' holds a int"),
            ('{"text": "a", "label": 1}\n{"text": "b"}\n', "line 2: no 'label' label"),
            ('{"text": "a", "label": 1}\n{"text": "b", "label": "x"}\n', "line 2: label 'x'"),
            ('{"text": "a", "label": [1]}\n', r"line 1: label \[1\] \(list\)"),
            ("\n\n", "no records"),
        ],
    )
    def test_malformed_jsonl_names_file_and_line(
        self, tmp_path: Path, content: str, match: str
    ) -> None:
        file = tmp_path / "data.jsonl"
        file.write_text(content)
        dm = TextDataModule(train_file=file)
        with pytest.raises((ValueError, TypeError), match=re.escape(str(file)) + ".*" + match):
            dm.setup("fit")

    @pytest.mark.parametrize(
        ("content", "match"),
        [
            ("body,label\nx,1\n", r"line 1: no column 'text' in the header \['body', 'label'\]"),
            ("text,label\nx,1\ny,2,3\n", "line 3: 3 fields but the header has 2"),
            ("text,label\nx,1\ny,\n", "line 3: empty 'label' label"),
        ],
    )
    def test_malformed_csv_names_file_and_line(
        self, tmp_path: Path, content: str, match: str
    ) -> None:
        file = tmp_path / "data.csv"
        file.write_text(content)
        with pytest.raises(ValueError, match=re.escape(str(file)) + ".*" + match):
            TextDataModule(train_file=file).setup("fit")

    def test_missing_file_and_bad_utf8(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError, match="missing.txt"):
            TextDataModule(train_file=tmp_path / "missing.txt").setup("fit")
        bad = tmp_path / "bad.txt"
        bad.write_bytes(b"fine\n\xff\xfe broken\n")
        with pytest.raises(ValueError, match="bad.txt, line 2: not valid UTF-8"):
            TextDataModule(train_file=bad).setup("fit")

    def test_sample_over_the_token_budget_names_its_line(self, tmp_path: Path) -> None:
        file = tmp_path / "long.txt"
        file.write_text("short\n" + "x" * 50 + "\n")
        dm = TextDataModule(train_file=file, batch_by="tokens", max_tokens=20)
        with pytest.raises(ValueError, match=r"long.txt, line 2: 50 tokens .* max_tokens=20"):
            dm.setup("fit")

    def test_tokenizer_returning_garbage_names_the_sample(self) -> None:
        dm = TextDataModule(["ok", "bad"], tokenizer=lambda t: "oops" if t == "bad" else [1])
        with pytest.raises(TypeError, match=r"texts\[1\]: the tokenizer returned str"):
            dm.setup("fit")

    def test_checkpoint_vocabulary_of_another_level_is_refused(self) -> None:
        state = {"vocab": Vocabulary.build(["a b"], "word").state()}
        dm = TextDataModule(["a b", "c"], val_split=0)
        dm.setup("fit")
        with pytest.raises(ValueError, match="'word' with lowercase=False"):
            dm.load_state_dict(state)


class TestLabelKey:
    """An explicit label_key must be in the records; the default reads "label" when present."""

    def write(self, tmp_path: Path, name: str, body: str) -> Path:
        path = tmp_path / name
        path.write_text(body)
        return path

    def test_a_mistyped_label_key_raises_naming_the_file_line_and_keys(self, tmp_path) -> None:
        body = "".join(json.dumps({"text": f"t{i}", "label": i % 2}) + "\n" for i in range(6))
        path = self.write(tmp_path, "train.jsonl", body)
        dm = TextDataModule(train_file=path, label_key="lable", val_split=0)
        with pytest.raises(ValueError, match=r"train\.jsonl, line 1: no 'lable' key \(keys: "
                           r"\['label', 'text'\]\); set label_key"):  # fmt: skip
            dm.setup()

    def test_the_default_reads_labels_when_present_and_none_otherwise(self, tmp_path) -> None:
        labelled = "".join(json.dumps({"text": f"t{i}", "label": i % 2}) + "\n" for i in range(6))
        dm = TextDataModule(train_file=self.write(tmp_path, "a.jsonl", labelled), val_split=0)
        dm.setup()
        assert dm.num_classes == 2 and "labels" in next(iter(dm.train_dataloader()))
        plain = "".join(json.dumps({"text": f"t{i}"}) + "\n" for i in range(6))
        dm = TextDataModule(train_file=self.write(tmp_path, "b.jsonl", plain), val_split=0)
        dm.setup()
        assert dm.num_classes is None and "labels" not in next(iter(dm.train_dataloader()))

    def test_an_explicit_label_key_must_be_a_csv_column(self, tmp_path) -> None:
        path = self.write(tmp_path, "train.csv", "text,label\na,1\nb,0\n")
        with pytest.raises(ValueError, match=r"train\.csv, line 1: no column 'y' in the header"):
            TextDataModule(train_file=path, label_key="y", val_split=0).setup()
        dm = TextDataModule(train_file=path, label_key="label", val_split=0)
        dm.setup()
        assert dm.num_classes == 2

    def test_an_explicit_label_key_on_txt_files_raises(self, tmp_path) -> None:
        path = self.write(tmp_path, "train.txt", "a\nb\n")
        with pytest.raises(ValueError, match=r"train\.txt: a \.txt file holds no labels, but "
                           r"label_key='label' was given"):  # fmt: skip
            TextDataModule(train_file=path, label_key="label", val_split=0).setup()

    def test_a_jsonl_syntax_error_names_its_real_column(self, tmp_path) -> None:
        bad = '{"text": "a sentence", "label": 1 "x": 2}'
        path = self.write(tmp_path, "bad.jsonl", '{"text": "ok", "label": 0}\n' + bad + "\n")
        column = bad.index('"x"') + 1
        with pytest.raises(ValueError, match=rf"bad\.jsonl, line 2: invalid JSON: Expecting "
                           rf"',' delimiter \(column {column}\)"):  # fmt: skip
            TextDataModule(train_file=path, val_split=0).setup()


class TestSummaryWording:
    def test_every_label_name_shown_without_an_ellipsis(self) -> None:
        dm = TextDataModule(["ab", "c", "dd", "e"], ["pos", "neg", "pos", "neg"], val_split=0)
        dm.setup()
        assert "  labels: 2 classes: 'neg', 'pos'\n" in dm.summary() + "\n"
        many = TextDataModule([f"t{i}" for i in range(10)], [f"c{i}" for i in range(10)],
                              val_split=0)  # fmt: skip
        many.setup()
        assert "labels: 10 classes: 'c0', 'c1', 'c2', 'c3', 'c4', 'c5', 'c6', 'c7', ... (2 more)" \
            in many.summary()  # fmt: skip

    def test_packed_summary_counts_rows_and_cut_documents(self) -> None:
        texts = ["".join("abc"[(i + j) % 3] for j in range(1 + i % 9)) for i in range(30)]
        dm = TextDataModule(texts, packing=True, seq_length=8, batch_size=2, val_split=0)
        dm.setup()
        rows = dm.planner("train").num_rows
        batches = -(-rows // 2)
        summary = dm.summary()  # before any loader is built
        assert f"{rows} rows and {batches} batches per rank" in summary
        assert len(dm.train_dataloader()) == batches
        assert "documents cut across rows" in summary and "split documents" not in summary
