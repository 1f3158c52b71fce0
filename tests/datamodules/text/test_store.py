"""The token store: tokenized once into a memory-mapped store keyed by inputs and tokenizer.

Every input format lands in the store as ``encode_batch`` gives it, document by document in
order; a later setup (a new module, a new run) tokenizes nothing; another input or tokenizer
gives another store; a truncated store is rebuilt with a warning; packing, buckets, token
budgets and ``val_split`` work on it unchanged, with tokens and per-document arrays mapped.
"""

from __future__ import annotations

import json
import os
import pickle
from collections import Counter
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch

from datamodules import TextDataModule
from tests.datamodules.text.store_data import (
    CountingTokenizer,
    bpe,
    corpus,
    in_file_order,
    reference_ids,
    stored_ids,
    write_formats,
    write_jsonl,
)

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture(scope="module")
def tokenizer():
    return bpe(corpus(400))


def make(cache: Path, tokenizer, **kwargs) -> TextDataModule:
    options = {"token_cache": cache, "num_workers": 0, "tokenize_workers": 0, "val_split": 0}
    options.update(kwargs)
    return TextDataModule(tokenizer=tokenizer, **options)


def stores(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if p.is_dir())


def token_ids(batch: dict[str, torch.Tensor]) -> list[int]:
    real = batch["document_ids"] >= 0
    return (batch["document_ids"][real] * 1000 + batch["position_ids"][real]).tolist()


class TestContents:
    def test_every_format_lands_as_encode_batch_gives_it_in_order(self, tmp_path, tokenizer):
        texts = corpus(300)
        files = write_formats(tmp_path / "data", texts)
        dm = make(tmp_path / "cache", tokenizer, train_file=tmp_path / "data")
        dm.setup("fit")
        stored = dm.dataset
        assert stored_ids(stored.encoded) == reference_ids(tokenizer, in_file_order(texts))
        # Tokens and per-document arrays are mapped from the store's files, not copied.
        encoded = stored.encoded
        assert isinstance(encoded.tokens_np, np.memmap) and encoded.tokens_np.dtype == np.uint16
        assert isinstance(encoded.offsets_np, np.memmap) and isinstance(
            encoded.lengths_np, np.memmap
        )
        assert Path(encoded.tokens_np.filename).parent == Path(stored.path)
        # Every document names its file and line (row for Parquet).
        assert stored.where(0) == f"{files[0]}, line 1"
        parquet_first = sum(len(texts[i::6]) for i in range(4))
        assert stored.where(parquet_first + 8) == f"{files[4]}, row 9"
        assert stored.where(len(texts) - 1) == f"{files[5]}, line {len(texts[5::6])}"
        meta = json.loads((Path(stored.path) / "meta.json").read_text())
        assert meta["version"] == 1 and meta["dtype"] == "uint16"
        assert meta["documents"] == len(texts) and meta["tokens"] == len(encoded.tokens_np)
        inputs = meta["inputs"]["inputs"]
        assert [i["path"] for i in inputs] == [str(f) for f in files]
        assert [i["size"] for i in inputs] == [f.stat().st_size for f in files]
        assert all(i["mtime"] == f.stat().st_mtime_ns for i, f in zip(inputs, files, strict=True))
        assert meta["inputs"]["tokenizer"]["class"] == "tokenizers.Tokenizer"
        assert meta["inputs"]["max_length"] is None and meta["inputs"]["lowercase"] is False
        assert "memory-mapped from" in dm.summary()

    def test_a_glob_a_list_and_a_directory_are_the_same_store(self, tmp_path, tokenizer):
        texts = corpus(60)
        files = [write_jsonl(tmp_path / f"part-{k}.jsonl", texts[k::2]) for k in range(2)]
        paths = []
        for given in (tmp_path / "part-*.jsonl", files, [str(f) for f in files]):
            dm = make(tmp_path / "cache", tokenizer, train_file=given)
            dm.setup("fit")
            paths.append(dm.dataset.path)
        assert len(set(paths)) == 1 and len(stores(tmp_path / "cache")) == 1

    def test_a_vocabulary_over_65536_ids_is_stored_as_uint32(self, tmp_path):
        texts = corpus(40)
        write_jsonl(tmp_path / "a.jsonl", texts)

        def wide(text: str) -> list[int]:
            return [70_000 + ord(c) for c in text]

        def narrow(text: str) -> list[int]:
            return [ord(c) for c in text]

        for tokenizer, dtype in ((wide, np.uint32), (narrow, np.uint16)):
            dm = make(tmp_path / "cache", tokenizer, train_file=tmp_path / "a.jsonl")
            dm.setup("fit")
            assert dm.dataset.encoded.tokens_np.dtype == dtype
            assert stored_ids(dm.dataset.encoded) == [tokenizer(t) for t in texts]

    def test_worker_processes_write_the_same_store(self, tmp_path):
        texts = corpus(500)
        write_jsonl(tmp_path / "a.jsonl", texts)
        ids = []
        for workers in (0, 2):
            dm = make(
                tmp_path / f"cache{workers}",
                byte_ids,
                train_file=tmp_path / "a.jsonl",
                tokenize_workers=workers,
            )
            dm.setup("fit")
            assert dm.dataset.meta["workers"] == workers
            ids.append(stored_ids(dm.dataset.encoded))
        assert ids[0] == ids[1] == [byte_ids(t) for t in texts]

    def test_labels_are_stored_and_max_length_makes_another_store(self, tmp_path, tokenizer):
        texts = corpus(50)
        names = ["ham", "spam", "eggs"]
        write_jsonl(tmp_path / "a.jsonl", texts, [names[i % 3] for i in range(50)])
        dm = make(tmp_path / "cache", tokenizer, train_file=tmp_path / "a.jsonl", shuffle=False)
        dm.setup("fit")
        assert dm.label_names == ["eggs", "ham", "spam"] and dm.num_classes == 3
        labels = [int(i) for b in dm.train_dataloader() for i in b["labels"]]
        assert sorted(labels) == sorted(
            ["eggs", "ham", "spam"].index(names[i % 3]) for i in range(50)
        )
        short = make(tmp_path / "cache", tokenizer, train_file=tmp_path / "a.jsonl", max_length=5)
        short.setup("fit")
        assert short.dataset.path != dm.dataset.path
        assert stored_ids(short.dataset.encoded) == [r[:5] for r in reference_ids(tokenizer, texts)]


