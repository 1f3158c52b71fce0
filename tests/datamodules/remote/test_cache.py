"""The private prefetch folder of a ShardCache without a cache directory: removed, with its
lock and version files, when the process that made it ends (a forked child included)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

from datamodules.remote.cache import ShardCache
from datamodules.remote.retrying import RemoteOptions


def make_folder(queue) -> None:
    cache = ShardCache(None, None, RemoteOptions())
    entry = cache.entry("http://127.0.0.1:1/train-000001.tar")
    Path(entry + ".json").write_text("{}")  # what a download leaves beside its copy
    queue.put(cache.directory)


def test_a_process_removes_its_prefetch_folder_when_it_ends() -> None:
    code = (
        "from pathlib import Path\n"
        "from datamodules.remote.cache import ShardCache\n"
        "from datamodules.remote.retrying import RemoteOptions\n"
        "cache = ShardCache(None, None, RemoteOptions())\n"
        "entry = cache.entry('http://127.0.0.1:1/train-000001.tar')\n"
        "Path(entry + '.json').write_text('{}')\n"
        "print(cache.directory)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    folder = done.stdout.strip()
    assert os.path.basename(folder).startswith("datamodules-prefetch-")
    assert not os.path.exists(folder)


def test_a_forked_child_removes_its_own_folder_and_not_its_parents() -> None:
    parent = ShardCache(None, None, RemoteOptions())
    parent.entry("http://127.0.0.1:1/a.tar")  # the parent's folder, made before the fork
    queue = multiprocessing.get_context("fork").Queue()
    child = multiprocessing.get_context("fork").Process(target=make_folder, args=(queue,))
    child.start()
    folder = queue.get(timeout=30)
    child.join(timeout=30)
    assert child.exitcode == 0
    assert folder != parent.directory and not os.path.exists(folder)
    assert os.path.isdir(parent.directory)  # still this process's, removed when it ends
