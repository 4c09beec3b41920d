"""What went wrong with one file, in words, and whether it is sent again.

Every protocol reports a failed attempt through the same decision
(`judge`), so a change to what is retried is made once.
"""

from __future__ import annotations

from ..errors import TransferError, describe_oserror
from .retry import classify
from .sftp_jobs import FileTask, SourceChanged

MAX_REPAIRS = 2  # re-sends of a file whose digests did not match before it fails


class ChecksumMismatch(Exception):
    """Source and destination digests differ: the file is sent again."""


class SizeMismatch(OSError):
    """The protocol reported success but the destination has another size: the silent failure
    Kola, Kosar and Livny's run-time adaptation checks for (paper 003 in docs/papers.md)."""


def error_text(exc: BaseException, host: str, path: str) -> str:
    """One line for a user: what failed, on which host and path."""
    if isinstance(exc, TransferError):
        return exc.message
    if isinstance(exc, (SizeMismatch, SourceChanged)) and exc.strerror:
        return f"{exc.strerror} ({host}:{exc.filename or path})"
    if isinstance(exc, OSError) and not isinstance(exc, ConnectionError):
        return f"{describe_oserror(exc)} on {host}:{path}"
    if isinstance(exc, ConnectionError) and str(exc):
        return f"{exc} ({host}:{path})"  # already a sentence; the class name adds nothing
    return f"{exc.__class__.__name__}: {exc} ({host}:{path})"


def judge(exc: BaseException, task: FileTask) -> tuple[str, bool]:
    """(kind, send again?) for a failed attempt at `task`. The kind is what a fall-back
    controller counts: one "size" failure abandons a protocol at once."""
    if isinstance(exc, SizeMismatch):
        return "size", True  # the server lost data it acknowledged: send it again, whole
    if isinstance(exc, ChecksumMismatch):
        return "checksum", task.mismatches <= MAX_REPAIRS
    if isinstance(exc, SourceChanged):
        return "source", True  # the caller relists it first; a vanished source is not retried
    return "error", classify(exc)[0]
