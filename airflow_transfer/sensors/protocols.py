"""ProtocolAvailableSensor: wait until a host offers a protocol (or all of several)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseHook, PokeReturnValue

from .. import airflow_conf
from ..protocols.hostlib import DEFAULT_PORTS, describe_round, probe_round
from ..provider_info import CONN_TYPE
from ..triggers.protocols import ProtocolAvailableTrigger
from .deferrable import DeferrableSensor

MODES = ("any", "all")


class ProtocolAvailableSensor(DeferrableSensor):
    """Succeed once `host` (or the host of `conn_id`) offers `protocols`: any of them, or all.

    A probe is a TCP connect plus the protocol's handshake (SSH key exchange, FTP greeting,
    HTTP status line), never a login. Every probe refreshes the host-protocol library in
    the store, so the next ``any://`` transfer to that host reuses what the sensor saw.

    :param conn_id: Airflow connection whose host (and port, for its own protocol) to probe. Templated.
    :param host: host to probe when no connection is given. Templated.
    :param protocols: protocol names in preference order: sftp, ftp, https, http.
    :param ports: non-default ports, e.g. ``{"sftp": 2222}``.
    :param mode: ``"any"`` (default) or ``"all"``.
    :param deferrable: wait in the triggerer (ProtocolAvailableTrigger) without a worker slot.
        Default: Airflow's ``[operators] default_deferrable`` (False unless set).

    Returns (XCom) ``{"host", "available": [protocols up], "results": [per-protocol probes]}``.
    """

    template_fields: Sequence[str] = ("conn_id", "host")
    ui_color = "#eef3e0"
    fired_status = "available"
    waits_for = "protocol"

    def __init__(
        self,
        *,
        protocols: Sequence[str],
        conn_id: str | None = None,
        host: str | None = None,
        ports: dict[str, int] | None = None,
        mode: str = "any",
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(deferrable=deferrable, **kwargs)
        if bool(conn_id) == bool(host):
            raise ValueError("give exactly one of conn_id or host")
        if not isinstance(mode, str) or mode not in MODES:
            raise ValueError(f"mode must be 'any' or 'all' (got {mode!r})")
        if (
            isinstance(protocols, str)
            or not isinstance(protocols, (list, tuple))
            or not protocols
            or any(not isinstance(p, str) or p not in DEFAULT_PORTS for p in protocols)
        ):
            raise ValueError(f"protocols must be a list of some of {', '.join(DEFAULT_PORTS)} (got {protocols!r})")
        if ports is not None and (
            not isinstance(ports, dict)
            or any(
                k not in DEFAULT_PORTS or isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= 65535
                for k, v in ports.items()
            )
        ):
            raise ValueError(f"ports must map protocol names to port numbers 1-65535 (got {ports!r})")
        for name, value in (("conn_id", conn_id), ("host", host)):
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} must be a string (got {value!r})")
        self.protocols, self.conn_id, self.host = list(protocols), conn_id, host
        self.ports, self.mode = dict(ports or {}), mode

    def _target(self) -> tuple[str, dict[str, int]]:
        if not self.conn_id:
            if self.host is None:  # __init__ takes exactly one of the two
                raise ValueError("give exactly one of conn_id or host")
            return self.host, self.ports
        conn = BaseHook.get_connection(self.conn_id)
        if not conn.host:
            raise ValueError(f"connection {self.conn_id!r} has no host")
        ports = dict(self.ports)
        kinds = {"ssh": "sftp", "sftp": "sftp", CONN_TYPE: "sftp", "ftp": "ftp", "http": "http", "https": "https"}
        kind = kinds.get(conn.conn_type or "")
        if kind and conn.port and kind not in ports:
            ports[kind] = int(conn.port)
        return conn.host, ports

    def trigger(self) -> ProtocolAvailableTrigger:
        host, ports = self._target()
        return ProtocolAvailableTrigger(
            host=host, protocols=self.protocols, ports=ports, mode=self.mode, poll_interval=float(self.poke_interval)
        )

    def result(self, event: dict) -> dict:
        self.log.info(
            "%s offers %s (after %d probe rounds)", event["host"], ", ".join(event["available"]), event.get("rounds", 0)
        )
        return {k: event[k] for k in ("host", "available", "results")}

    def poke(self, context: Any):
        host, ports = self._target()
        done, results = probe_round(host, self.protocols, ports, self.mode, airflow_conf.store_url())
        self.log.info("%s: %s", host, describe_round(results))
        value = {"host": host, "available": [r["protocol"] for r in results if r["available"]], "results": results}
        return PokeReturnValue(is_done=done, xcom_value=value if done else None)
