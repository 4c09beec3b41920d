"""DatasetStableTrigger: waits in the triggerer until a tree stops changing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from airflow.triggers.base import TriggerEvent

from ..errors import TransferError
from ..hooks.endpoint import TransferEndpointHook
from .base import PlainTrigger


class DatasetStableTrigger(PlainTrigger):
    """Fires once the tree at `src` has kept the same listing for `stable_for` seconds.

    :param src: tree to watch (``sftp://host/path``, a remote path with ``conn_id``, or a local path).
    :param conn_id: Airflow ssh/sftp connection of the host, or None.
    :param stable_for: seconds the listing must stay unchanged.
    :param poll_interval: seconds between two listings.

    Serializes plain values only; the listing runs in a worker thread of the
    triggerer so the event loop never blocks on SSH. The event payload is
    ``{"status": "stable", "fingerprint", "files", "bytes", "changes", "held_for"}``
    or ``{"status": "error", "message"}``.
    """

    serialized = ("src", "conn_id", "stable_for", "poll_interval")

    def __init__(self, *, src: str, conn_id: str | None, stable_for: float, poll_interval: float) -> None:
        super().__init__()
        self.src, self.conn_id = src, conn_id
        self.stable_for, self.poll_interval = float(stable_for), float(poll_interval)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # heavy: stability lists trees with the engine, pyarrow and NumPy (~0.2 s); the triggerer imports this at start
        from ..stability import StableWatch, tree_state

        watch = StableWatch(self.stable_for)
        try:
            endpoint = await asyncio.to_thread(TransferEndpointHook(self.conn_id).endpoint, self.src)
            while True:
                state = await asyncio.to_thread(tree_state, endpoint)
                if watch.observe(state):
                    yield TriggerEvent(
                        {
                            "status": "stable",
                            **state.as_dict(),
                            "changes": watch.changes,
                            "held_for": round(watch.held_for(), 1),
                        }
                    )
                    return
                self.log.info(
                    "%s: %d files, %d bytes; unchanged for %.0f of %.0f s (%d changes seen)",
                    endpoint.display,
                    state.files,
                    state.bytes,
                    watch.held_for(),
                    self.stable_for,
                    watch.changes,
                )
                await asyncio.sleep(self.poll_interval)
        except TransferError as exc:
            yield TriggerEvent({"status": "error", "message": exc.message})