def byte_ids(text: str) -> list[int]:
    """A plain Python tokenizer (tokenized in worker processes with tokenize_workers > 0)."""
    return list(text.encode())


class TestOnceOnly:
    def test_a_second_setup_calls_no_tokenizer(self, tmp_path, tokenizer):
        write_formats(tmp_path / "data", corpus(200))
        counting = CountingTokenizer(tokenizer)
        first = make(
            tmp_path / "cache", counting, train_file=tmp_path / "data", packing=True, seq_length=32
        )
        first.setup("fit")
        calls = counting.calls[0]
        assert calls >= 1
        first.setup("fit")
        again = make(
            tmp_path / "cache", counting, train_file=tmp_path / "data", packing=True, seq_length=32
        )
        again.setup("fit")
        assert counting.calls[0] == calls  # mapped, not tokenized
        assert again.dataset.path == first.dataset.path
        batches = [[token_ids(b) for b in dm.train_dataloader()] for dm in (first, again)]
        assert batches[0] == batches[1]

    def test_another_input_or_tokenizer_builds_another_store(self, tmp_path, tokenizer):
        texts = corpus(80)
        file = write_jsonl(tmp_path / "a.jsonl", texts)
        counting = CountingTokenizer(tokenizer)
        make(tmp_path / "cache", counting, train_file=file).setup("fit")
        assert len(stores(tmp_path / "cache")) == 1
        calls = counting.calls[0]
        write_jsonl(file, texts + ["one more document"])
        changed = make(tmp_path / "cache", counting, train_file=file)
        changed.setup("fit")
        assert counting.calls[0] > calls and len(stores(tmp_path / "cache")) == 2
        assert stored_ids(changed.dataset.encoded) == reference_ids(
            tokenizer, texts + ["one more document"]
        )
        other = bpe(corpus(400), vocab_size=300)
        retokenized = make(tmp_path / "cache", other, train_file=file)
        retokenized.setup("fit")
        assert len(stores(tmp_path / "cache")) == 3
        assert stored_ids(retokenized.dataset.encoded) == reference_ids(
            other, texts + ["one more document"]
        )

    def test_a_truncated_store_is_rebuilt_with_a_warning(self, tmp_path, tokenizer):
        texts = corpus(80)
        write_jsonl(tmp_path / "a.jsonl", texts)
        counting = CountingTokenizer(tokenizer)
        dm = make(tmp_path / "cache", counting, train_file=tmp_path / "a.jsonl")
        dm.setup("fit")
        path = Path(dm.dataset.path)
        size = (path / "tokens.bin").stat().st_size
        del dm
        with open(path / "tokens.bin", "r+b") as f:
            f.truncate(size - 6)
        calls = counting.calls[0]
        rebuilt = make(tmp_path / "cache", counting, train_file=tmp_path / "a.jsonl")
        with pytest.warns(
            UserWarning, match=rf"tokens\.bin holds {size - 6} bytes, its metadata says {size}"
        ):
            rebuilt.setup("fit")
        assert counting.calls[0] > calls
        assert stored_ids(rebuilt.dataset.encoded) == reference_ids(tokenizer, texts)

    def test_a_build_that_fails_leaves_no_store(self, tmp_path, tokenizer):
        write_jsonl(tmp_path / "a.jsonl", corpus(80) + ["boom"])

        def failing(text: str) -> list[int]:
            if text == "boom":
                raise RuntimeError("cannot tokenize this")
            return list(text.encode())

        with pytest.raises(ValueError, match=r"a\.jsonl, line 81: the tokenizer .*failing failed"):
            make(tmp_path / "cache", failing, train_file=tmp_path / "a.jsonl").setup("fit")
        assert not [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]  # nor a tmp folder


