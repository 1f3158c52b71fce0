"""Loader settings chosen from the hardware.

One function, :func:`resolve_loader_settings`, turns the user's ``num_workers``,
``pin_memory``, ``persistent_workers`` and ``prefetch_factor`` (each a concrete value or
``"auto"``) into concrete DataLoader arguments, and records why each value was chosen.

Rules for ``"auto"`` (``cpus_per_rank = max(1, cpus // local_world_size)``, where ``cpus`` is
the number of CPUs this process may run on, from ``os.sched_getaffinity``):

* ``num_workers``
    * ``work="memory"`` (batches gathered from tensors already in memory): 0. A batch is
      one fancy-indexing call; sending it through a worker's queue costs more than making it.
    * ``work="decode"`` (CPU-bound per-sample work such as image decoding): all CPUs of this
      rank, minus one left for the training process when the rank has three or more
      (``cpus_per_rank`` if it is 2, ``cpus_per_rank - 1`` if it is 3 or more, 0 if it is 1:
      one CPU cannot run a worker and the training loop in parallel).
    * ``work="io"`` (waiting on disk or network more than on the CPU): twice the CPUs of
      this rank, at most 16, at least 2.
    * An explicit number is kept as given; one above ``cpus_per_rank`` (for memory or
      decode work) is flagged in the reason.
    * ``"tune"``: resolved like ``"auto"`` here; a DataModule replaces it with the count
      measured by :mod:`datamodules.tools.tuner` when its first loader is built.
* ``pin_memory``: True only when the accelerator is CUDA (pinned host memory makes the
  host-to-device copy asynchronous; on CPU or MPS it only costs a copy).
* ``persistent_workers``: True whenever ``num_workers > 0`` (workers and their dataset copy
  survive between epochs); False otherwise (it is invalid without workers).
* ``prefetch_factor``: None without workers (invalid there); 2 for memory/decode work;
  4 for I/O work, whose latency needs more batches in flight.
* ``multiprocessing_context``: None (the platform default: fork on Linux; spawn elsewhere,
  where persistent workers avoid paying the spawn cost each epoch).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from datamodules.core.checks import check_bool, check_choice, check_int

__all__ = [
    "AUTO",
    "FETCHED",
    "Flag",
    "GATHERED",
    "LoaderSettings",
    "MAX_IO_WORKERS",
    "Measurement",
    "NumWorkers",
    "TUNE",
    "TuneResult",
    "WORK_KINDS",
    "WorkKind",
    "available_cpus",
    "resolve_loader_settings",
    "validate_flag",
    "validate_num_workers",
    "validate_prefetch_factor",
]

WorkKind = Literal["memory", "decode", "io"]
WORK_KINDS: tuple[str, ...] = ("memory", "decode", "io")
AUTO = "auto"
#: ``num_workers="tune"``: measured by :mod:`datamodules.tools.tuner` when the first loader is
#: built; resolved like ``"auto"`` until then.
TUNE = "tune"

NumWorkers = int | str
Flag = bool | str

MAX_IO_WORKERS = 16


@dataclass(frozen=True)
class LoaderSettings:
    """Concrete DataLoader arguments and the reason for each.

    Attributes:
        num_workers: Worker processes per loader.
        pin_memory: Whether batches are copied into page-locked memory.
        persistent_workers: Whether workers survive between epochs.
        prefetch_factor: Batches loaded in advance by each worker (None without workers).
        multiprocessing_context: Start method for workers (None: the platform default).
        reasons: For each setting, a short sentence saying why it has its value.
    """

    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    multiprocessing_context: str | None = None
    reasons: Mapping[str, str] = field(default_factory=dict)

    def loader_kwargs(self) -> dict[str, Any]:
        """Returns the settings as keyword arguments for ``torch.utils.data.DataLoader``."""
        kwargs: dict[str, Any] = {
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
            "persistent_workers": self.persistent_workers,
        }
        if self.num_workers > 0:
            kwargs["prefetch_factor"] = self.prefetch_factor
            kwargs["multiprocessing_context"] = self.multiprocessing_context
        return kwargs


def available_cpus() -> int:
    """Returns the number of CPUs this process may run on (its affinity mask where known)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - macOS / Windows
        return os.cpu_count() or 1


def validate_num_workers(value: Any, name: str = "num_workers") -> None:
    """Raises if ``value`` is neither a non-negative int, ``"auto"`` nor ``"tune"``.

    Args:
        value: The value given by the user.
        name: The argument's name, used in the message.

    Raises:
        TypeError: For a value of the wrong type.
        ValueError: For a negative int or an unknown string.
    """
    check_int(value, name, 0, words=(AUTO, TUNE))


