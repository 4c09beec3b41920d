"""Which verification failures a reconnect may cure, and reconnecting with backoff.

A verifier's connection dies with the server or the link; the files it was checking may
well be intact, so the connection is reopened and the digests asked again. An error the
server or the helper answered with is the file's own: asking again would get it again.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable

from ..integrity.remote import RemoteChecksumError

RECONNECT_ATTEMPTS = 30

_CHANNEL_ERRNO = {
    errno.ECONNRESET,
    errno.ECONNABORTED,
    errno.EPIPE,
    errno.ENOTCONN,
    errno.ETIMEDOUT,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.ENETDOWN,
}


class ReadBackError(OSError):
    """The server refused to read a file back while the connection stayed up: a file error."""


def is_channel_error(exc: BaseException) -> bool:
    """True for a dead connection or helper (reconnecting may help), False for a problem with one
    file: an error the server or the helper answered with (reconnecting would get it again)."""
    if isinstance(exc, ReadBackError):
        return False
    if isinstance(exc, RemoteChecksumError):
        # Raised, not answered: the helper stopped or its output made no sense.
        return exc.code in ("ENOHELPER", "EPROTO", "EREMOTE")
    if isinstance(exc, (ConnectionError, EOFError, TimeoutError, socket.timeout)):
        return True
    if isinstance(exc, OSError):
        return exc.errno is None or exc.errno in _CHANNEL_ERRNO
    return True  # paramiko's SSHException and the like: the channel is gone


def reconnect(
    reopen: Callable[[], None], time_left: Callable[[], float], sleep_or_stop: Callable[[float], bool]
) -> bool:
    """Calls `reopen` until it succeeds, waiting 0.5 s, 1 s, 2 s... (at most 10 s) before each try.

    False when the attempts or the time run out, or `sleep_or_stop` says the verifier stopped
    meanwhile (then nobody waits for a verdict)."""
    for attempt in range(RECONNECT_ATTEMPTS):
        wait = min(10.0, 0.5 * 2**attempt, time_left())
        if wait <= 0 or sleep_or_stop(wait):
            return False
        try:
            reopen()
            return True
        except Exception:  # noqa: BLE001 - still down: try again
            continue
    return False