class TestDownstream:
    @pytest.mark.parametrize("mode", ["split", "whole"])
    def test_packing_covers_every_token_once_on_a_store(self, tmp_path, tokenizer, mode):
        write_jsonl(tmp_path / "a.jsonl", corpus(120))
        dm = make(
            tmp_path / "cache",
            tokenizer,
            train_file=tmp_path / "a.jsonl",
            packing=True,
            seq_length=96,
            pack_mode=mode,
            batch_size=4,
            val_split=0.2,
            num_workers=2,
        )
        dm.setup("fit")
        for split, loader in (("train", dm.train_dataloader()), ("val", dm.val_dataloader())):
            lengths = dm.dataset.encoded.lengths_np[dm.split_indices[split].numpy()]
            expected = sorted(
                d * 1000 + p for d, n in enumerate(lengths.tolist()) for p in range(n)
            )
            assert sorted(i for b in loader for i in token_ids(b)) == expected, split
        assert set(dm.split_indices["train"].tolist()).isdisjoint(dm.split_indices["val"].tolist())

    def test_token_budgets_and_buckets_cover_every_document_once(self, tmp_path, tokenizer):
        texts = corpus(150)
        write_jsonl(tmp_path / "a.jsonl", texts)
        dm = make(
            tmp_path / "cache",
            tokenizer,
            train_file=tmp_path / "a.jsonl",
            batch_by="tokens",
            max_tokens=256,
        )
        dm.setup("fit")
        reference = reference_ids(tokenizer, texts)
        seen = Counter()
        for batch in dm.train_dataloader():
            assert batch["input_ids"].numel() <= 256
            for row, n in zip(batch["input_ids"], batch["lengths"], strict=True):
                seen[tuple(row[:n].tolist())] += 1
        assert seen == Counter(tuple(r) for r in reference)

    def test_a_pickled_view_maps_the_store_again(self, tmp_path, tokenizer):
        write_jsonl(tmp_path / "a.jsonl", corpus(300))
        dm = make(
            tmp_path / "cache",
            tokenizer,
            train_file=tmp_path / "a.jsonl",
            packing=True,
            seq_length=32,
        )
        view = dm.view("train")
        data = pickle.dumps(view)
        assert len(data) < view.encoded.tokens_np.nbytes  # the tokens are not in the pickle
        copy = pickle.loads(data)
        assert isinstance(copy.encoded.tokens_np, np.memmap)
        assert copy.encoded.tokens_np.filename == view.encoded.tokens_np.filename
        batch = torch.arange(3)
        assert all(
            torch.equal(a, b)
            for a, b in zip(copy[batch].values(), view[batch].values(), strict=False)
            if isinstance(a, torch.Tensor)
        )


