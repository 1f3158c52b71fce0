"""The token store on a corpus of 100 M tokens: build, map, memory, batches, against litdata.

The corpus: the Python standard library's own ``.py`` files (``sysconfig``'s stdlib folder,
site-packages left out), each file a document, repeated with seeded line shuffles until the
corpus holds ``--tokens`` tokens, written as JSONL shards of about 64 MB. The tokenizer: a
byte-level BPE with a 16k vocabulary trained offline with Hugging Face ``tokenizers``
(``train_from_iterator``) on those files. Every figure comes from this one run:

1. **First setup** (read the shards, tokenize, write the store) against
   ``tokenizer.encode_batch`` alone over the same texts (already in memory, in chunks of
   4,096): tokens/s of each, and the ratio (bar >= 0.85x).
2. **Second setup** (a new DataModule mapping the store): median time, as a share of the
   first setup (bar < 1 %).
3. **Memory**: a fresh process iterates a whole packed epoch (``seq_length=2048``, 8 rows,
   ``num_workers=0``) of the store, sampling ``RssAnon`` from ``/proc/self/status``; the same
   loop over a 1 M-token store. Bar: the peak of the large one at most 100 MB above the small.
4. **Packed batches from the store against in-memory packing** on a corpus that fits
   (``--fit-tokens``): the same documents given as a list of texts (tokenized into RAM) and as
   JSONL shards through the store; real tokens/s over whole epochs, ``num_workers=0``,
   alternating, medians (bar >= 0.9x).
5. **Against litdata**: the same tokens written by ``litdata.optimize`` (one tensor per
   document, ``TokensLoader``) and read by ``StreamingDataset(item_loader=TokensLoader(2049))``
   with ``StreamingDataLoader(batch_size=8, num_workers=2)``; ours from the store,
   ``packing=True, seq_length=2048, batch_size=8, num_workers=2``. Real tokens/s (ours: the
   attention mask's sum; litdata: every token of its 2,049-token blocks), over whole epochs
   after a warm-up one, medians (bar >= 2x).

Run: ``python benchmarks/bench_corpus.py`` (about 15 minutes on 2 cores; needs the ``bench``
extra for litdata). ``--tokens 5e6 --fit-tokens 2e6`` gives a quick run.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datamodules import TextDataModule  # noqa: E402

# Benchmarks print figures, not the DataModules' summaries (logged at INFO).
logging.getLogger("datamodules").setLevel(logging.WARNING)

SEQ, ROWS, CHUNK = 2048, 8, 4096


def stdlib_texts() -> list[str]:
    """The standard library's .py files (site-packages left out), in path order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    return [t for t in texts if t.strip()]


def train_tokenizer(texts: list[str], vocab: int) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def documents(texts: list[str], tokens: float, per_char: float):
    """The corpus' documents: the files, then seeded line shuffles of them, until ``tokens``."""
    budget = tokens / per_char * 1.03  # characters, with a margin over the estimate
    chars, k = 0, 0
    while chars < budget:
        for i, text in enumerate(texts):
            if k:
                lines = text.split("\n")
                random.Random(k * 1_000_003 + i).shuffle(lines)
                text = "\n".join(lines)
            yield text
            chars += len(text)
            if chars >= budget:
                return
        k += 1


def write_shards(docs, out: Path, shard_bytes: int = 64 << 20) -> tuple[list[str], int]:
    out.mkdir(parents=True, exist_ok=True)
    paths, handle, size, count = [], None, 0, 0
    for text in docs:
        if handle is None or size >= shard_bytes:
            if handle is not None:
                handle.close()
            paths.append(str(out / f"shard-{len(paths):04d}.jsonl"))
            handle, size = open(paths[-1], "w"), 0  # noqa: SIM115
        line = json.dumps({"text": text}) + "\n"
        handle.write(line)
        size += len(line)
        count += 1
    handle.close()
    return paths, count


def read_texts(paths: list[str]) -> list[str]:
    return [json.loads(line)["text"] for p in paths for line in open(p)]


def module(shards: str, cache: Path, tokenizer: Any, **kwargs: Any) -> TextDataModule:
    options = {
        "packing": True,
        "seq_length": SEQ,
        "batch_size": ROWS,
        "val_split": 0,
        "num_workers": 0,
    }
    options.update(kwargs)
    return TextDataModule(train_file=shards, tokenizer=tokenizer, token_cache=cache, **options)


