"""The store exchange on a real 2-process gloo group (forked from this process, TCP store on
127.0.0.1): every rank gets every value in rank order, the source's value, large payloads
whole, and each round's keys are gone once every rank has read them."""

from __future__ import annotations

import multiprocessing
import os
import socket
import sys
from datetime import timedelta
from typing import Any

import pytest

from datamodules.core import fork_guard
from datamodules.core.store_exchange import broadcast_object, gather_objects

WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, results: Any) -> None:
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _get_default_store

    try:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
            timeout=timedelta(seconds=60),
        )  # fmt: skip
        big = bytes([rank]) * (1 << 20)  # 1 MiB
        first = gather_objects({"rank": rank, "big": big})
        chosen = broadcast_object(f"from {rank}", src=1)
        second = gather_objects(rank * 10)
        dist.barrier()
        store = _get_default_store()
        left = [store.check([f"datamodules/exchange/{n}/{r}"]) for n in (1, 3) for r in (0, 1)]
        left.append(store.check(["datamodules/exchange/2/1"]))
        whole = [item["big"] == bytes([item["rank"]]) * (1 << 20) for item in first]
        results.put((rank, [item["rank"] for item in first], whole, chosen, second, left))
        dist.destroy_process_group()
    except BaseException as error:  # reported to the test, not lost in the child
        results.put((rank, repr(error)))
        raise


def test_gather_and_broadcast_between_two_ranks():
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    port = _free_port()
    ranks = [context.Process(target=_rank, args=(r, port, results)) for r in range(WORLD)]
    for process in ranks:
        process.start()
    got = sorted(results.get(timeout=120) for _ in range(WORLD))
    for process in ranks:
        process.join(60)
    assert [process.exitcode for process in ranks] == [0, 0], got
    for rank, order, whole, chosen, second, left in got:
        assert order == [0, 1]
        assert whole == [True, True]
        assert chosen == "from 1"
        assert second == [0, 10]
        assert left == [False] * 5, f"rank {rank}: a round's keys were left in the store"


def test_no_group_is_refused():
    with pytest.raises((KeyError, RuntimeError, ValueError)):
        gather_objects(1)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the guard is for CPython before 3.12")
def test_fork_guard_is_installed_with_the_loaders():
    import datamodules.core.loaders  # noqa: F401  (installs it)

    assert fork_guard._installed
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
