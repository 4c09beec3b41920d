"""Which failures are worth retrying, and when (FTS3-style error classes).

Retry: the network or the server's process went away or timed out; the same
request can succeed later. Do not retry: the request itself is wrong for this
host (no such file, permission denied, no space, quota, read-only, bad name) -
repeating it only delays the clear error the user needs.
"""

from __future__ import annotations

import errno
import random
import socket
import time
from dataclasses import dataclass

from ..errors import AuthError, ConnectError, HostKeyError, TransferError, UnsafePathError, UsageError

_PERMANENT_ERRNO = {
    errno.ENOENT,
    errno.EACCES,
    errno.EPERM,
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.ENAMETOOLONG,
    errno.EISDIR,
    errno.ENOTDIR,
    errno.EINVAL,
    errno.EFBIG,
}
_TRANSIENT_ERRNO = {
    errno.ECONNRESET,
    errno.ECONNREFUSED,
    errno.ECONNABORTED,
    errno.EPIPE,
    errno.ETIMEDOUT,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.ENETDOWN,
    errno.ENOTCONN,
    errno.EAGAIN,
    errno.EIO,
}


def classify(exc: BaseException) -> tuple[bool, str]:
    """(retryable, reason)."""
    if isinstance(exc, (HostKeyError, AuthError, UsageError, UnsafePathError)):
        return False, "configuration or security error: retrying cannot fix it"
    if isinstance(exc, ConnectError):
        return True, "host unreachable: may come back"
    if isinstance(exc, TransferError):
        return False, "reported error"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return True, "timed out"
    if isinstance(exc, socket.gaierror):
        return exc.errno in (socket.EAI_AGAIN,), "name resolution"
    if isinstance(exc, (ConnectionError, EOFError)):
        return True, "connection lost"
    if isinstance(exc, OSError) and exc.errno in _PERMANENT_ERRNO:
        return False, "permanent filesystem error"
    if isinstance(exc, OSError) and (exc.errno in _TRANSIENT_ERRNO or exc.errno is None):
        return True, "transient I/O or network error"
    if exc.__class__.__module__.startswith("paramiko"):
        return True, "SSH layer error"
    return False, "unknown error class: not retried"


@dataclass
class RetryPolicy:
    """Per-file attempts with exponential backoff and jitter, bounded by a deadline."""

    max_attempts: int = 5
    backoff_base: float = 1.0
    backoff_max: float = 10.0
    deadline_s: float | None = 3600.0  # from the start of the copy
    started: float = 0.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise UsageError(f"retries must allow at least one attempt (got {self.max_attempts})")
        if self.deadline_s is not None and not self.deadline_s > 0:  # NaN too
            raise UsageError(f"deadline must be positive seconds (got {self.deadline_s})")
        self.started = self.started or time.monotonic()

    def delay(self, attempt: int) -> float:
        base = min(self.backoff_max, self.backoff_base * (2 ** max(attempt - 1, 0)))
        return base * random.uniform(0.8, 1.2)

    @property
    def deadline(self) -> float | None:
        return None if self.deadline_s is None else self.started + self.deadline_s

    def time_left(self) -> float:
        d = self.deadline
        return float("inf") if d is None else d - time.monotonic()
