"""Why a destination digest failed: one exception per error code, each with what to do.

The helper and the command checksummers report failures as codes (errno names such
as ENOENT, and our own: ESHORT, ENOALGO, ENOHELPER...). `remote_error` turns a code
into the exception callers catch: errno codes are also the matching OSError subclass,
so `except FileNotFoundError` works on a destination file as on a local one.
"""

from __future__ import annotations

import errno

_TODO = {
    "ENOENT": "the file is missing at the destination; transfer it again",
    "EACCES": "the SSH user cannot read it; fix its permissions at the destination",
    "EPERM": "the SSH user cannot read it; fix its permissions at the destination",
    "EISDIR": "only regular files can be verified",
    "ENOTREG": "only regular files can be verified",
    "ESHORT": "the destination copy is shorter than expected; transfer it again",
    "ENOALGO": "choose an algorithm the destination supports or install its package there",
    "ENOCMD": "install coreutils there or let the engine read the file back over SFTP",
    "ENOHELPER": "python3 >= 3.8 is needed there for the helper; falling back to coreutils is possible",
    "EPROTO": "the helper's output was not understood; report this as a bug",
    "EBADREQ": "airflow-transfer sent a malformed request; report this as a bug",
    "EINTERNAL": "the destination helper failed; report this as a bug",
}


class RemoteChecksumError(Exception):
    """A destination digest could not be computed. `code` says why (ENOENT, EACCES, ESHORT...)."""

    code: str = "EREMOTE"
    path: str | None = None
    message: str = ""

    def __str__(self) -> str:
        return self.message


class HelperUnavailable(RemoteChecksumError):
    """The helper did not start or stopped answering."""


class RemoteFileNotFoundError(RemoteChecksumError, FileNotFoundError):
    pass


class RemotePermissionError(RemoteChecksumError, PermissionError):
    pass


class RemoteIsADirectoryError(RemoteChecksumError, IsADirectoryError):
    pass


class RemoteOSError(RemoteChecksumError, OSError):
    pass


_OS_CLASSES = {
    "ENOENT": RemoteFileNotFoundError,
    "EACCES": RemotePermissionError,
    "EPERM": RemotePermissionError,
    "EISDIR": RemoteIsADirectoryError,
}


def remote_error(code: str, detail: str, path: str | None, where: str) -> RemoteChecksumError:
    """The exception for an error code; errno codes are also the matching OSError subclass."""
    message = f"destination checksum failed: {detail} (on {where})"
    todo = _TODO.get(code, "check the destination's storage and try again")
    message += f": {todo}"
    number = getattr(errno, code, None) if code.startswith("E") else None
    exc: RemoteChecksumError
    if code == "ENOHELPER":
        exc = HelperUnavailable(message)
    elif isinstance(number, int):
        exc = _OS_CLASSES.get(code, RemoteOSError)(number, detail, path)
    else:
        exc = RemoteChecksumError(message)
    exc.code, exc.path, exc.message = code, path, message
    return exc


__all__ = [
    "HelperUnavailable",
    "RemoteChecksumError",
    "RemoteFileNotFoundError",
    "RemoteIsADirectoryError",
    "RemoteOSError",
    "RemotePermissionError",
    "remote_error",
]
