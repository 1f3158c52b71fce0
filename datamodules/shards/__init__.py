"""The shard layer: reading and writing files of records, below the data kinds that read them.

Streams (:mod:`datamodules.streaming`) and text (:mod:`datamodules.text`) read every file
through this layer, so both know the same formats, the same extensions and the same rules for
blank lines, byte-order marks and bad records. It imports ``core``, :mod:`datamodules.remote`
(opening files local or remote) and :mod:`datamodules.imaging` (image bytes, for the writer),
and no data kind, so ``python -m datamodules shards`` and ``index`` never import Lightning.

* :mod:`~datamodules.shards.formats`: the one extension table, format detection, compression,
  finding shards (globs, directories, lists).
* :mod:`~datamodules.shards.records`: :func:`read_records` and :func:`read_blocks`, the records
  ``[start, stop)`` of any shard.
* one module per format: :mod:`~datamodules.shards.jsonl`, :mod:`~datamodules.shards.delimited`
  (CSV / TSV), :mod:`~datamodules.shards.txt`, :mod:`~datamodules.shards.parquet`,
  :mod:`~datamodules.shards.arrow` (Arrow IPC, Hugging Face ``save_to_disk`` folders),
  :mod:`~datamodules.shards.tar` (on :mod:`~datamodules.shards.tar_members`, the archive, and
  :mod:`~datamodules.shards.tar_fields`, what members decode to).
* :mod:`~datamodules.shards.lines`: the byte lines of a (compressed, remote) shard.
* :mod:`~datamodules.shards.errors`: :class:`RecordError`, :class:`ShardError`, ``on_error``.
* :mod:`~datamodules.shards.shard_index` and :mod:`~datamodules.shards.index`: how many records
  a shard holds and where to seek, cached on disk.
* :mod:`~datamodules.shards.dataset_index`: dataset indexes (``*.index.json``, webdataset's
  wids format) that setup reads instead of the shards;
  :mod:`~datamodules.shards.shared_indexing`: indexing once per job under DDP, an index file
  fetched once per node; :mod:`~datamodules.shards.index_cli`: ``python -m datamodules index``.
* :mod:`~datamodules.shards.writer`: :func:`write_shards`;
  :mod:`~datamodules.shards.folder_shards`: ``python -m datamodules shards``.
"""

from __future__ import annotations

from datamodules.core.lazy import lazy_exports

__all__ = [
    "FORMATS",
    "RecordError",
    "ShardError",
    "detect_format",
    "expand_files",
    "read_blocks",
    "read_records",
    "write_shards",
]

#: Where each public name is defined; loaded on first use (PEP 562), so that the command line
#: imports only what a command needs.
_HOMES = {
    "FORMATS": "datamodules.shards.formats",
    "RecordError": "datamodules.shards.errors",
    "ShardError": "datamodules.shards.errors",
    "detect_format": "datamodules.shards.formats",
    "expand_files": "datamodules.shards.formats",
    "read_blocks": "datamodules.shards.records",
    "read_records": "datamodules.shards.records",
    "write_shards": "datamodules.shards.writer",
}


__getattr__, __dir__ = lazy_exports(__name__, globals(), _HOMES)