def validate_flag(value: Any, name: str) -> None:
    """Raises if ``value`` is neither a bool nor ``"auto"``.

    Args:
        value: The value given by the user.
        name: The argument's name, used in the message.

    Raises:
        TypeError: For a value of the wrong type.
        ValueError: For an unknown string.
    """
    check_bool(value, name, words=(AUTO,))


def validate_prefetch_factor(value: Any) -> None:
    """Raises if ``value`` is neither an int >= 1, None, nor ``"auto"``.

    Raises:
        TypeError: For a value of the wrong type.
        ValueError: For an int < 1 or an unknown string.
    """
    check_int(value, "prefetch_factor", 1, allow_none=True, words=(AUTO,))


#: How an in-memory DataModule makes a batch, as the ``num_workers`` reason says it.
GATHERED = "batches are gathered from tensors in memory with one indexing call"
FETCHED = "samples are fetched one by one from memory and collated"


def _auto_workers(work: str, cpus_per_rank: int, fetch: str = GATHERED) -> tuple[int, str]:
    if work == "memory":
        return 0, f"auto: {fetch}; a worker's IPC would cost more than the work it saves"
    if work == "decode":
        if cpus_per_rank <= 1:
            return 0, "auto: 1 CPU for this rank, so decoding stays in the training process"
        if cpus_per_rank == 2:
            return 2, "auto: CPU-bound decoding on both CPUs of this rank"
        return cpus_per_rank - 1, (
            f"auto: CPU-bound decoding on {cpus_per_rank} CPUs of this rank, one left for training"
        )
    n = min(MAX_IO_WORKERS, max(2, 2 * cpus_per_rank))
    return n, f"auto: I/O-bound reading, 2 per CPU of this rank ({cpus_per_rank}), at most 16"


