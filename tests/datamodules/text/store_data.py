"""Small corpora and tokenizers for the token-store tests: a byte-level BPE, counting wrappers,
and files of every input format."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard
from tokenizers import Tokenizer, models, pre_tokenizers, trainers


def corpus(n: int = 300, seed: int = 0) -> list[str]:
    """Code-like texts of varied lengths (text i is deterministic in i and seed)."""
    words = ["def", "return", "self", "value", "import", "class", "for", "in", "if", "None"]
    out = []
    for i in range(n):
        k = 3 + (i * 7 + seed) % 40
        out.append(
            " ".join(words[(i * 3 + j * (seed + 1)) % len(words)] + str(j % 5) for j in range(k))
        )
    return out


def bpe(texts: list[str], vocab_size: int = 400) -> Tokenizer:
    """A byte-level BPE trained on ``texts`` (HF tokenizers, offline)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


class CountingTokenizer:
    """A Hugging Face tokenizer whose ``encode_batch`` calls are counted (in ``calls``, and as
    lines appended to ``log`` when given, which counts the calls of every process)."""

    def __init__(self, tokenizer: Tokenizer, log: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.log = log
        self.calls = [0]  # a list: the fingerprint (the tokenizer's to_str) does not see it

    def encode_batch(self, texts: list[str]) -> Any:
        self.calls[0] += 1
        if self.log is not None:
            with open(self.log, "a") as f:
                f.write(f"{len(texts)}\n")
        return self.tokenizer.encode_batch(texts)

    def get_vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def to_str(self) -> str:
        return self.tokenizer.to_str()


def reference_ids(tokenizer: Tokenizer, texts: list[str]) -> list[list[int]]:
    """What ``encode_batch`` gives for each text: what the store must hold."""
    return [e.ids for e in tokenizer.encode_batch(texts)]


def stored_ids(encoded: Any) -> list[list[int]]:
    """Every document of an EncodedTexts, in order."""
    offsets = encoded.offsets_np
    return [encoded.tokens_np[offsets[i] : offsets[i + 1]].tolist() for i in range(len(encoded))]


def write_jsonl(path: Path, texts: list[str], labels: list[Any] | None = None) -> Path:
    lines = []
    for i, text in enumerate(texts):
        record = {"text": text}
        if labels is not None:
            record["label"] = labels[i]
        lines.append(json.dumps(record))
    data = ("\n".join(lines) + "\n").encode()
    if path.suffix == ".gz":
        data = gzip.compress(data)
    elif path.suffix == ".zst":
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


def write_formats(root: Path, texts: list[str]) -> list[Path]:
    """``texts`` cut into six files of six formats, in the order a sorted directory lists them."""
    root.mkdir(parents=True, exist_ok=True)
    parts = [texts[i::6] for i in range(6)]
    a = write_jsonl(root / "a.jsonl", parts[0])
    b = write_jsonl(root / "b.jsonl.gz", parts[1])
    c = root / "c.csv"
    with open(c, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text"])
        writer.writerows([i, t] for i, t in enumerate(parts[2]))
    d = root / "d.tsv.zst"
    body = "text\n" + "".join(t + "\n" for t in parts[3])
    d.write_bytes(zstandard.ZstdCompressor().compress(body.encode()))
    e = root / "e.parquet"
    pq.write_table(
        pa.table({"text": parts[4], "n": list(range(len(parts[4])))}), e, row_group_size=7
    )
    f_txt = root / "f.txt"
    f_txt.write_text("".join(t + "\n" for t in parts[5]))
    return [a, b, c, d, e, f_txt]


def in_file_order(texts: list[str]) -> list[str]:
    """The texts in the order :func:`write_formats`' files hold them."""
    return [t for i in range(6) for t in texts[i::6]]
