"""keep_mmap_threshold: after it, a large buffer freed no longer moves later ones of its size
onto the heap (where glibc keeps what they free)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from datamodules.core.heap import keep_mmap_threshold

#: In a fresh interpreter: free an 8 MiB buffer, then hold a 4 MiB one; print how much the
#: heap (the brk area) grew for it, in MiB.
PROGRAM = """
import ctypes
import sys
from datamodules.core.heap import keep_mmap_threshold
if sys.argv[1] == "kept":
    assert keep_mmap_threshold() and keep_mmap_threshold()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]

def heap():
    with open("/proc/self/smaps") as f:
        lines = f.read().splitlines()
    for k, line in enumerate(lines):
        if line.endswith("[heap]"):
            return int(lines[k + 1].split()[1]) // 1024
    return 0

libc.free(libc.malloc(8 << 20))
before = heap()
held = libc.malloc(4 << 20)
print(heap() - before)
"""


def _growth(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_freed_large_buffer_no_longer_moves_later_ones_onto_the_heap() -> None:
    if not keep_mmap_threshold():
        pytest.skip("not glibc")
    assert _growth("default") >= 4  # glibc raised its threshold: 4 MiB from the heap
    assert _growth("kept") == 0  # mapped on its own, unmapped when freed
