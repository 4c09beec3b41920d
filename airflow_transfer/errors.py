"""Errors users see: one line each saying what failed, where, and what to do.

Backend errors are also mapped to Python's own exceptions (FileNotFoundError,
PermissionError, ...) so callers can catch them the usual way; TransferError
wraps those with the what/where/what-to-do a person needs.
"""

from __future__ import annotations

import errno


class TransferError(Exception):
    """A failure a user can act on. str() is the one-line message.

    ``kind`` names the class of failure in words that outlive the Python class (the store
    keeps it with a failed transfer; the Airflow layer words its hint by it)."""

    exit_code = 1
    kind = "error"

    def __init__(self, what: str, where: str = "", todo: str = "") -> None:
        self.what, self.where, self.todo = what, where, todo
        super().__init__(self.message)

    @property
    def message(self) -> str:
        text = self.what
        if self.where:
            text += f" ({self.where})"
        if self.todo:
            text += f": {self.todo}"
        return text


class UsageError(TransferError):
    """Bad arguments: nothing was attempted."""

    exit_code = 2
    kind = "usage"


class ConnectError(TransferError):
    """The host could not be reached (DNS, refused, timeout)."""

    kind = "connect"


class AuthError(TransferError):
    """The host refused our credentials."""

    kind = "auth"


class HostKeyError(TransferError):
    """The host key is unknown or changed: refusing to talk to it."""

    kind = "host_key"


class UnsafePathError(TransferError):
    """A name would land outside the destination root."""

    kind = "unsafe_path"


# Failures that the same request can never get past, however often it is repeated: the
# engine does not retry them per file (engine/retry.py), and Airflow must not retry the task.
PERMANENT_ERRORS: tuple[type[TransferError], ...] = (HostKeyError, AuthError, UsageError, UnsafePathError)


class Interrupted(KeyboardInterrupt):
    """A copy stopped from outside: SIGTERM (a service stop, Airflow killing or timing out the
    task). A KeyboardInterrupt, so whatever already handles Ctrl-C handles it the same way."""


def describe_oserror(exc: OSError) -> str:
    """Short human text for an OSError without the Python repr noise."""
    if isinstance(exc, FileNotFoundError):
        return "no such file or directory"
    if isinstance(exc, PermissionError):
        return "permission denied"
    if exc.errno == errno.ENOSPC:
        return "no space left"
    if exc.errno == errno.EDQUOT:
        return "disk quota exceeded"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    if exc.strerror:
        return exc.strerror.lower()
    return str(exc) or exc.__class__.__name__
