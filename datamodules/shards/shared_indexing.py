"""Indexing once per job rather than once per node, and reading a dataset index once per node.

Under DDP (a ``torch.distributed`` process group initialised, as it is when a Trainer calls
``setup``; torch is never imported here for that):

* :func:`index_shards_shared`: rank ``r`` of ``W`` indexes shards ``r, r + W, ...`` (through
  its index cache), the results are all-gathered (through the process group's store:
  :mod:`datamodules.core.store_exchange`, which says why) and every rank keeps
  them all in its own cache (:func:`~datamodules.shards.index.remember`). Each rank pays about
  ``1/W`` of the scan, and the job the whole scan once, however many nodes there are.
* :func:`read_index_file`: a remote dataset index is fetched by one rank per node (the lowest
  rank of those sharing a host name and a cache folder) into that folder, and the node's
  other ranks read the copy. A later fetch is conditional (``If-None-Match`` /
  ``If-Modified-Since``): an unchanged index costs one answer with no body.

:func:`expand_indexes` turns the dataset indexes among file specs into their shards' paths, for
readers that need only the listing (the token store reads every file anyway).

Every collective step carries each rank's error, so a failure on one rank raises on all of
them instead of leaving the others waiting. Without a process group (or with one rank) both
are the plain local operation.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from datamodules.core.skipped import Skipped
from datamodules.core.store_exchange import gather_objects
from datamodules.remote.files import default_options, is_remote, local_path, remote_fs
from datamodules.remote.listing import cache_root
from datamodules.remote.retrying import RemoteOptions, call_with_retries
from datamodules.shards.index import index_shards, remember
from datamodules.shards.shard_index import ShardIndex

__all__ = [
    "expand_indexes",
    "gather",
    "index_shards_shared",
    "process_group",
    "read_index_file",
]

T = TypeVar("T")


def process_group() -> tuple[int, int] | None:
    """``(rank, world size)`` of the initialised default process group with two ranks or
    more; None otherwise (also when torch was never imported: then there is no group)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    world = dist.get_world_size()
    return (dist.get_rank(), world) if world > 1 else None


