"""Remote reads that survive the network: which failures to retry, with what backoff, counted.

fsspec's HTTP filesystem does not retry: one ``503`` or a connection cut in the middle of a
body fails the read. Every remote call of the streaming package goes through
:func:`call_with_retries` (range requests, :mod:`~datamodules.remote.ranges`, resume a body at
the byte offset already read), so that:

* **transient** failures are retried up to ``retries`` times, with exponential backoff and
  jitter: HTTP 5xx and 429, connection resets and refusals, a host name that does not resolve
  (DNS), a body cut short, S3 throttling
  (``SlowDown``, ``Throttling``, ``RequestTimeout``, ``ServiceUnavailable``...), and a request
  that produces no byte within ``timeout`` seconds;
* **permanent** failures fail at once, naming the URL and the status: 404 (not found), 403
  and 401 (no access, bad credentials), any other 4xx. fsspec reports a failed HTTP ``info``
  (HEAD, then GET) as ``FileNotFoundError`` whatever the cause: its cause decides, so that a
  server that is down is retried and named (``connection refused``), not called a 404.

:class:`RetryStats` counts the retries in shared memory, so that the counts of DataLoader
worker processes reach :meth:`~datamodules.StreamingDataModule.summary`.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from datamodules.core.checks import check_int, check_number, rejected

__all__ = [
    "CutShort",
    "RemoteError",
    "RemoteOptions",
    "RetryStats",
    "S3_NOT_FOUND",
    "S3_TRANSIENT_CODES",
    "T",
    "call_with_retries",
    "check_remote_options",
    "describe",
]

T = TypeVar("T")

#: S3 error codes that mean "slow down or try again".
S3_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "503",
        "500",
    }
)


#: S3 error codes that mean "no such object" (final, as a 404 is).
S3_NOT_FOUND = frozenset({"404", "NoSuchKey", "NoSuchBucket", "NotFound"})


class RemoteError(OSError):
    """A remote read that failed for good; the message names the URL and the status.

    Attributes:
        url: The URL.
        status: The HTTP status, or the S3 error code, when there was one.
        transient: Whether the failure was transient (then ``retries`` were exhausted).
    """

    def __init__(self, url: str, status: Any, reason: str, transient: bool = False) -> None:
        self.url, self.status, self.reason, self.transient = url, status, reason, transient
        super().__init__(f"{url}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across worker processes
        return (type(self), (self.url, self.status, self.reason, self.transient))


class CutShort(OSError):
    """A response body that ended before its announced length."""


def describe(error: BaseException) -> tuple[bool, Any, str]:
    """Classifies a failure: ``(transient, status, description)``."""
    status = getattr(error, "status", None)
    name = type(error).__name__
    if isinstance(error, RemoteError):
        return error.transient, error.status, error.reason
    cause = error.__cause__
    if isinstance(error, FileNotFoundError) and isinstance(cause, Exception):
        # fsspec's HTTP info() says FileNotFoundError for whatever made HEAD and GET fail: a
        # refused connection or a timeout is told by its cause, not taken for a 404.
        return describe(cause)
    if isinstance(error, FileNotFoundError) or status == 404:
        return False, 404, "not found (404)"
    if isinstance(error, PermissionError):
        return False, 403, f"access denied (403): {error}"
    if isinstance(status, int):  # aiohttp.ClientResponseError and the like
        message = getattr(error, "message", "") or str(error)
        transient = status >= 500 or status in (408, 429)
        return transient, status, f"HTTP {status} {message}".strip()
    code = _s3_code(error)
    if code in S3_NOT_FOUND:
        return False, 404, "not found (404)"
    if code is not None:
        transient = code in S3_TRANSIENT_CODES
        return transient, code, f"S3 error {code}: {error}"
    if isinstance(error, CutShort):
        return True, None, f"body cut short ({error})"
    if isinstance(error, (asyncio.TimeoutError, TimeoutError)):
        return True, None, "no byte within the timeout"
    os_error = getattr(error, "os_error", error)  # aiohttp's connector errors wrap the OSError
    if isinstance(os_error, socket.gaierror):
        return True, None, f"host name not resolved (DNS) ({name}: {error})"
    if isinstance(os_error, ConnectionRefusedError):
        return True, None, f"connection refused ({name}: {error})"
    if isinstance(error, (ConnectionError, EOFError)):
        return True, None, f"connection lost ({name}: {error})"
    module = type(error).__module__
    if module.startswith(("aiohttp", "botocore", "urllib3", "http.client")):
        # Payload errors (a body cut short), disconnects, connector errors.
        return True, None, f"{name}: {error}"
    if isinstance(error, OSError) and error.errno is not None:
        return True, None, f"{name}: {error}"
    return False, None, f"{name}: {error}"


def _s3_code(error: BaseException) -> str | None:
    response = getattr(error, "response", None)
    if isinstance(response, Mapping):
        code = response.get("Error", {}).get("Code")
        return None if code is None else str(code)
    return None


class RetryStats:
    """Retries counted in shared memory (``retried``, ``gave_up``), for every worker process."""

    def __init__(self) -> None:
        import torch  # here, not at import: the shard CLI reads remote files without torch

        self.counts = torch.zeros(2, dtype=torch.int64).share_memory_()

    def retried(self) -> None:
        """Counts one retry."""
        self.counts[0] += 1

    def gave_up(self) -> None:
        """Counts one read that failed after all its retries (or at once, for good)."""
        self.counts[1] += 1

    @property
    def retries(self) -> int:
        """Retries so far, over all processes."""
        return int(self.counts[0])

    @property
    def failures(self) -> int:
        """Reads that failed for good so far."""
        return int(self.counts[1])


@dataclass(frozen=True)
class RemoteOptions:
    """How remote shards are opened and read.

    Args:
        storage_options: Passed to fsspec (``fsspec.core.url_to_fs(url, **storage_options)``),
            as pandas and HF datasets do, e.g. ``{"endpoint_url": ..., "key": ..., "secret": ...}``
            for S3. ``client_kwargs={"timeout": ...}`` (HTTP) and
            ``config_kwargs={"read_timeout": ...}`` (S3) are filled in from ``timeout`` unless
            given.
        retries: Retries of a transient failure (0: none).
        timeout: Seconds a request may go without producing a byte.
        backoff: The first backoff in seconds; each retry doubles it (with jitter of up to
            half of it), up to ``max_backoff``.
        max_backoff: The longest backoff in seconds.
        stats: Where retries are counted (a fresh :class:`RetryStats` by default).
        part_size: Bytes per range request (None: a file spread over the connections, see
            :func:`~datamodules.remote.ranges.part_size`).
        connections: Range requests one process may have open at once (None: a share of
            :data:`~datamodules.remote.ranges.NODE_CONNECTIONS`, see
            :func:`~datamodules.remote.ranges.connections`).
    """

    storage_options: Mapping[str, Any] = field(default_factory=dict)
    retries: int = 5
    timeout: float = 60.0
    backoff: float = 0.5
    max_backoff: float = 10.0
    stats: RetryStats = field(default_factory=RetryStats, compare=False)
    part_size: int | None = None
    connections: int | None = None

    def fs_options(self, protocol: str) -> dict[str, Any]:
        """The fsspec options for ``protocol``, with the timeout filled in."""
        options = dict(self.storage_options)
        if protocol in ("http", "https"):
            import aiohttp

            client = dict(options.get("client_kwargs") or {})
            client.setdefault(
                "timeout",
                aiohttp.ClientTimeout(
                    total=None, sock_connect=self.timeout, sock_read=self.timeout
                ),
            )
            options["client_kwargs"] = client
        elif protocol in ("s3", "s3a"):
            config = dict(options.get("config_kwargs") or {})
            config.setdefault("connect_timeout", self.timeout)
            config.setdefault("read_timeout", self.timeout)
            options["config_kwargs"] = config
        return options

    def pause(self, attempt: int) -> float:
        """The backoff before retry number ``attempt`` (1-based), with jitter."""
        base = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
        return base * (1 + 0.5 * random.random())


def check_remote_options(storage_options: Any, retries: Any, timeout: Any) -> RemoteOptions:
    """Checks ``storage_options``, ``retries`` and ``timeout``; returns the read options.

    Raises:
        TypeError: ``storage_options`` is not a dict, ``retries`` not an int, or ``timeout``
            not a number.
        ValueError: ``retries`` is < 0, or ``timeout`` <= 0.
    """
    if storage_options is not None and not isinstance(storage_options, Mapping):
        accepted = "a dict of fsspec options (e.g. {'endpoint_url': ...}) or None"
        raise rejected("storage_options", storage_options, accepted, TypeError)
    check_int(retries, "retries", 0)
    check_number(timeout, "timeout", above=0, what="a number of seconds")
    return RemoteOptions(dict(storage_options or {}), int(retries), float(timeout))


def call_with_retries(
    url: str, options: RemoteOptions, call: Callable[[], T], reset: Callable[[], None] | None = None
) -> T:
    """Runs ``call()``; retries transient failures as ``options`` says; else raises.

    Args:
        url: Named in the error.
        options: Retries, backoff, and where to count.
        call: The remote call.
        reset: Run before each retry (e.g. to reopen a stream).

    Raises:
        RemoteError: A permanent failure (at once), or a transient one after every retry.
    """
    attempt = 0
    while True:
        try:
            return call()
        except RemoteError:
            raise
        except Exception as error:
            transient, status, reason = describe(error)
            if not transient or attempt >= options.retries:
                options.stats.gave_up()
                if transient:
                    reason = f"{reason}; gave up after {attempt} retries"
                raise RemoteError(url, status, reason, transient) from error
            attempt += 1
            options.stats.retried()
            time.sleep(options.pause(attempt))
            if reset is not None:
                reset()