class TestDatasetInput:
    def test_a_datasets_dataset_is_read_in_arrow_batches_into_the_store(self, tmp_path, tokenizer):
        texts = corpus(120)
        dataset = datasets.Dataset.from_dict({"text": texts, "label": [i % 4 for i in range(120)]})
        counting = CountingTokenizer(tokenizer)
        dm = make(tmp_path / "cache", counting, texts=dataset)
        dm.setup("fit")
        assert stored_ids(dm.dataset.encoded) == reference_ids(tokenizer, texts)
        assert dm.dataset.labels == [i % 4 for i in range(120)] and dm.num_classes == 4
        assert dm.dataset.where(5) == "<datasets.Dataset>, row 6"
        calls = counting.calls[0]
        make(tmp_path / "cache", counting, texts=dataset).setup("fit")
        assert counting.calls[0] == calls
        subset = make(tmp_path / "cache", counting, texts=dataset.select(range(10, 30)))
        subset.setup("fit")
        assert stored_ids(subset.dataset.encoded) == reference_ids(tokenizer, texts[10:30])

    def test_a_dataset_needs_a_tokenizer_and_its_text_column(self, tmp_path, tokenizer):
        dataset = datasets.Dataset.from_dict({"body": ["a b", "c"]})
        with pytest.raises(ValueError, match="needs tokenizer="):
            TextDataModule(dataset)
        with pytest.raises(ValueError, match="no column 'text'"):
            make(tmp_path / "cache", tokenizer, texts=dataset).setup("fit")


class TestBadRecords:
    def test_a_parquet_text_that_is_not_a_string_names_its_row(self, tmp_path, tokenizer):
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = tmp_path / "bad.parquet"
        pq.write_table(pa.table({"text": ["a", "b", None, "d"]}), path, row_group_size=2)
        with pytest.raises(ValueError, match=r"bad\.parquet, row 3: 'text' holds a NoneType"):
            make(tmp_path / "cache", tokenizer, train_file=path).setup("fit")

    def test_an_explicit_label_key_must_be_in_the_records(self, tmp_path, tokenizer):
        write_jsonl(tmp_path / "a.jsonl", corpus(5), ["x"] * 5)
        with pytest.raises(ValueError, match=r"a\.jsonl, line 1: no 'lable' key"):
            make(
                tmp_path / "cache", tokenizer, train_file=tmp_path / "a.jsonl", label_key="lable"
            ).setup()
        dataset = datasets.Dataset.from_dict({"text": corpus(5)})
        with pytest.raises(ValueError, match=r"the Dataset has no column 'y'"):
            make(tmp_path / "cache", tokenizer, texts=dataset, label_key="y").setup()


class TestArguments:
    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"token_cache": 3}, TypeError, "token_cache=3"),
            ({"tokenize_workers": -1}, ValueError, "tokenize_workers=-1"),
            ({"tokenize_workers": "many"}, ValueError, "tokenize_workers='many'"),
            ({"dtype": "uint16"}, ValueError, "dtype= describes token_files="),
            ({"storage_options": "x"}, TypeError, "storage_options='x'"),
            ({"retries": -1}, ValueError, "retries=-1"),
            ({"train_file": "data/*.jsonl", "texts": ["a"]}, ValueError, "not both"),
        ],
    )
    def test_bad_arguments_raise_naming_them(self, tmp_path, kwargs, error, match):
        options = {"train_file": tmp_path / "a.jsonl", **kwargs}
        with pytest.raises(error, match=match):
            TextDataModule(tokenizer=byte_ids, **options)

    def test_a_missing_file_names_it(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="nothing.jsonl"):
            make(tmp_path / "cache", byte_ids, train_file=tmp_path / "nothing.jsonl").setup("fit")
        with pytest.raises(FileNotFoundError, match="no file matches"):
            make(tmp_path / "cache", byte_ids, train_file=str(tmp_path / "none-*.jsonl")).setup(
                "fit"
            )

    def test_the_default_cache_follows_the_environment(self, tmp_path, monkeypatch, tokenizer):
        monkeypatch.setenv("DATAMODULES_CACHE", str(tmp_path / "env"))
        write_jsonl(tmp_path / "a.jsonl", corpus(20))
        dm = TextDataModule(train_file=tmp_path / "a.jsonl", tokenizer=tokenizer, num_workers=0)
        dm.setup("fit")
        assert Path(dm.dataset.path).parent == tmp_path / "env" / "tokens"
        assert os.path.exists(dm.dataset.path)
