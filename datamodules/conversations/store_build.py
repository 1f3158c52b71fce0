"""Rendering conversations into the token store, in parallel, with their loss mask (chat and
image-text conversations both render through it).

:func:`build_store` returns the mapped store of a chat corpus: on the first setup it renders
every record with the :class:`~datamodules.conversations.ChatRenderer` (in
``tokenize_workers`` processes, a chunk of records each, in order, a few chunks in flight)
and writes the ids and the per-token mask (``trained.bin``) into a
:class:`~datamodules.tokens.store.StoreWriter`; later setups, runs and ranks map it and
render nothing. The builder, the lock and the key are the token store's own
(:mod:`datamodules.tokens.store_build`).

A record that cannot be rendered raises, named ``file, line N`` (or ``row N``) with the
renderer's reason, under ``on_error="raise"``; under ``"skip"`` it is left out and counted in
the store's metadata (kept, so that a later setup that renders nothing still reports it). An
error whose ``always_raise`` is true (a limit the user asked to enforce) raises under both.

A renderer returns ``(ids, mask)`` for a record, or ``(ids, mask, note)``: ``note`` (a short
string, or None) is counted in the store's metadata under ``notes`` (what a renderer did to some
records: cut them, dropped them), and ``ids`` None leaves the record out. The mask is a
``uint8`` per token: 0 or 1 (trained) for chat; a renderer may use its higher bits for its own
codes (the store counts the tokens whose bit 0 is set as trained).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from datamodules.conversations.messages import ConversationError
from datamodules.core.skipped import KEEP_MESSAGES, Skipped
from datamodules.tokens.store import StoredDocuments, StoreWriter, token_dtype
from datamodules.tokens.store_build import Progress, _in_order, write_store

__all__ = [
    "RecordChunk",
    "Rendered",
    "build_store",
    "count_store_skips",
    "render_chunk",
    "render_workers",
    "rendered",
    "store_meta",
    "store_ranks",
]


@dataclass
class RecordChunk:
    """Consecutive records of one input: the records and, per record, its line or row."""

    records: list[Any]
    lines: list[int]


#: One chunk rendered: flat ids, lengths, flat mask, the kept records' lines, the skipped
#: ones as ``(where, why)``, and the renderer's notes counted.
Rendered = tuple[
    np.ndarray, np.ndarray, np.ndarray, list[int], list[tuple[str, str]], dict[str, int]
]

_WORKER_RENDERER: Any = None


def render_chunk(
    renderer: Callable[[Mapping[str, Any]], tuple[Any, ...]],
    chunk: RecordChunk,
    name: str,
    on_error: str,
) -> Rendered:
    """Renders one chunk's records; a bad one raises (naming ``name`` and its line or row)
    or, under ``on_error="skip"``, is listed with the reason."""
    lowered = name.lower()
    unit = "line"
    if lowered.endswith((".parquet", ".pq", ".arrow")) or name.startswith("<"):
        unit = "row"
    elif lowered.endswith((".tar", ".tar.gz", ".tgz", ".tar.zst")):
        unit = "record"
    ids: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    kept: list[int] = []
    skipped: list[tuple[str, str]] = []
    notes: dict[str, int] = {}
    for record, line in zip(chunk.records, chunk.lines, strict=True):
        try:
            if not isinstance(record, Mapping):
                raise ConversationError(
                    f"a record is an object, got a {type(record).__name__} ({str(record)[:60]})"
                )
            out = renderer(record)
        except ConversationError as error:
            if on_error == "raise" or getattr(error, "always_raise", False):
                raise type(error)(f"{name}, {unit} {line}: {error}") from None
            skipped.append((f"{name}, {unit} {line}", str(error)))
            continue
        got, trained = out[0], out[1]
        if len(out) > 2 and out[2] is not None:
            notes[out[2]] = notes.get(out[2], 0) + 1
        if got is None:
            continue
        ids.append(np.asarray(got, dtype=np.int64))
        masks.append(np.asarray(trained, dtype=np.uint8))
        kept.append(line)
    lengths = np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))
    flat = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    mask = np.concatenate(masks) if masks else np.zeros(0, np.uint8)
    return flat, lengths, mask, kept, skipped, notes


def _init_worker(renderer: Any) -> None:
    global _WORKER_RENDERER
    _WORKER_RENDERER = renderer


def _render_in_worker(job: tuple[RecordChunk, str, str]) -> Rendered:
    return render_chunk(_WORKER_RENDERER, *job)


def store_ranks(trainer: Any) -> tuple[int, int]:
    """``(local rank, global rank)`` of this process, for a store's build: the Trainer's, else
    the process group's (``LOCAL_RANK`` for the local one)."""
    if trainer is not None:
        return trainer.local_rank, trainer.global_rank
    from datamodules.core.samplers import current_rank_and_world

    rank, _ = current_rank_and_world()
    return int(os.environ.get("LOCAL_RANK", rank)), rank


