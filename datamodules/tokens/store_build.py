"""Building a token store: documents read in chunks, tokenized in parallel, written as they come.

:func:`open_or_build` returns the mapped store of a corpus, building it first when it is
missing or broken (a broken one, whose sizes disagree with its metadata, is rebuilt with a
warning that says why). One process per machine builds, under an exclusive file lock on
``<store>.lock``; the others block on that lock and then map what it wrote. A waiting rank is
in ``flock``, not in a collective operation of the process group, so the wait does not count
against the DDP timeout; local rank 0 is the one that builds (the others let it take the lock
first), so the progress bar is rank 0's.

Tokenization (:func:`tokenize_chunks`) keeps every core busy while the reading and the
writing go on:

* a tokenizer with ``encode_batch`` (Hugging Face ``tokenizers``) runs in this process, two
  chunks in flight on two threads: its Rust code releases the GIL and uses every core, and
  while one chunk's ids are copied out the next one is being tokenized;
* any other tokenizer runs in ``tokenize_workers`` processes, a chunk at a time, in order.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from datamodules.core.context import log
from datamodules.tokens.store import StoredDocuments, StoreWriter, check_store
from datamodules.tokens.vocab import append_eos, encode_with, truncate

__all__ = [
    "ChunkWhere",
    "Encoded",
    "FIRST_WAIT_S",
    "Progress",
    "build_lock",
    "encode",
    "log_built",
    "open_or_build",
    "resolve_workers",
    "tokenize_chunks",
    "write_documents",
    "write_store",
]

#: How long a rank other than local rank 0 lets local rank 0 take the build lock first.
FIRST_WAIT_S = 30.0

Encoded = tuple[np.ndarray, np.ndarray]


class ChunkWhere:
    """Names document ``i`` of a chunk (picklable, for worker processes)."""

    def __init__(self, name: str, lines: list[int]) -> None:
        self.name, self.lines = name, lines

    def __call__(self, i: int) -> str:
        return f"{self.name}, line {self.lines[i]}"


_WORKER_TOKENIZER: Any = None


def _init_worker(tokenizer: Any) -> None:
    global _WORKER_TOKENIZER
    _WORKER_TOKENIZER = tokenizer


def _encode_in_worker(
    job: tuple[list[str], ChunkWhere, int | None, str, int | None],
) -> Encoded:
    texts, where, max_length, side, eos_id = job
    return encode(_WORKER_TOKENIZER, texts, where, max_length, side, eos_id)


def encode(
    tokenizer: Any,
    texts: list[str],
    where: Any,
    max_length: int | None,
    side: str,
    eos_id: int | None = None,
) -> Encoded:
    """One chunk's flat ids and lengths: with ``eos_id``, each document ends with it (appended
    where it does not); then truncated to ``max_length`` (the end-of-text id counts, and a
    document cut on the right loses it: it does not end there)."""
    flat, lengths = encode_with(tokenizer, texts, where)
    if eos_id is not None:
        flat, lengths = append_eos(flat, lengths, eos_id)
    if max_length is not None:
        flat, lengths = truncate(flat, lengths, max_length, side)
    return flat, lengths


def resolve_workers(tokenize_workers: int | str, tokenizer: Any) -> int:
    """Worker processes for ``tokenize_workers``: ``"auto"`` is 0 for a tokenizer with
    ``encode_batch`` (it uses every core itself), else the CPUs of this process."""
    if tokenize_workers != "auto":
        return int(tokenize_workers)
    if hasattr(tokenizer, "encode_batch"):
        return 0
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return 0 if (cpus or 1) < 2 else min(int(cpus or 1), 32)


def tokenize_chunks(
    tokenizer: Any,
    jobs: Iterable[tuple[list[str], ChunkWhere, Any]],
    workers: int,
    max_length: int | None,
    side: str,
    eos_id: int | None = None,
) -> Iterator[tuple[Any, Encoded]]:
    """Tokenizes chunks in order: yields ``(tag, (flat, lengths))`` for each
    ``(texts, where, tag)`` of ``jobs``, with a few chunks in flight (never the corpus)."""
    if workers <= 0:
        threads = 2 if hasattr(tokenizer, "encode_batch") else 1
        with ThreadPoolExecutor(threads, thread_name_prefix="tokenize") as pool:

            def in_thread(texts: list[str], where: ChunkWhere) -> Callable[[], Encoded]:
                return pool.submit(encode, tokenizer, texts, where, max_length, side, eos_id).result

            yield from _in_order(in_thread, jobs, threads)
        return
    import multiprocessing as mp

    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    context = mp.get_context(method)
    with context.Pool(workers, initializer=_init_worker, initargs=(tokenizer,)) as pool:

        def in_process(texts: list[str], where: ChunkWhere) -> Callable[[], Encoded]:
            job = (texts, where, max_length, side, eos_id)
            return pool.apply_async(_encode_in_worker, (job,)).get

        yield from _in_order(in_process, jobs, 2 * workers)


def _in_order(
    submit: Callable[[list[str], ChunkWhere], Callable[[], Encoded]],
    jobs: Iterable[tuple[list[str], ChunkWhere, Any]],
    window: int,
) -> Iterator[tuple[Any, Encoded]]:
    """Runs ``submit`` over ``jobs`` with at most ``window`` + 1 in flight; results in order."""
    pending: deque[tuple[Any, Callable[[], Encoded]]] = deque()
    for texts, where, tag in jobs:
        pending.append((tag, submit(texts, where)))
        if len(pending) > window:
            tag0, result = pending.popleft()
            yield tag0, result()
    while pending:
        tag0, result = pending.popleft()
        yield tag0, result()


class Progress:
    """Documents, tokens and tokens/s of a build, as a tqdm bar (``show``) or nothing."""

    def __init__(self, show: bool, what: str) -> None:
        self.start = time.perf_counter()
        self.documents = self.tokens = 0
        self.bar = None
        if show:
            from tqdm.auto import tqdm

            self.bar = tqdm(desc=f"tokenizing {what}", unit=" docs", mininterval=1.0)

    def update(self, documents: int, tokens: int) -> None:
        self.documents += documents
        self.tokens += tokens
        if self.bar is not None:
            rate = self.tokens / max(time.perf_counter() - self.start, 1e-9)
            self.bar.set_postfix_str(f"{self.tokens:,} tokens, {rate:,.0f} tokens/s", refresh=False)
            self.bar.update(documents)

    def close(self) -> float:
        if self.bar is not None:
            self.bar.close()
        return time.perf_counter() - self.start


@contextlib.contextmanager
def build_lock(path: str, local_rank: int) -> Iterator[None]:
    """The machine's exclusive lock on building ``path``; local rank 0 takes it first."""
    marker = path + ".building"
    if local_rank > 0:
        deadline = time.monotonic() + FIRST_WAIT_S
        while time.monotonic() < deadline and not (
            os.path.exists(marker) or check_store(path)[0] is not None
        ):
            time.sleep(0.05)
    handle = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        try:
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(marker)
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        os.close(handle)


