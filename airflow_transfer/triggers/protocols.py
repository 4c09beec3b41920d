"""ProtocolAvailableTrigger: waits in the triggerer until a host offers the protocols asked for."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from airflow.triggers.base import TriggerEvent

from .. import airflow_conf
from ..protocols.hostlib import describe_round, probe_round
from .base import PlainTrigger


class ProtocolAvailableTrigger(PlainTrigger):
    """Probes `host` every `poll_interval` seconds (TCP connect + the protocol's handshake) and
    fires when any (mode="any") or all (mode="all") of `protocols` answer.

    Serializes plain values only (host, protocol names, ports, mode, interval). Each probe
    round also refreshes the host-protocol library in the store (the store URL is read in
    the triggerer from [airflow_transfer] store_url, never serialized). Event payload:
    ``{"status": "available", "host", "available": [...], "results": [...], "rounds"}``.
    """

    serialized = ("host", "protocols", "ports", "mode", "poll_interval")

    def __init__(
        self,
        *,
        host: str,
        protocols: list[str],
        ports: dict[str, int] | None = None,
        mode: str = "any",
        poll_interval: float = 30.0,
    ) -> None:
        super().__init__()
        self.host, self.protocols = host, list(protocols)
        self.ports = {str(k): int(v) for k, v in (ports or {}).items()}
        self.mode, self.poll_interval = mode, float(poll_interval)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        rounds = 0
        while True:
            rounds += 1
            done, results = await asyncio.to_thread(
                lambda: probe_round(self.host, self.protocols, self.ports, self.mode, airflow_conf.store_url())
            )
            if done:
                yield TriggerEvent(
                    {
                        "status": "available",
                        "host": self.host,
                        "rounds": rounds,
                        "available": [r["protocol"] for r in results if r["available"]],
                        "results": results,
                    }
                )
                return
            self.log.info("%s: %s", self.host, describe_round(results))
            await asyncio.sleep(self.poll_interval)
