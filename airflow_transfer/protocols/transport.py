"""The paramiko Transport every SSH connection of ours runs on.

paramiko's own, with two fixes: its reader thread never waits for a key re-exchange it
is running itself (rekey.py), and a server message that needs no answer is acknowledged
at once (below).

Right after the login, OpenSSH's server sends an unsolicited global request
(`hostkeys-00@openssh.com`, the host keys it has; no reply wanted). The client has nothing
to send back, so its kernel delays the TCP acknowledgement (at least 40 ms on Linux) in the
hope of carrying it on the next message. The server meanwhile answers the client's first
CHANNEL_OPEN, but its socket does not set TCP_NODELAY for such sessions: Nagle's algorithm
holds that small answer until the unacknowledged request is acknowledged. So the first
channel of every connection (the SFTP session, an upload's sink) waited for the delayed
acknowledgement and its trip back: 43-49 ms on loopback (packet capture: the confirmation
leaves the server 0.02 ms after the client's late ACK), and on a 50 ms path 0.14 s instead
of 0.05. After such a request the reader asks the kernel for an immediate acknowledgement
(TCP_QUICKACK flushes a pending delayed ACK on Linux).
"""

from __future__ import annotations

import socket
from typing import Any

from .rekey import Transport as _Base

QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux only; elsewhere nothing is done


def ack_now(sock: Any) -> bool:
    """Send the pending acknowledgement of what `sock` received, now; False where that cannot
    be asked (not a TCP socket: a proxy command's pipe, a jump host's channel; not Linux)."""
    if QUICKACK is None or not isinstance(sock, socket.socket) or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    try:
        sock.setsockopt(socket.IPPROTO_TCP, QUICKACK, 1)
    except OSError:
        return False
    return True


# _Base is a variable (rekey.py picks one of two classes), which mypy does not take as a base.
class Transport(_Base):  # type: ignore[valid-type,misc]
    """paramiko.Transport as used by every connection (see the module's docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.acks_pushed = 0  # server requests acknowledged at once (observability, tests)

    def _parse_global_request(self, m: Any) -> None:
        super()._parse_global_request(m)
        if ack_now(self.sock):
            self.acks_pushed += 1
