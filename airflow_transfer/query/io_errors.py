"""The errors a query's reads and writes raise, worded once for the source and the destination side."""

from __future__ import annotations

from ..errors import TransferError, describe_oserror

NOTHING_WRITTEN = "re-run the query; nothing was written under the final name"


def os_failure(what: str, exc: OSError, where: str, todo: str = "") -> TransferError:
    """`what` failed (e.g. "cannot open source file") because of `exc`, in the words of describe_oserror."""
    return TransferError(f"{what}: {describe_oserror(exc)}", where, todo)


def connection_lost(doing: str, exc: BaseException, where: str) -> TransferError:
    """The SFTP connection died while `doing` (reading, writing): the query must start again."""
    return TransferError(f"connection lost while {doing}: {exc}", where, NOTHING_WRITTEN)


__all__ = ["NOTHING_WRITTEN", "connection_lost", "os_failure"]