def open_or_build(
    path: str,
    build: Callable[[], dict[str, Any]],
    local_rank: int,
) -> StoredDocuments:
    """The store at ``path``, mapped; built by ``build()`` first when missing or broken.

    ``build()`` writes the store (a :class:`~datamodules.tokens.store.StoreWriter` renames it
    into place) and is called under the machine's lock, by one process.
    """
    meta, _ = check_store(path)
    if meta is not None:
        return StoredDocuments(path, meta)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with build_lock(path, local_rank):
        meta, reason = check_store(path)
        if meta is None:
            if reason is not None:
                warnings.warn(
                    f"the token store {path} is broken: {reason}. Rebuilding it.",
                    UserWarning,
                    stacklevel=4,
                )
                shutil.rmtree(path, ignore_errors=True)
            build()
            meta, reason = check_store(path)
            if meta is None:
                raise RuntimeError(
                    f"the token store {path} was built but is not complete: {reason}."
                )
            store = StoredDocuments(path, meta)
            store.built = True
            return store
    return StoredDocuments(path, meta)


def write_documents(
    writer: StoreWriter,
    chunks: Iterable[tuple[int, Any]],
    tokenizer: Any,
    names: list[str],
    workers: int,
    max_length: int | None,
    side: str,
    progress: Progress,
    eos_id: int | None = None,
) -> dict[int, list[Any]]:
    """Tokenizes ``(file, Chunk)`` pairs into ``writer``; returns each file's raw labels (None
    for a record without one), in document order."""
    labels: dict[int, list[Any]] = {}

    def jobs() -> Iterator[tuple[list[str], ChunkWhere, Any]]:
        for file, chunk in chunks:
            yield chunk.texts, ChunkWhere(names[file], chunk.lines), (file, chunk)

    encoded = tokenize_chunks(tokenizer, jobs(), workers, max_length, side, eos_id)
    for (file, chunk), (flat, lengths) in encoded:
        writer.add(flat, lengths, file, chunk.lines)
        got = chunk.labels if chunk.labels is not None else [None] * len(chunk.texts)
        labels.setdefault(file, []).extend(got)
        progress.update(len(lengths), int(lengths.sum()))
    return labels


def log_built(path: str, progress: Progress, seconds: float) -> None:
    """One log line about a finished build (rank 0)."""
    rate = progress.tokens / max(seconds, 1e-9)
    log.info(
        f"token store {path}: {progress.documents:,} documents, {progress.tokens:,} tokens in "
        f"{seconds:.1f} s ({rate:,.0f} tokens/s)"
    )


def write_store(
    path: str,
    dtype: Any,
    names: list[str],
    what: str,
    fill: Callable[[StoreWriter, Progress], dict[str, Any]],
    ranks: tuple[int, int],
) -> StoredDocuments:
    """The store at ``path``, mapped; built first (:func:`open_or_build`) when missing.

    The build writes into a :class:`~datamodules.tokens.store.StoreWriter` of ``dtype``
    whose inputs are ``names``: ``fill(writer, progress)`` adds the documents and returns the
    metadata, which the writer then finishes with; a failure removes the unfinished store.
    ``ranks`` is ``(local rank, global rank)``: rank 0 shows the progress (``tokenizing
    {what}``) and logs the finished build.
    """
    local_rank, rank = ranks

    def build() -> dict[str, Any]:
        writer = StoreWriter(path, dtype)
        writer.names = names
        progress = Progress(rank == 0, what)
        try:
            meta = fill(writer, progress)
            writer.finish(meta)
        except BaseException:
            progress.close()
            writer.abort()
            raise
        seconds = progress.close()
        if rank == 0:
            log_built(path, progress, seconds)
        return meta

    return open_or_build(path, build, local_rank)
