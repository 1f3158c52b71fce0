"""token_files=: a Megatron-LM indexed dataset written by megatron-core's IndexedDatasetBuilder
reads back as the same documents and tokens; a nanoGPT-style flat file splits at eos_id; a
file whose size or header does not match raises naming the file and what was expected."""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from datamodules import TextDataModule
from tests.datamodules.text.store_data import bpe, corpus, stored_ids


def documents(n: int = 40, seed: int = 0) -> list[list[int]]:
    generator = np.random.default_rng(seed)
    return [
        generator.integers(1, 50_000, size=int(generator.integers(1, 90))).tolist()
        for _ in range(n)
    ]


def write_megatron(
    prefix: Path, docs: list[list[int]], dtype=np.uint16, split_every: int = 0
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # megatron-core's import-time notices
        from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for doc in docs:
        if split_every and len(doc) > split_every:  # a document of several sequences
            for i in range(0, len(doc), split_every):
                builder.add_item(torch.tensor(doc[i : i + split_every]))
        else:
            builder.add_item(torch.tensor(doc))
        builder.end_document()
    builder.finalize(f"{prefix}.idx")


def ids(batch: dict[str, torch.Tensor]) -> list[int]:
    real = batch["document_ids"] >= 0
    return (batch["document_ids"][real] * 1000 + batch["position_ids"][real]).tolist()


class TestMegatron:
    @pytest.mark.parametrize(("dtype", "split_every"), [(np.uint16, 0), (np.int32, 7)])
    def test_a_builder_dataset_reads_back_as_the_same_documents(self, tmp_path, dtype, split_every):
        docs = documents()
        write_megatron(tmp_path / "corpus", docs, dtype, split_every)
        for given in ("corpus", "corpus.bin", "corpus.idx"):
            dm = TextDataModule(
                token_files=tmp_path / given, vocab_size=50_000, val_split=0, num_workers=0
            )
            dm.setup("fit")
            assert stored_ids(dm.dataset.encoded) == docs
            assert isinstance(dm.dataset.encoded.tokens_np, np.memmap)
            assert dm.dataset.encoded.tokens_np.dtype == dtype
        assert dm.vocab_size == 50_000

    def test_packed_rows_cover_every_megatron_token_once(self, tmp_path):
        docs = documents(60)
        write_megatron(tmp_path / "corpus", docs)
        dm = TextDataModule(
            token_files=tmp_path / "corpus",
            vocab_size=50_000,
            packing=True,
            seq_length=64,
            batch_size=4,
            val_split=0.25,
            num_workers=0,
        )
        dm.setup("fit")
        lengths = [len(docs[i]) for i in dm.split_indices["train"].tolist()]
        expected = sorted(d * 1000 + p for d, n in enumerate(lengths) for p in range(n))
        assert sorted(i for b in dm.train_dataloader() for i in ids(b)) == expected
        first = next(iter(dm.val_dataloader()))
        doc = int(dm.split_indices["val"][0])
        assert first["input_ids"][0, : len(docs[doc])].tolist() == docs[doc][:64]

    def test_a_bad_header_or_size_names_the_file_and_what_was_expected(self, tmp_path):
        docs = documents(10)
        write_megatron(tmp_path / "c", docs)
        idx = (tmp_path / "c.idx").read_bytes()

        def broken(data: bytes, name: str) -> Path:
            (tmp_path / f"{name}.idx").write_bytes(data)
            (tmp_path / f"{name}.bin").write_bytes((tmp_path / "c.bin").read_bytes())
            return tmp_path / name

        cases = [
            (
                broken(b"NOTMEGA\x00\x00" + idx[9:], "magic"),
                r"magic\.idx: starts with .*expected the magic",
            ),
            (
                broken(idx[:9] + struct.pack("<Q", 2) + idx[17:], "version"),
                r"version\.idx: version 2, expected 1",
            ),
            (broken(idx[:-8], "short"), r"short\.idx: \d+ bytes, expected \d+ for 10 sequences"),
        ]
        for prefix, match in cases:
            with pytest.raises(ValueError, match=match):
                TextDataModule(token_files=prefix, num_workers=0).setup("fit")
        (tmp_path / "c.bin").write_bytes((tmp_path / "c.bin").read_bytes()[:-2])
        with pytest.raises(
            ValueError, match=r"c\.bin: \d+ bytes, expected \d+ \(\d+ tokens of uint16"
        ):
            TextDataModule(token_files=tmp_path / "c", num_workers=0).setup("fit")


class TestFlat:
    def test_a_nanogpt_file_splits_after_each_eos(self, tmp_path):
        eos = 50_256
        docs = [[5, 6, 7], [8], [9, 10, 11, 12]]
        flat = [t for d in docs for t in (*d, eos)] + [13, 14]  # a last document without eos
        np.asarray(flat, dtype=np.uint16).tofile(tmp_path / "train.bin")
        dm = TextDataModule(
            token_files=tmp_path / "train.bin", eos_id=eos, val_split=0, num_workers=0
        )
        dm.setup("fit")
        assert stored_ids(dm.dataset.encoded) == [
            [5, 6, 7, eos],
            [8, eos],
            [9, 10, 11, 12, eos],
            [13, 14],
        ]
        assert dm.dataset.where(1) == f"{tmp_path / 'train.bin'}, document 1"
        assert dm.vocab_size == eos + 1  # no tokenizer, no vocab_size: the largest id + 1
        np.save(tmp_path / "train.npy", np.asarray(flat, dtype=np.int32))
        dm = TextDataModule(
            token_files=tmp_path / "train.npy", eos_id=eos, vocab_size=50_304, num_workers=0
        )
        dm.setup("fit")
        assert len(dm.dataset) == 4 and dm.vocab_size == 50_304
        wide = TextDataModule(
            token_files=tmp_path / "train.bin", eos_id=eos, dtype="uint32", num_workers=0
        )
        with pytest.raises(
            ValueError, match=r"train\.bin: 26 bytes, not a whole number of uint32 tokens"
        ):
            wide.setup("fit")

    def test_the_summary_says_there_is_no_tokenizer(self, tmp_path):
        flat_ids(500, 1001, 1000).astype(np.uint16).tofile(tmp_path / "a.bin")
        summary = setup_flat(tmp_path / "a.bin", eos_id=1000).summary()
        assert "tokenizer: none (flat token_files), vocab_size=1001" in summary
        write_megatron(tmp_path / "m", documents(5))
        summary = setup_flat(tmp_path / "m", vocab_size=50_000).summary()
        assert "tokenizer: none (megatron token_files)" in summary and "NoneType" not in summary

    def test_flat_files_need_eos_id_and_a_matching_dtype(self, tmp_path):
        np.asarray([1, 2, 3], dtype=np.uint16).tofile(tmp_path / "a.bin")
        with pytest.raises(ValueError, match=r"a\.bin.* is a flat token file: give eos_id="):
            TextDataModule(token_files=tmp_path / "a.bin", num_workers=0).setup("fit")
        np.save(tmp_path / "a.npy", np.zeros((2, 2), dtype=np.int64))
        with pytest.raises(ValueError, match=r"a\.npy: a 2-D int64 array, expected a 1-D array"):
            TextDataModule(token_files=tmp_path / "a.npy", eos_id=0, num_workers=0).setup("fit")
        with pytest.raises(ValueError, match="dtype='float32' is not accepted"):
            TextDataModule(token_files=tmp_path / "a.bin", eos_id=0, dtype="float32")
        with pytest.raises(ValueError, match="max_length does not apply to token_files"):
            TextDataModule(token_files=tmp_path / "a.bin", eos_id=0, max_length=8)


def flat_ids(n: int, vocab: int, eos: int, zeros: float = 0.0, seed: int = 0) -> np.ndarray:
    """``n`` ids below ``vocab``, about 1% of them ``eos`` and a share ``zeros`` of them 0."""
    generator = np.random.default_rng(seed)
    ids = generator.integers(1, vocab, n)
    ids[generator.random(n) < 0.01] = eos
    ids[generator.random(n) < zeros] = 0
    return ids


def vocab_ids(n: int, vocab: int, spread: str, seed: int = 0) -> np.ndarray:
    """``n`` ids below ``vocab``, the last id every ~100 (an eos). ``uniform``: any id alike;
    ``zipf``: Zipf-distributed ranks (as a tokenizer's token frequencies are) over a random
    order of the ids; ``low``: the same ranks with the frequent ids lowest."""
    generator = np.random.default_rng(seed)
    if spread == "uniform":
        ids = generator.integers(0, vocab - 1, n)
    else:
        ranks = np.minimum(generator.zipf(1.2, n) - 1, vocab - 2)
        ids = ranks if spread == "low" else generator.permutation(vocab - 1)[ranks]
    ids[generator.random(n) < 0.01] = vocab - 1
    return ids


def setup_flat(path: Path, **kwargs) -> TextDataModule:
    dm = TextDataModule(token_files=path, val_split=0, num_workers=0, **kwargs)
    dm.setup("fit")
    return dm


class TestChecks:
    def test_an_id_at_or_above_vocab_size_names_file_largest_id_and_size(self, tmp_path):
        flat_ids(5000, 1001, 1000).astype(np.uint16).tofile(tmp_path / "a.bin")
        with pytest.raises(
            ValueError, match=r"a\.bin: its largest token id is 1000, not below vocab_size=100"
        ):
            setup_flat(tmp_path / "a.bin", eos_id=1000, vocab_size=100)
        assert setup_flat(tmp_path / "a.bin", eos_id=1000, vocab_size=1001).vocab_size == 1001
        write_megatron(tmp_path / "small", documents(10))  # ids up to 49,999, all sampled
        with pytest.raises(ValueError, match=r"small\.bin: its largest token id is \d+, not below"):
            setup_flat(tmp_path / "small", vocab_size=1000)
        # One id the sample does not see (token 2100: 64 windows of 4 KiB over 400 KB):
        # setup passes, and dm.vocab_size, which reads every id, raises.
        docs = [list(range(1, 1001)) for _ in range(200)]
        docs[2][100] = 7000
        write_megatron(tmp_path / "big", docs)
        dm = setup_flat(tmp_path / "big", vocab_size=1001)
        with pytest.raises(ValueError, match=r"big: its largest token id is 7000, not below vocab"):
            dm.vocab_size  # noqa: B018

    @pytest.mark.parametrize(
        ("stored", "given", "match"),
        [
            (np.uint32, None, r"read as dtype='uint16', the sampled ids look like uint32 ids"),
            (np.int64, None, r"read as dtype='uint16', the sampled ids look like int64 ids"),
            (np.int64, "uint32", r"read as dtype='uint32', the sampled ids look like int64 ids"),
            (np.uint16, "uint32", r"read as dtype='uint32', .* outside the usual range of token"),
            (np.uint16, "int64", r"read as dtype='int64', .* outside the usual range of token"),
        ],
    )
    def test_a_flat_file_read_with_another_dtype_raises_naming_its_own(
        self, tmp_path, stored, given, match
    ):
        flat_ids(5000, 1001, 1000).astype(stored).tofile(tmp_path / "a.bin")
        right = np.dtype(stored).name
        with pytest.raises(ValueError, match=rf"a\.bin: {match}.*dtype='{right}' right\?"):
            setup_flat(tmp_path / "a.bin", eos_id=1000, dtype=given, vocab_size=1001)
        dm = setup_flat(tmp_path / "a.bin", eos_id=1000, dtype=right, vocab_size=1001)
        assert dm.dataset.num_tokens == 5000

    @pytest.mark.parametrize(
        ("vocab", "zeros"), [(50_257, 0.0), (65, 0.03), (50_257, 0.4), (2, 0.0), (70_000, 0.0)]
    )
    def test_real_ids_of_their_own_dtype_pass(self, tmp_path, vocab, zeros):
        # GPT-2 ids, characters, zero padding, bits: real 16-bit (and 32-bit) ids pass
        dtype = np.uint16 if vocab <= 1 << 16 else np.uint32
        ids = flat_ids(300_000, vocab, vocab - 1, zeros)
        ids.astype(dtype).tofile(tmp_path / "a.bin")
        dm = setup_flat(tmp_path / "a.bin", eos_id=vocab - 1, dtype=np.dtype(dtype).name)
        assert dm.dataset.num_tokens == 300_000 and dm.vocab_size == vocab

    @pytest.mark.parametrize("spread", ["uniform", "zipf"])
    @pytest.mark.parametrize(("stored", "group"), [(np.uint32, 2), (np.int64, 4)])
    def test_a_128k_vocabulary_read_narrow_is_refused(self, tmp_path, spread, stored, group):
        # Llama 3's 128,256 ids: about half at or above 65,536, so a high half is 0 or 1, not
        # mostly 0 as below 65,536; it is below 256 in every pair, the low half rarely.
        ids = vocab_ids(200_000, 128_256, spread)
        assert 0.3 < float((ids >= 1 << 16).mean()) < 0.7
        ids.astype(stored).tofile(tmp_path / "a.bin")
        right = np.dtype(stored).name
        with pytest.raises(
            ValueError,
            match=rf"a\.bin: read as dtype='uint16', the sampled ids look like {right} ids \(in "
            rf"100% of \d+ sampled groups of {group} the parts after the first are below 256, "
            rf"as the high parts of ids below 2\*\*24 are, against 0% of the first parts\): "
            rf"is dtype='{right}' right\?",
        ):
            setup_flat(tmp_path / "a.bin", eos_id=128_000, dtype="uint16")
        dm = setup_flat(tmp_path / "a.bin", eos_id=128_000, dtype=right)
        assert dm.dataset.num_tokens == 200_000

    @pytest.mark.parametrize(
        ("vocab", "spread"), [(50_257, "zipf"), (50_257, "low"), (300, "zipf")]
    )
    def test_real_16_bit_ids_of_any_spread_pass(self, tmp_path, vocab, spread):
        # GPT-2's vocabulary (nanoGPT's train.bin) with frequent ids anywhere or all below
        # 256, and a small vocabulary whose ids are nearly all below 256: no false alarm.
        ids = vocab_ids(300_000, vocab, spread)
        ids.astype(np.uint16).tofile(tmp_path / "a.bin")
        dm = setup_flat(tmp_path / "a.bin", eos_id=vocab - 1, dtype="uint16")
        assert dm.dataset.num_tokens == 300_000

    def test_real_text_of_a_small_bpe_passes(self, tmp_path):
        tokenizer = bpe(corpus(400), vocab_size=300)
        ids = [i for e in tokenizer.encode_batch(corpus(400, seed=1)) for i in e.ids + [299]]
        assert len(ids) > 1024 and max(ids) < 300
        np.asarray(ids, dtype=np.uint16).tofile(tmp_path / "a.bin")
        assert setup_flat(tmp_path / "a.bin", eos_id=299, dtype="uint16").dataset.num_tokens == (
            len(ids)
        )

    def test_an_eos_id_that_never_occurs_warns_with_the_document_count(self, tmp_path):
        flat_ids(5000, 1001, 1000).astype(np.uint16).tofile(tmp_path / "a.bin")
        with pytest.warns(UserWarning, match=r"a\.bin: eos_id=5000 never occurs in its 5000 "):
            dm = setup_flat(tmp_path / "a.bin", eos_id=5000)
        assert len(dm.dataset) == 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an eos that occurs says nothing
            assert len(setup_flat(tmp_path / "a.bin", eos_id=1000).dataset) > 1

    @pytest.mark.parametrize("given", ["corpus_text_document", "corpus_text_document.bin"])
    def test_a_missing_megatron_prefix_says_neither_file_exists(self, tmp_path, given):
        prefix = tmp_path / "corpus_text_document"
        with pytest.raises(
            FileNotFoundError,
            match=rf"no such file, and no Megatron dataset of that prefix \(neither "
            rf"{prefix}\.bin nor {prefix}\.idx exists\)",
        ):
            setup_flat(tmp_path / given)
