"""Worker tuner: time the real train loader for candidate settings and pick one.

:func:`tune_datamodule` (what :meth:`BaseDataModule.tune_loader` and ``num_workers="tune"``
run) builds the DataModule's own loader (its split view, its sampler, its collate, its
``pin_memory``) once per candidate ``(num_workers, prefetch_factor)``, skips the batches that
worker start-up and the first prefetch hand out for free, then times ``max_batches`` batches.
Every candidate is measured ``repeats`` times, in interleaved rounds so that a slow spell of a
shared machine does not land on one candidate only, and scored by the median of its repeats.

The decision, :func:`choose`, is a pure function of that table: among the candidates whose
median is within ``tolerance`` (5 %) of the fastest, it takes the one with the fewest workers,
then the smallest prefetch factor. Fewer workers cost less memory and start faster, and a
5 % difference is below what a loaded machine can resolve. The same table always gives the
same choice.

Under DDP the measurement runs once, on global rank 0 (a local rank 0), while the other
ranks wait; the choice is then broadcast so that every rank uses the same settings (the
nodes of a DDP job are assumed alike). Candidates go up to the CPUs of one rank
(``cpus // local_world_size``), since during training every local rank runs its own workers.

A DataModule whose loaders are not an index-sampled split view (a stream, say) plugs in by
defining ``tuning_loader(split, num_workers, prefetch_factor) -> DataLoader``: a fresh loader
of that split for one process, with those settings.

The tuner measures the loader alone, without the model competing for the CPUs; the
:class:`~datamodules.tools.monitor.DataWaitMonitor` then says whether the chosen settings keep up
in the real run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch

from datamodules.core.checks import check_choice, check_fraction, check_int, int_mistake
from datamodules.core.hardware import Measurement, TuneResult, available_cpus
from datamodules.core.loaders import ResumableDataLoader
from datamodules.core.store_exchange import broadcast_object

__all__ = [
    "DEFAULT_PREFETCH",
    "DEFAULT_TOLERANCE",
    "STAGE_SPLITS",
    "batch_length",
    "candidate_workers",
    "candidates",
    "choose",
    "index_loader",
    "measure_candidate",
    "time_batches",
    "tune_datamodule",
]

STAGE_SPLITS = {"fit": "train", "validate": "val", "test": "test", "predict": "test"}
DEFAULT_PREFETCH = (2, 4)
DEFAULT_TOLERANCE = 0.05


def choose(
    table: Sequence[Measurement], tolerance: float = DEFAULT_TOLERANCE
) -> tuple[Measurement, str]:
    """Picks a candidate from a measurement table (pure and deterministic).

    Among the candidates whose median throughput is at least ``(1 - tolerance)`` times the
    fastest median, the one with the fewest workers wins; ties are broken by the smaller
    prefetch factor, then the higher median, then the order in the table.

    Args:
        table: One measurement per candidate.
        tolerance: Relative slack in [0, 1) within which fewer workers win.

    Returns:
        The chosen measurement and a sentence saying why.

    Raises:
        ValueError: For an empty table, a tolerance outside [0, 1), or a table without any
            positive throughput.
    """
    if not table:
        raise ValueError("the tuner's table is empty: there is nothing to choose from.")
    check_fraction(tolerance, "tolerance", zero=True)
    best = max(table, key=lambda row: row.median)
    if not best.median > 0:
        raise ValueError("every candidate measured 0 samples/s: the loader yielded nothing.")
    floor = best.median * (1 - tolerance)
    eligible = [(i, row) for i, row in enumerate(table) if row.median >= floor]
    _, pick = min(
        eligible,
        key=lambda item: (
            item[1].num_workers,
            item[1].prefetch_factor or 0,
            -item[1].median,
            item[0],
        ),
    )
    if pick is best:
        reason = f"tuned: fastest of {len(table)} candidates ({pick.median:,.0f} samples/s)"
    else:
        reason = (
            f"tuned: {pick.median:,.0f} samples/s, within {tolerance:.0%} of the fastest "
            f"({best.label()}: {best.median:,.0f}) with fewer workers or less prefetch"
        )
    return pick, reason


def candidate_workers(cpus_per_rank: int) -> list[int]:
    """Worker counts to try: every count 0..cpus_per_rank up to 8 CPUs, then a sparser set.

    Beyond 8 CPUs per rank the counts are 0, 1, 2, 3, 4, 6, 8, 12, 16, ... (powers of two and
    the midpoints between them) and ``cpus_per_rank`` itself.
    """
    check_int(cpus_per_rank, "cpus_per_rank", 1)
    if cpus_per_rank <= 8:
        return list(range(cpus_per_rank + 1))
    counts = {0, 1, cpus_per_rank}
    power = 2
    while power < cpus_per_rank:
        counts.add(power)
        if power + power // 2 < cpus_per_rank:
            counts.add(power + power // 2)
        power *= 2
    return sorted(counts)


def candidates(
    workers: Iterable[int], prefetch_factors: Iterable[int]
) -> list[tuple[int, int | None]]:
    """All ``(num_workers, prefetch_factor)`` pairs; 0 workers has prefetch None only."""
    factors = sorted(set(prefetch_factors))
    pairs: list[tuple[int, int | None]] = []
    for count in sorted(set(workers)):
        mistake = int_mistake(count, 0)
        if mistake is not None:
            raise mistake(f"workers contains {count!r}: use ints >= 0.")
        if count == 0:
            pairs.append((0, None))
        else:
            pairs.extend((count, factor) for factor in factors)
    return pairs


def _first_tensor(batch: Any) -> torch.Tensor | None:
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, dict):
        batch = batch.values()
    elif not isinstance(batch, (list, tuple)):
        return None
    for value in batch:
        tensor = _first_tensor(value)
        if tensor is not None:
            return tensor
    return None


def batch_length(batch: Any) -> int:
    """Number of samples in a batch: the first dimension of its first tensor (depth first);
    without tensors, the length of a list or tuple; else 1."""
    tensor = _first_tensor(batch)
    if tensor is not None:
        return int(tensor.shape[0]) if tensor.dim() else 1
    return len(batch) if isinstance(batch, (list, tuple)) else 1


def time_batches(
    batches: Iterator[Any], warmup: int, count: int, timer: Callable[[], float]
) -> tuple[float, int, int]:
    """Skips ``warmup`` batches, then times up to ``count`` more.

    Returns:
        (seconds, samples, batches timed).
    """
    for _ in range(warmup):
        if next(batches, None) is None:
            return 0.0, 0, 0
    samples = timed = 0
    if count < 1:
        return 0.0, 0, 0
    start = timer()
    for batch in batches:
        samples += batch_length(batch)
        timed += 1
        if timed >= count:
            break
    return timer() - start, samples, timed


def index_loader(
    dm: Any, split: str, num_workers: int, prefetch_factor: int | None
) -> ResumableDataLoader:
    """The loader the tuner times by default: the split's view and sampler (one rank's worth
    of a single-process world), with the DataModule's ``pin_memory`` and the candidate's
    worker settings (workers are not persistent: they stop when the iterator is dropped)."""
    view = dm.view(split)
    sampler = dm.make_sampler(split, view, 0, 1)
    kwargs: dict[str, Any] = {
        "num_workers": num_workers,
        "pin_memory": dm.loader_settings(split).pin_memory,
    }
    if num_workers > 0:
        kwargs["prefetch_factor"] = prefetch_factor
    return ResumableDataLoader(
        view, sampler=sampler, reuse_batch_memory=dm.reuse_batch_memory, **kwargs
    )


def measure_candidate(
    dm: Any,
    split: str,
    num_workers: int,
    prefetch_factor: int | None,
    max_batches: int,
    timer: Callable[[], float] = time.perf_counter,
) -> tuple[float, int]:
    """Times one candidate on a loader built afresh for it.

    The loader is ``dm.tuning_loader(split, num_workers, prefetch_factor)`` when the
    DataModule defines that method (for loaders that are not index-sampled views, such as
    streams), else :func:`index_loader`. Warm-up: the first ``1 + num_workers *
    prefetch_factor`` batches (what start-up and the initial prefetch hand out) are not timed;
    with a short split, fewer batches are timed.

    Returns:
        (samples per second, batches timed).
    """
    build = getattr(dm, "tuning_loader", None)
    if callable(build):
        loader = build(split, num_workers, prefetch_factor)
    else:
        loader = index_loader(dm, split, num_workers, prefetch_factor)
    warmup = 1 + num_workers * (prefetch_factor or 0)
    count = max_batches
    try:
        available = len(loader)
    except TypeError:  # an iterable without a length: time until it ends
        pass
    else:
        warmup = min(warmup, available // 2)
        count = min(max_batches, available - warmup)
    iterator = iter(loader)
    try:
        seconds, samples, timed = time_batches(iterator, warmup, count, timer)
    finally:
        del iterator  # shuts the workers down
    if timed == 0:
        return 0.0, 0
    return samples / max(seconds, 1e-9), timed


def tune_datamodule(
    dm: Any,
    stage: str = "fit",
    max_batches: int = 20,
    *,
    workers: Iterable[int] | None = None,
    prefetch_factors: Iterable[int] | None = None,
    repeats: int = 3,
    tolerance: float = DEFAULT_TOLERANCE,
    progress: bool | None = None,
    timer: Callable[[], float] = time.perf_counter,
) -> TuneResult:
    """Measures the candidates on a DataModule's loader and chooses (see the module docstring).

    Under DDP (a Trainer with ``world_size > 1``, or an initialised process group) only global
    rank 0 measures; the result is broadcast to every rank.

    Args:
        dm: A :class:`~datamodules.core.base.BaseDataModule` (set up on demand).
        stage: ``"fit"`` times the train loader; ``"validate"``, ``"test"`` and ``"predict"``
            the val / test loader.
        max_batches: Batches timed per candidate and repeat (after warm-up).
        workers: Worker counts to try; default :func:`candidate_workers` of this rank's CPUs.
        prefetch_factors: Prefetch factors to try with workers; default ``(2, 4)``, or the
            DataModule's own ``prefetch_factor`` when it is an int.
        repeats: Measurements per candidate (interleaved rounds); the median is scored.
        tolerance: Relative slack within which fewer workers win.
        progress: Show a tqdm bar (None: only on a terminal).
        timer: The clock (seconds); tests pass a fake one.

    Returns:
        The choice and its table.

    Raises:
        ValueError: For an unknown stage, an empty split or bad counts.
    """
    check_choice(stage, "stage", tuple(STAGE_SPLITS))
    check_int(max_batches, "max_batches", 1)
    check_int(repeats, "repeats", 1)
    split = STAGE_SPLITS[stage]
    if stage == "predict" and not dm.split_size("test"):
        split = "val"
    if not dm.split_size(split):
        raise ValueError(f"{type(dm).__name__}: the {split} split is empty: nothing to tune on.")
    trainer = getattr(dm, "_trainer", lambda: None)()
    rank, world = _rank_world(trainer)
    result: TuneResult | None = None
    if rank == 0:
        if workers is None:
            local_world = max(1, int(trainer.num_devices)) if trainer is not None else 1
            workers = candidate_workers(max(1, available_cpus() // local_world))
        if prefetch_factors is None:
            fixed = getattr(dm, "prefetch_factor", None)
            prefetch_factors = (fixed,) if isinstance(fixed, int) else DEFAULT_PREFETCH
        pairs = candidates(workers, prefetch_factors)
        result = _measure_all(dm, split, pairs, max_batches, repeats, tolerance, progress, timer)
    if world > 1:
        result = _broadcast(result, trainer)
    assert result is not None
    return result


def _measure_all(
    dm: Any,
    split: str,
    pairs: list[tuple[int, int | None]],
    max_batches: int,
    repeats: int,
    tolerance: float,
    progress: bool | None,
    timer: Callable[[], float],
) -> TuneResult:
    from tqdm.auto import tqdm

    speeds: dict[tuple[int, int | None], list[float]] = {pair: [] for pair in pairs}
    timed: dict[tuple[int, int | None], int] = dict.fromkeys(pairs, 0)
    bar = tqdm(
        total=len(pairs) * repeats,
        desc=f"tuning the {split} loader",
        unit="run",
        disable=None if progress is None else not progress,
        delay=1.0,
        leave=False,
    )
    with bar:
        for _ in range(repeats):
            for workers, prefetch in pairs:
                bar.set_postfix_str(f"workers={workers} prefetch={prefetch}", refresh=False)
                speed, count = measure_candidate(dm, split, workers, prefetch, max_batches, timer)
                speeds[(workers, prefetch)].append(speed)
                timed[(workers, prefetch)] = count
                bar.update()
    table = tuple(Measurement(w, p, tuple(speeds[(w, p)]), timed[(w, p)]) for w, p in pairs)
    pick, reason = choose(table, tolerance)
    return TuneResult(pick.num_workers, pick.prefetch_factor, table, tolerance, split, reason)


def _rank_world(trainer: Any) -> tuple[int, int]:
    if trainer is not None:
        return int(trainer.global_rank), int(trainer.world_size)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _broadcast(result: TuneResult | None, trainer: Any) -> TuneResult:
    """Sends rank 0's result to every rank: through the process group's store where there is
    a group (:mod:`datamodules.core.store_exchange` says why not a collective), else the
    strategy's broadcast."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return broadcast_object(result, src=0)
    return trainer.strategy.broadcast(result, src=0)