def _portable(error: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


def gather(work: Callable[[], T]) -> list[T]:
    """Runs ``work()`` on every rank and all-gathers the results (rank order); if it raised
    on any rank, every rank raises (this rank's own error first, else the first one)."""
    try:
        payload: tuple[bool, Any] = (True, work())
    except Exception as error:  # carried to the other ranks, raised on all
        payload = (False, _portable(error))
        own: BaseException | None = error
    else:
        own = None
    gathered = gather_objects(payload)
    if own is not None:
        raise own
    for ok, value in gathered:
        if not ok:
            raise value
    return [value for _, value in gathered]


def index_shards_shared(
    paths: Sequence[str],
    fmt: str | None = None,
    on_error: str = "raise",
    cache_dir: str | os.PathLike | bool | None = None,
    counter: Skipped | None = None,
    options: RemoteOptions | None = None,
    collective: bool = True,
) -> list[ShardIndex]:
    """:func:`~datamodules.shards.index.index_shards`, split over the ranks of a process group
    (rank ``r`` scans shards ``r, r + W, ...``) and all-gathered; every rank gets every index
    and keeps the others' in its cache. ``collective=False`` (or no group): all locally.

    Every rank must call it with the same ``paths`` (it is collective).
    """
    group = process_group() if collective else None
    if group is None:
        return index_shards(paths, fmt, on_error, cache_dir, counter, options=options)
    rank, world = group
    shares = gather(lambda: index_shards(paths[rank::world], fmt, on_error, cache_dir,
                                         options=options))  # fmt: skip
    result: list[Any] = [None] * len(paths)
    for r, share in enumerate(shares):
        result[r::world] = share
        if r != rank:
            for index in share:
                remember(index, cache_dir)
    if counter is not None:
        for index in result:
            counter.add(index.path, index.skipped, index.problems, index.error)
    return result


# ---------------------------------------------------------------------------- index files


def index_file_cache(cache_dir: str | os.PathLike | bool | None) -> str | None:
    """Where a node keeps its copies of remote dataset indexes: ``dataset_index`` beside the
    shard index cache (None: ``index_cache=False``, no copies)."""
    if cache_dir is False:
        return None
    if cache_dir in (None, True):
        return cache_root("dataset_index")
    return os.path.join(os.fspath(cache_dir), "dataset_index")


def read_index_file(
    spec: str,
    options: RemoteOptions | None = None,
    cache_dir: str | os.PathLike | bool | None = None,
    collective: bool = True,
) -> bytes:
    """The bytes of a dataset index file; a remote one fetched once per node under a process
    group (see the module docstring).

    Raises:
        ValueError: It cannot be read (naming it and why).
    """
    if not is_remote(spec):
        try:
            with open(local_path(spec), "rb") as f:
                return f.read()
        except OSError as err:
            raise ValueError(f"dataset index {spec}: cannot read it ({err}).") from err
    root = index_file_cache(cache_dir)
    group = process_group() if collective else None
    if group is None or root is None:
        return _fetch(spec, options, root)
    rank, world = group
    node = (socket.gethostname(), os.path.realpath(root))
    nodes = gather(lambda: node)
    leader = min(r for r in range(world) if nodes[r] == node)
    copy = _copy_path(root, spec)
    data = [b""]

    def fetch() -> None:
        if rank == leader:
            data[0] = _fetch(spec, options, root)

    gather(fetch)  # the node's copy is there (or every rank raises the fetch's error)
    if rank == leader:
        return data[0]
    try:
        with open(copy, "rb") as f:
            return f.read()
    except OSError:  # the leader could not keep a copy (a read-only cache): fetch it here
        return _fetch(spec, options, None)


def _copy_path(root: str, url: str) -> str:
    return os.path.join(root, hashlib.sha1(url.encode()).hexdigest()[:24] + ".json")


def _fetch(url: str, options: RemoteOptions | None, root: str | None) -> bytes:
    """Fetches a remote index, conditionally when a copy is kept in ``root``; returns it."""
    options = options or default_options()
    copy = None if root is None else _copy_path(root, url)
    meta: dict[str, Any] = {}
    if copy is not None and os.path.exists(copy):
        try:
            with open(copy + ".meta") as f:
                meta = json.load(f)
        except (OSError, ValueError):
            meta = {}
    try:
        fs, fpath = remote_fs(url, options)
        protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
        if {"http", "https"} & set(protocols):
            fresh, validators = call_with_retries(url, options, lambda: _http_get(fs, fpath, meta))
        else:
            fresh, validators = call_with_retries(url, options, lambda: _other_get(fs, fpath, meta))
    except Exception as err:
        raise ValueError(f"dataset index {url}: cannot read it ({err}).") from err
    if fresh is None:  # not modified: the node's copy holds
        with open(copy, "rb") as f:  # type: ignore[arg-type]
            return f.read()
    if copy is not None:
        try:
            os.makedirs(root, exist_ok=True)  # type: ignore[arg-type]
            tmp = f"{copy}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(fresh)
            with open(tmp + ".meta", "w") as f:
                json.dump({"url": url, **validators}, f)
            os.replace(tmp, copy)
            os.replace(tmp + ".meta", copy + ".meta")
        except OSError:  # a read-only cache is only slower
            pass
    return fresh


def _http_get(fs: Any, fpath: str, meta: dict[str, Any]) -> tuple[bytes | None, dict[str, str]]:
    """One GET, conditional on the copy's ETag / Last-Modified: ``(None, ...)`` for 304."""
    headers = {}
    if meta.get("ETag"):
        headers["If-None-Match"] = meta["ETag"]
    if meta.get("Last-Modified"):
        headers["If-Modified-Since"] = meta["Last-Modified"]
    stream = fs.open(fpath, "rb", block_size=0, size=-1, headers=headers)
    try:
        response = getattr(stream, "r", None)
        answer = getattr(response, "headers", None) or {}
        validators = {k: answer[k] for k in ("ETag", "Last-Modified") if answer.get(k)}
        if headers and getattr(response, "status", 200) == 304:
            return None, validators
        return stream.read(), validators
    finally:
        stream.close()


def _other_get(fs: Any, fpath: str, meta: dict[str, Any]) -> tuple[bytes | None, dict[str, str]]:
    info = fs.info(fpath)
    validators = {k: str(info[k]) for k in ("ETag", "LastModified", "Last-Modified") if info.get(k)}
    if validators and all(meta.get(k) == v for k, v in validators.items()):
        return None, validators
    return fs.cat_file(fpath), validators


def expand_indexes(
    items: Sequence[str],
    options: RemoteOptions | None = None,
    cache_dir: str | os.PathLike | bool | None = None,
) -> list[str]:
    """``items`` with every dataset index among them (``*.json``, globs too) replaced by the
    shards it lists, in order; other items unchanged (for a reader that wants the shards'
    paths only, such as the token store, which reads every shard anyway).

    Raises:
        ValueError: An index cannot be read or is not one.
    """
    from datamodules.remote.listing import expand_files
    from datamodules.shards.dataset_index import is_index_spec, parse_dataset_index

    out: list[str] = []
    for item in items:
        if not is_index_spec(item):
            out.append(item)
            continue
        for spec in expand_files(item, options, what="dataset index"):
            data = read_index_file(spec, options, cache_dir, collective=False)
            out.extend(parse_dataset_index(data, spec, on_error="skip").paths)
    return out
