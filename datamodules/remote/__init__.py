"""Remote reads shared by the data kinds that read files (streams and text): below both.

* :mod:`~datamodules.remote.files`: opening local and remote (fsspec) files, sequentially or
  at random, resumed at the byte offset when the network fails; gzip and zstd.
* :mod:`~datamodules.remote.retrying`: which failures to retry, with what backoff, counted;
  :class:`~datamodules.remote.retrying.RemoteError` names the URL and the status.
* :mod:`~datamodules.remote.listing`: globs, directories and lists of files; file versions
  (size, mtime, ETag); where caches live.
* :mod:`~datamodules.remote.cache`: a local cache of remote files, shared by processes.
* :mod:`~datamodules.remote.credentials`: credentials in ``storage_options`` stay out of
  checkpoints.
"""

__all__: list[str] = []