def render_workers(tokenize_workers: int | str) -> int:
    """Processes for ``tokenize_workers``: ``"auto"`` is the CPUs of this process (none on
    one CPU)."""
    if tokenize_workers != "auto":
        return int(tokenize_workers)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return 0 if (cpus or 1) < 2 else min(int(cpus or 1), 32)


def rendered(
    renderer: Any, jobs: Iterable[tuple[RecordChunk, str, str, Any]], workers: int
) -> Iterator[tuple[Any, Rendered]]:
    """``(tag, rendered)`` per job, in order, with a few chunks in flight."""
    tagged = ((chunk, (name, on_error), tag) for chunk, name, on_error, tag in jobs)
    if workers <= 0:

        def here(chunk: RecordChunk, how: tuple[str, str]) -> Callable[[], Rendered]:
            result = render_chunk(renderer, chunk, *how)
            return lambda: result

        yield from _in_order(here, tagged, 0)
        return
    import multiprocessing as mp

    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    with mp.get_context(method).Pool(workers, _init_worker, (renderer,)) as pool:

        def there(chunk: RecordChunk, how: tuple[str, str]) -> Callable[[], Rendered]:
            return pool.apply_async(_render_in_worker, ((chunk, *how),)).get

        yield from _in_order(there, tagged, 2 * workers)


def store_meta(
    material: dict[str, Any], names: list[str], workers: int, counts: dict[str, int],
    first: list[tuple[str, str]], trained: int, notes: dict[str, int] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The metadata a rendered store keeps: its key's material, its inputs, the render
    workers, the records skipped per input (and the first of them), the trained tokens and
    the renderer's notes counted."""
    return {
        "inputs": material, "files": names, "workers": workers, "skipped": counts,
        "skipped_first": first, "trained_tokens": trained, "notes": notes or {},
    }  # fmt: skip


def count_store_skips(skipped: Skipped, store: Any, counted: set[str]) -> None:
    """Adds a store's skipped records (from its metadata) to ``skipped``, once per store
    (``counted``: the paths already added)."""
    if store.path in counted:
        return
    counted.add(store.path)
    first = store.meta.get("skipped_first", [])
    for name, count in store.meta.get("skipped", {}).items():
        skipped.add(name, count, [(w, why) for w, why in first if w.startswith(f"{name}, ")])


def build_store(
    path: str,
    renderer: Any,
    names: list[str],
    chunks: Callable[[], Iterable[tuple[int, RecordChunk]]],
    *,
    material: dict[str, Any],
    on_error: str,
    workers: int,
    ranks: tuple[int, int],
) -> StoredDocuments:
    """The store at ``path``, mapped; rendered into first when missing (see the module
    docstring). ``chunks()`` yields ``(input index, RecordChunk)``; ``ranks`` is
    ``(local rank, global rank)``."""
    what = names[0] if len(names) == 1 else f"{len(names)} inputs"

    def fill(writer: StoreWriter, progress: Progress) -> dict[str, Any]:
        first: list[tuple[str, str]] = []
        counts: dict[str, int] = {}
        trained = 0
        notes: dict[str, int] = {}
        empty = np.zeros(0, np.int64)
        writer.add(empty, empty, 0, [], empty)  # the mask file, even for no records
        jobs = ((c, names[i], on_error, i) for i, c in chunks())
        for file, (flat, lengths, mask, kept, bad, noted) in rendered(renderer, jobs, workers):
            writer.add(flat, lengths, file, kept, mask)
            trained += int(np.count_nonzero(mask & 1))
            for key, count in noted.items():
                notes[key] = notes.get(key, 0) + count
            if bad:
                counts[names[file]] = counts.get(names[file], 0) + len(bad)
                first.extend(bad[: max(KEEP_MESSAGES - len(first), 0)])
            progress.update(len(lengths), int(lengths.sum()))
        return store_meta(material, names, workers, counts, first, trained, notes)

    return write_store(path, token_dtype(renderer.vocab_size), names, what, fill, ranks)
