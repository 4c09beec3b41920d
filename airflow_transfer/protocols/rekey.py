"""A paramiko Transport whose reader thread never waits for a key re-exchange it is running.

paramiko starts a key re-exchange itself every 2**29 bytes or packets in either
direction, and from its KEXINIT until the server's NEWKEYS it holds back every
message that is not part of the exchange: a thread that sends one waits until
the exchange is over. Most such messages come from our threads (channel data,
window adjusts), and waiting is right for them. A few come from paramiko's own
reader thread, as answers to what the server sent: the CLOSE that answers the
server's CLOSE of a channel, the reply to a channel request that wants one, a
keepalive. If one of those is due while paramiko's own re-exchange runs, the
reader waits for an exchange that only the reader can finish; 30 s later it
raises, and the connection dies with every channel on it (paramiko issue #822,
open upstream). On this project's loopback tests a network profile through an
SSH tunnel met it (the sink's answer never came back), and any copy that closes
exec channels while it moves more than 512 MiB can.

Here the reader queues those answers instead and sends them, in order, as soon as
the server's NEWKEYS has arrived. Nothing else changes: our own threads still wait
for the exchange, and re-exchanges keep their paramiko schedule.
"""

from __future__ import annotations

import threading

from .paramiko_lib import paramiko

# The paramiko internals this relies on, as in the versions pyproject.toml allows (3.4 to 5.x,
# which dispatch NEWKEYS through the instance, so the override below is the one called).
# Without them the override could hold a message it never sends: paramiko's own Transport is
# used instead.
PATCHABLE = all(hasattr(paramiko.Transport, name) for name in ("_send_user_message", "_parse_newkeys", "_send_message"))


class RekeySafeTransport(paramiko.Transport):
    """paramiko.Transport with the reader's own messages deferred during a key re-exchange."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._held: list = []
        self.rekeys = 0  # re-exchanges completed after the first key exchange
        self.held_replies = 0  # reader messages that waited for one of them

    def _send_user_message(self, data) -> None:
        if threading.current_thread() is self:
            with self.clear_to_send_lock:
                if not self.clear_to_send.is_set():
                    # only this thread can finish the exchange: hold the message, never wait
                    self._held.append(data)
                    self.held_replies += 1
                    return
        super()._send_user_message(data)

    def _parse_newkeys(self, m) -> None:
        first = not self.initial_kex_done
        super()._parse_newkeys(m)
        if not first:
            self.rekeys += 1
        with self.clear_to_send_lock:
            held, self._held = self._held, []
            for data in held:
                if not self.active:
                    return
                self._send_message(data)


Transport = RekeySafeTransport if PATCHABLE else paramiko.Transport
