"""The identity of a store's inputs: the files' versions, or a hash of every value in memory.

An in-memory frame cannot be known unchanged without reading it, so its columns are hashed
whole: in :data:`CHUNK` pieces on the process's cores (XXH3 releases the GIL), then the pieces'
digests in order, so that the digest does not depend on the number of threads.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from datamodules.time_series.inputs import LongColumns

__all__ = ["CHUNK", "data_digest"]

#: Bytes hashed as one piece: pieces are hashed on several threads (XXH3 releases the GIL),
#: then their digests in order, so the digest does not depend on the number of threads.
CHUNK = 4 << 20


def _hash_piece(piece: memoryview) -> bytes:
    """One piece's digest: XXH3 (128 bits) where installed (the ``time-series`` extra), else
    BLAKE2b; over 96 MB of columns here, about 9 ms on one thread against about 150 ms."""
    try:
        import xxhash
    except ImportError:
        return hashlib.blake2b(piece, digest_size=16).digest()
    return xxhash.xxh3_128_digest(piece)


class _Digest:
    """Gathers the inputs' bytes (small ones copied, arrays by reference), then hashes them in
    :data:`CHUNK` pieces on up to as many threads as this process may use."""

    def __init__(self) -> None:
        self.pieces: list[memoryview] = []
        self.small = bytearray()

    def update(self, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        if len(view) < CHUNK:
            self.small += view
            return
        if self.small:
            self.pieces.append(memoryview(bytes(self.small)))
            self.small = bytearray()
        self.pieces.extend(view[i : i + CHUNK] for i in range(0, len(view), CHUNK))

    def hexdigest(self) -> str:
        pieces = [*self.pieces, memoryview(bytes(self.small))]
        threads = min(len(pieces), len(os.sched_getaffinity(0)), 8)
        if threads > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(threads, thread_name_prefix="digest") as pool:
                digests = list(pool.map(_hash_piece, pieces))
        else:
            digests = [_hash_piece(piece) for piece in pieces]
        return hashlib.sha1(b"".join(digests), usedforsecurity=False).hexdigest()


def _digest_array(digest: _Digest, array: np.ndarray) -> None:
    if array.dtype == object:
        import pandas as pd

        array = pd.util.hash_array(array, categorize=False)
    digest.update(str(array.dtype).encode())
    digest.update(np.ascontiguousarray(array).view(np.uint8).reshape(-1).data)


def data_digest(columns: LongColumns) -> str:
    """A hash of the inputs: the files' versions, or every value in memory (hashed in pieces
    on several threads: see :class:`_Digest`)."""
    digest = _Digest()
    if columns.signature:
        digest.update(json.dumps(columns.signature, sort_keys=True, default=str).encode())
        return digest.hexdigest()
    if columns.codes is None:
        _digest_array(digest, columns.id_values)
    else:
        digest.update(json.dumps(columns.ids, default=str).encode())
        _digest_array(digest, columns.codes)
    if columns.time is not None:
        _digest_array(digest, columns.time)
    for name in sorted(columns.columns):
        digest.update(name.encode())
        _digest_array(digest, columns.columns[name])
        if name in columns.categories:
            digest.update(json.dumps(columns.categories[name], default=str).encode())
    return digest.hexdigest()
