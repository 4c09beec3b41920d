"""The lease of a running transfer: its copy renews ``heartbeat_at`` while it lives.

A process that ends normally, on an error or on a signal records how the transfer ended.
One that is SIGKILLed, or whose machine is lost, cannot: its row stays ``running``. The
heartbeat tells the two apart. Readers call a running row whose heartbeat is older than
the lease ``lost`` (TransferRecord.current_state), and the next begin_transfer with its
key takes it over.

The renewal runs in its own daemon thread, so a copy stuck in one long call (a listing of
a huge tree, a slow checksum) keeps its lease: only a dead process loses it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from . import transfers
from .closing import Closing
from .schema import HEARTBEAT_INTERVAL_S

if TYPE_CHECKING:
    from .store import Store


class Heartbeat(Closing):
    """Renews the lease of ``transfer_id`` every ``interval_s`` until closed or the transfer ends."""

    def __init__(self, store: Store, transfer_id: int, interval_s: float = HEARTBEAT_INTERVAL_S) -> None:
        if not interval_s > 0:
            raise ValueError(f"heartbeat interval must be > 0 seconds (got {interval_s})")
        self.store, self.transfer_id, self.interval_s = store, transfer_id, interval_s
        self.beats = 0  # renewals written (observability, tests)
        self.last_error: BaseException | None = None  # the latest renewal that failed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"transfer-heartbeat-{transfer_id}", daemon=True)
        self._thread.start()

    def beat(self) -> bool:
        """Renew now; False once the transfer is no longer running (nothing left to keep alive)."""
        alive = self.store.write(lambda conn: transfers.beat(conn, self.transfer_id))
        self.beats += 1
        return alive

    def close(self) -> None:
        self._stop.set()
        # A renewal in flight may wait on a busy store; it is harmless once the transfer has
        # ended (it matches no running row), so the caller need not wait for it for long.
        self._thread.join(timeout=self.interval_s)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                if not self.beat():
                    return
            except Exception as exc:  # noqa: BLE001 - a missed renewal only ages the lease; the next one tries again
                self.last_error = exc