def epoch_tokens(loader: Any) -> tuple[int, float]:
    start = time.perf_counter()
    tokens = 0
    for batch in loader:
        tokens += int(batch["attention_mask"].sum()) if isinstance(batch, dict) else batch.numel()
    return tokens, time.perf_counter() - start


def rss_anon_kb() -> int:
    for line in open("/proc/self/status"):  # noqa: SIM115 (read to the end)
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    return -1


def rss_child(shards: str, cache: str, tokenizer_file: str) -> None:
    """In a fresh process: one packed epoch over a built store; prints peak RssAnon (kB)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_file)
    dm = module(shards, Path(cache), tokenizer)
    start = rss_anon_kb()
    peak, batches, tokens = start, 0, 0
    for batch in dm.train_dataloader():
        batches += 1
        tokens += int(batch["attention_mask"].sum())
        if batches % 50 == 0:
            peak = max(peak, rss_anon_kb())
    peak = max(peak, rss_anon_kb())
    print(json.dumps({"start_kb": start, "peak_kb": peak, "batches": batches, "tokens": tokens}))


def measure_rss(shards: str, cache: Path, tokenizer_file: str) -> dict[str, int]:
    command = [sys.executable, __file__, "--rss-child", shards, str(cache), tokenizer_file]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


class StoreDocuments:
    """``litdata.optimize``'s function: one int32 tensor per document of a span of the store
    (picklable for its spawned workers: it maps the store's files again)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, span: tuple[int, int]):
        meta = json.loads((Path(self.path) / "meta.json").read_text())
        tokens = np.memmap(
            Path(self.path) / "tokens.bin", meta["dtype"], "r", shape=(meta["tokens"],)
        )
        offsets = np.load(Path(self.path) / "offsets.npy", mmap_mode="r")
        for d in range(*span):
            yield torch.from_numpy(np.asarray(tokens[offsets[d] : offsets[d + 1]], dtype=np.int32))


def litdata_write(store_dm: TextDataModule, out: Path) -> None:
    from litdata import optimize
    from litdata.streaming.item_loader import TokensLoader

    n = len(store_dm.dataset)
    optimize(
        fn=StoreDocuments(store_dm.dataset.path),
        inputs=[(i, min(i + 512, n)) for i in range(0, n, 512)],
        output_dir=str(out),
        chunk_size=(SEQ + 1) * 1024,
        item_loader=TokensLoader(),
        num_workers=2,
        verbose=False,
    )


def litdata_loader(out: Path) -> Any:
    from litdata import StreamingDataLoader, StreamingDataset
    from litdata.streaming.item_loader import TokensLoader

    dataset = StreamingDataset(
        str(out), item_loader=TokensLoader(block_size=SEQ + 1), shuffle=True, drop_last=True
    )
    return StreamingDataLoader(dataset, batch_size=ROWS, num_workers=2, persistent_workers=True)


class Blocks(torch.utils.data.Dataset):
    """One ready (8, 2049) int32 block per index: what any loader that sends one batch per
    message at least pays for the message."""

    def __init__(self, count: int) -> None:
        self.count, self.block = count, torch.zeros(ROWS, SEQ + 1, dtype=torch.int32)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.block


def message_floor(tokens: int) -> Any:
    """A DataLoader with 2 workers sending ready blocks: the ceiling of one batch a message."""
    blocks = Blocks(max(1, tokens // (ROWS * (SEQ + 1))))
    return torch.utils.data.DataLoader(
        blocks, batch_size=None, num_workers=2, persistent_workers=True
    )


def row(name: str, value: str, bar: str, met: bool | None) -> None:
    verdict = "" if met is None else ("met" if met else "NOT MET")
    print(f"| {name} | {value} | {bar} | {verdict} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=float, default=100e6)
    parser.add_argument("--small-tokens", type=float, default=1e6)
    parser.add_argument("--fit-tokens", type=float, default=10e6)
    parser.add_argument("--vocab", type=int, default=16_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--work", default=None, help="working folder (default: a temporary one)")
    parser.add_argument("--rss-child", nargs=3, metavar=("SHARDS", "CACHE", "TOKENIZER"))
    args = parser.parse_args()
    if args.rss_child:
        rss_child(*args.rss_child)
        return
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-corpus-"))
    shutil.rmtree(work / "tokens", ignore_errors=True)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, torch {torch.__version__}"
    )
    start = time.perf_counter()
    files = stdlib_texts()
    tokenizer = train_tokenizer(files, args.vocab)
    tokenizer.save(str(work / "tokenizer.json"))
    sample = files[:: max(1, len(files) // 200)]
    per_char = sum(len(e) for e in tokenizer.encode_batch(sample)) / sum(map(len, sample))
    print(
        f"{len(files)} stdlib files; BPE of {tokenizer.get_vocab_size()} ids trained in "
        f"{time.perf_counter() - start:.0f} s; {per_char:.3f} tokens/char"
    )
    corpora = {}
    for name, target in (
        ("large", args.tokens),
        ("small", args.small_tokens),
        ("fit", args.fit_tokens),
    ):
        paths, count = write_shards(documents(files, target, per_char), work / name)
        corpora[name] = str(work / name / "*.jsonl")
        print(
            f"{name}: {count:,} documents in {len(paths)} JSONL shards "
            f"({sum(os.path.getsize(p) for p in paths) / 1e6:.0f} MB)"
        )
    cache = work / "tokens"

    # 1-2. The first setup against encode_batch alone; the second setup.
    first_dm = module(corpora["large"], cache, tokenizer)
    t0 = time.perf_counter()
    first_dm.setup("fit")
    first = time.perf_counter() - t0
    tokens = first_dm.dataset.num_tokens
    texts = read_texts(sorted(str(p) for p in (work / "large").glob("*.jsonl")))
    t0 = time.perf_counter()
    counted = 0
    for i in range(0, len(texts), CHUNK):
        counted += sum(len(e) for e in tokenizer.encode_batch(texts[i : i + CHUNK]))
    alone = time.perf_counter() - t0
    assert counted == tokens, (counted, tokens)
    t0 = time.perf_counter()
    for i in range(0, len(texts), CHUNK):
        tokenizer.encode_batch_fast(texts[i : i + CHUNK])
    alone_fast = time.perf_counter() - t0
    del texts
    gc.collect()
    seconds = []
    for _ in range(args.repeats):
        dm = module(corpora["large"], cache, tokenizer)
        t0 = time.perf_counter()
        dm.setup("fit")
        seconds.append(time.perf_counter() - t0)
        del dm
    second = statistics.median(seconds)

    # 3. Memory of a packed epoch: the large store against a small one.
    module(corpora["small"], cache, tokenizer).setup("fit")
    tok_file = str(work / "tokenizer.json")
    big = measure_rss(corpora["large"], cache, tok_file)
    small = measure_rss(corpora["small"], cache, tok_file)
    above_mb = (big["peak_kb"] - small["peak_kb"]) / 1024

    # 4. Packed batches from the store against in-memory packing, on a corpus that fits.
    fit_texts = read_texts(sorted(str(p) for p in (work / "fit").glob("*.jsonl")))
    stored = module(corpora["fit"], cache, tokenizer)
    stored.setup("fit")
    memory = TextDataModule(
        fit_texts,
        tokenizer=tokenizer,
        packing=True,
        seq_length=SEQ,
        batch_size=ROWS,
        val_split=0,
        num_workers=0,
    )
    memory.setup("fit")
    assert np.array_equal(
        np.asarray(memory.dataset.encoded.tokens_np), np.asarray(stored.dataset.encoded.tokens_np)
    )
    rates: dict[str, list[float]] = {"store": [], "memory": []}
    loaders = {"store": stored.train_dataloader(), "memory": memory.train_dataloader()}
    epoch_tokens(loaders["store"])  # warm the page cache
    for _ in range(args.repeats):
        for name, loader in loaders.items():
            n, s = epoch_tokens(loader)
            rates[name].append(n / s)
    fit_ratio = statistics.median(
        a / b for a, b in zip(rates["store"], rates["memory"], strict=True)
    )

    # 5. Against litdata's TokensLoader over the same tokens, 2 workers each.
    lit_dir = work / "litdata"
    shutil.rmtree(lit_dir, ignore_errors=True)
    t0 = time.perf_counter()
    litdata_write(stored, lit_dir)
    lit_write = time.perf_counter() - t0
    ours_loader = module(
        corpora["fit"], cache, tokenizer, num_workers=2, persistent_workers=True
    ).train_dataloader()
    lit = litdata_loader(lit_dir)
    versus: dict[str, list[float]] = {"ours": [], "litdata": []}
    epoch_tokens(ours_loader), epoch_tokens(lit)  # warm-up epochs (workers, page cache)
    for _ in range(args.repeats):
        for name, loader in (("ours", ours_loader), ("litdata", lit)):
            n, s = epoch_tokens(loader)
            versus[name].append(n / s)
    lit_ratio = statistics.median(
        a / b for a, b in zip(versus["ours"], versus["litdata"], strict=True)
    )
    extra = {
        "in-process": module(corpora["fit"], cache, tokenizer).train_dataloader(),
        "floor": message_floor(stored.dataset.num_tokens),
    }
    for name, loader in extra.items():
        epoch_tokens(loader)
        versus[name] = []
        for _ in range(args.repeats):
            n, s = epoch_tokens(loader)
            versus[name].append(n / s)
    med = {k: statistics.median(v) for k, v in versus.items()}

    rate_first, rate_alone = tokens / first, tokens / alone
    print()
    print(
        f"large store: {tokens:,} tokens, {len(first_dm.dataset):,} documents "
        f"({first_dm.dataset.encoded.tokens_np.dtype})"
    )
    print("| measure | figure | bar | |")
    print("|---|---|---|---|")
    row(
        "first setup (read, tokenize, write) vs `encode_batch` alone",
        f"{rate_first / 1e6:.3f} M vs {rate_alone / 1e6:.3f} M tokens/s: "
        f"**{rate_first / rate_alone:.2f}x**",
        ">= 0.85x",
        rate_first / rate_alone >= 0.85,
    )
    row(
        "first setup vs `encode_batch_fast` alone (what the store calls)",
        f"{rate_first / 1e6:.3f} M vs {tokens / alone_fast / 1e6:.3f} M tokens/s: "
        f"{rate_first * alone_fast / tokens:.2f}x",
        "",
        None,
    )
    row(
        "second setup (map the store)",
        f"{second * 1e3:.1f} ms = **{second / first:.4%}** of the first ({first:.0f} s)",
        "< 1 %",
        second / first < 0.01,
    )
    row(
        f"`RssAnon` peak of a packed epoch, {tokens / 1e6:.0f} M-token store vs "
        f"{small['tokens'] / 1e6:.1f} M",
        f"{big['peak_kb'] / 1024:.0f} MB vs {small['peak_kb'] / 1024:.0f} MB: "
        f"**+{above_mb:.0f} MB** ({big['batches']:,} vs {small['batches']:,} batches)",
        "<= 100 MB above",
        above_mb <= 100,
    )
    row(
        f"packed batches, store vs in memory ({stored.dataset.num_tokens / 1e6:.1f} M tokens, "
        "0 workers)",
        f"{statistics.median(rates['store']) / 1e6:.1f} M vs "
        f"{statistics.median(rates['memory']) / 1e6:.1f} M real tokens/s: **{fit_ratio:.2f}x**",
        ">= 0.9x",
        fit_ratio >= 0.9,
    )
    row(
        "real tokens/s vs litdata `TokensLoader(2049)`, 2 workers each",
        f"{statistics.median(versus['ours']) / 1e6:.1f} M vs "
        f"{statistics.median(versus['litdata']) / 1e6:.1f} M: **{lit_ratio:.2f}x**",
        ">= 2x",
        lit_ratio >= 2,
    )
    row(
        'ours in-process (`num_workers=0`, what `"auto"` picks) vs litdata with 2 workers',
        f"{med['in-process'] / 1e6:.1f} M vs {med['litdata'] / 1e6:.1f} M: "
        f"{med['in-process'] / med['litdata']:.2f}x",
        "",
        None,
    )
    row(
        "2 workers sending one ready (8, 2049) int32 block a message: the ceiling",
        f"{med['floor'] / 1e6:.1f} M tokens/s = {med['floor'] / med['litdata']:.2f}x litdata",
        "",
        None,
    )
    print(
        f"\n(litdata.optimize wrote the {stored.dataset.num_tokens / 1e6:.1f} M tokens in "
        f"{lit_write:.0f} s; the whole run took {time.perf_counter() - start:.0f} s)"
    )
    print(
        f"repeats: {args.repeats}; M tokens/s: "
        + "; ".join(f"{k} {[round(r / 1e6, 1) for r in v]}" for k, v in {**rates, **versus}.items())
    )
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