def resolve_loader_settings(
    num_workers: NumWorkers = AUTO,
    pin_memory: Flag = AUTO,
    persistent_workers: Flag = AUTO,
    *,
    work: str = "memory",
    cpus: int | None = None,
    local_world_size: int = 1,
    accelerator: str | None = None,
    prefetch_factor: int | str | None = AUTO,
    fetch: str = GATHERED,
) -> LoaderSettings:
    """Resolves loader settings from ``"auto"`` or explicit values (rules: module docstring).

    Args:
        num_workers: An int >= 0, ``"auto"``, or ``"tune"`` (resolved like ``"auto"``: the
            measured choice is applied by the DataModule, see :mod:`datamodules.tools.tuner`).
        pin_memory: A bool or ``"auto"``.
        persistent_workers: A bool or ``"auto"``.
        work: What a batch costs: ``"memory"``, ``"decode"`` or ``"io"``.
        cpus: CPUs this process may use; defaults to :func:`available_cpus`.
        local_world_size: Processes on this machine sharing those CPUs (DDP ranks per node).
        accelerator: The Trainer's accelerator as a lower-case name (``"cuda"``, ``"cpu"``,
            ``"mps"``...), or None when unknown.
        prefetch_factor: An int >= 1, None, or ``"auto"``.
        fetch: For ``work="memory"``: how a batch is made, as the reason says it
            (:data:`GATHERED` or :data:`FETCHED`).

    Returns:
        The concrete settings, with a reason for each.

    Raises:
        TypeError: For an argument of the wrong type.
        ValueError: For an argument outside its accepted values.
    """
    validate_num_workers(num_workers)
    validate_flag(pin_memory, "pin_memory")
    validate_flag(persistent_workers, "persistent_workers")
    validate_prefetch_factor(prefetch_factor)
    check_choice(work, "work", WORK_KINDS)
    check_int(local_world_size, "local_world_size", 1)
    cpus = available_cpus() if cpus is None else check_int(cpus, "cpus", 1)
    cpus_per_rank = max(1, cpus // local_world_size)
    reasons: dict[str, str] = {}

    if num_workers in (AUTO, TUNE):
        workers, reasons["num_workers"] = _auto_workers(work, cpus_per_rank, fetch)
        if num_workers == TUNE:
            auto_reason = reasons["num_workers"]
            reasons["num_workers"] = f"tune (not measured yet, 'auto' until then): {auto_reason}"
    else:
        workers = int(num_workers)
        reasons["num_workers"] = "set by the user"
        if workers > cpus_per_rank and work != "io":
            reasons["num_workers"] += (
                f" (more than the {cpus_per_rank} CPUs of this rank: workers will compete)"
            )

    is_cuda = accelerator == "cuda"
    if pin_memory == AUTO:
        pin = is_cuda
        reasons["pin_memory"] = (
            "auto: CUDA accelerator, pinned memory makes host-to-device copies asynchronous"
            if is_cuda
            else f"auto: accelerator is {accelerator or 'unknown'}, not CUDA: pinning adds a copy"
        )
    else:
        pin = bool(pin_memory)
        reasons["pin_memory"] = "set by the user"

    if persistent_workers == AUTO:
        persistent = workers > 0
        reasons["persistent_workers"] = (
            "auto: workers are kept between epochs" if persistent else "auto: no workers to keep"
        )
    else:
        persistent = bool(persistent_workers) and workers > 0
        reasons["persistent_workers"] = "set by the user" + (
            "" if persistent == bool(persistent_workers) else " (ignored: no workers)"
        )

    if workers == 0:
        prefetch = None
        reasons["prefetch_factor"] = "no workers, so nothing to prefetch"
    elif prefetch_factor == AUTO:
        prefetch = 4 if work == "io" else 2
        reasons["prefetch_factor"] = f"auto: {prefetch} batches per worker for {work} work"
    else:
        prefetch = prefetch_factor if prefetch_factor is not None else 2
        reasons["prefetch_factor"] = "set by the user"
    reasons["multiprocessing_context"] = "platform default"

    return LoaderSettings(
        num_workers=workers,
        pin_memory=pin,
        persistent_workers=persistent,
        prefetch_factor=prefetch,
        multiprocessing_context=None,
        reasons=reasons,
    )


# ------------------------------------------------------------------ measured settings
# What the worker tuner (datamodules.tools.tuner) measured and chose; BaseDataModule applies it
# in place of the "auto" rules.


@dataclass(frozen=True)
class Measurement:
    """Throughput of one candidate setting.

    Attributes:
        num_workers: Worker processes of the candidate.
        prefetch_factor: Batches each worker loads ahead (None without workers).
        samples_per_sec: One throughput per repeat.
        batches: Batches timed in each repeat.
    """

    num_workers: int
    prefetch_factor: int | None
    samples_per_sec: tuple[float, ...]
    batches: int = 0

    @property
    def median(self) -> float:
        """Median throughput over the repeats (samples per second)."""
        return float(statistics.median(self.samples_per_sec))

    @property
    def spread(self) -> float:
        """(max - min) / median over the repeats: how noisy this candidate's timing was."""
        if len(self.samples_per_sec) < 2 or self.median <= 0:
            return 0.0
        return (max(self.samples_per_sec) - min(self.samples_per_sec)) / self.median

    def label(self) -> str:
        """``"num_workers=2, prefetch_factor=4"``."""
        return f"num_workers={self.num_workers}, prefetch_factor={self.prefetch_factor}"


@dataclass(frozen=True)
class TuneResult:
    """The tuner's choice and the table it was made from.

    Attributes:
        num_workers: The chosen worker count.
        prefetch_factor: The chosen prefetch factor (None without workers).
        table: Every candidate's measurement, in the order measured.
        tolerance: Relative slack within which fewer workers win.
        split: The split whose loader was timed.
        reason: One sentence saying why this candidate was chosen.
    """

    num_workers: int
    prefetch_factor: int | None
    table: tuple[Measurement, ...]
    tolerance: float
    split: str
    reason: str

    @property
    def samples_per_sec(self) -> float:
        """Median throughput of the chosen candidate."""
        return self.chosen.median

    @property
    def chosen(self) -> Measurement:
        """The chosen row of the table."""
        for row in self.table:
            if (row.num_workers, row.prefetch_factor) == (self.num_workers, self.prefetch_factor):
                return row
        raise LookupError("the chosen candidate is not in the table")  # pragma: no cover

    def explain(self, settings: LoaderSettings) -> LoaderSettings:
        """Returns settings resolved with this choice, with the tuner's reasons attached."""
        reasons = dict(settings.reasons)
        reasons["num_workers"] = self.reason
        if settings.num_workers > 0:
            reasons["prefetch_factor"] = "tuned together with num_workers"
        return dataclasses.replace(settings, reasons=reasons)

    def summary_lines(self) -> list[str]:
        """Lines for :meth:`BaseDataModule.summary`: the table, fastest first, and the pick."""
        best = max(row.median for row in self.table)
        repeats = max(len(row.samples_per_sec) for row in self.table)
        batches = max(row.batches for row in self.table)
        lines = [
            f"  tuner ({self.split} loader; up to {batches} batches timed, {repeats} time(s) per "
            f"candidate; median samples/s; fewer workers win within {self.tolerance:.0%}):"
        ]
        rows = sorted(self.table, key=lambda r: (-r.median, r.num_workers, r.prefetch_factor or 0))
        for row in rows:
            mark = "  <- chosen" if row is self.chosen else ""
            lines.append(
                f"    workers={row.num_workers:<3} prefetch={row.prefetch_factor!s:<5}"
                f"{row.median:>12,.0f}/s  {row.median / best:>6.1%}  "
                f"(spread {row.spread:.0%}){mark}"
            )
        return lines
