"""Exchanging small Python objects between ranks through the process group's key-value store.

The DataModules' own collective steps (indexes indexed once per job, the worker tuner's choice)
go through the default process group's store (``TCPStore`` under Lightning) instead of
``all_gather_object`` / ``broadcast_object_list``, for two reasons:

* **Fork safety.** A backend collective leaves its tensors to the backend's threads: gloo's
  work threads drop the last reference of ``all_gather_object``'s tensors after the caller
  has returned, and each such drop makes a Python thread state from a thread that does not
  hold the GIL. On CPython before 3.11.10 and 3.12.1 a DataLoader worker forked at that
  moment inherits the interpreter's thread-list lock held and hangs for ever in
  ``PyOS_AfterFork_Child`` (CPython gh-112275). Loaders are made, and their workers forked,
  right after these steps, so the window is hit: once in a few dozen 3-rank runs on 2 cores.
  A store request runs in the calling thread and leaves nothing behind.
* **Any backend.** NCCL collectives need CUDA tensors on the right device; the store needs
  neither.

Every rank must call these functions in the same order (they are collective); a call's keys are
numbered by the rank's count of calls on this store (kept in the store, so a new process group
starts again at 1), and the last rank to read a round deletes its keys.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

__all__ = ["broadcast_object", "gather_objects"]

_PREFIX = "datamodules/exchange"


def _round() -> tuple[Any, str, int, int]:
    """The default store, this call's key prefix, this rank and the world size (the group
    must be initialised)."""
    dist = sys.modules["torch.distributed"]
    from torch.distributed.distributed_c10d import _get_default_store

    store, rank = _get_default_store(), dist.get_rank()
    calls = store.add(f"{_PREFIX}/calls/{rank}", 1)
    return store, f"{_PREFIX}/{calls}", rank, dist.get_world_size()


def _done(store: Any, base: str, keys: list[str], world: int) -> None:
    """Counts this rank's reads of round ``base``; the last reader deletes its keys."""
    if store.add(f"{base}/read", 1) == world:
        for key in [*keys, f"{base}/read"]:
            store.delete_key(key)


def gather_objects(value: Any) -> list[Any]:
    """Every rank's ``value`` (picklable), in rank order, on every rank.

    Raises:
        KeyError: No process group is initialised (``torch.distributed`` not imported).
    """
    store, base, rank, world = _round()
    store.set(f"{base}/{rank}", pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    keys = [f"{base}/{r}" for r in range(world)]
    values = [pickle.loads(store.get(key)) for key in keys]
    _done(store, base, keys, world)
    return values


def broadcast_object(value: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``value`` (picklable) on every rank (the others' ``value`` is ignored)."""
    store, base, rank, world = _round()
    key = f"{base}/{src}"
    if rank == src:
        store.set(key, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    result = pickle.loads(store.get(key))
    _done(store, base, [key], world)
    return result
