"""Queries for protocol switches and the host-protocol library (migration 4)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Connection

from . import schema as s


def _parse_at(value: str | datetime | None) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if value:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return datetime.now(UTC)


def add_switch(conn: Connection, transfer_id: int, rec: dict) -> None:
    conn.execute(
        insert(s.protocol_switches).values(
            transfer_id=transfer_id,
            at=_parse_at(rec.get("at")),
            from_protocol=str(rec["from"])[:32],
            to_protocol=str(rec["to"])[:32],
            reason=str(rec.get("reason", "")),
        )
    )


def list_switches(conn: Connection, transfer_id: int) -> list[dict[str, Any]]:
    t = s.protocol_switches
    rows = conn.execute(select(t).where(t.c.transfer_id == transfer_id).order_by(t.c.id)).mappings()
    return [
        {"at": r["at"].isoformat(), "from": r["from_protocol"], "to": r["to_protocol"], "reason": r["reason"]}
        for r in rows
    ]


def put_host_protocol(
    conn: Connection,
    host: str,
    protocol: str,
    port: int,
    available: bool,
    detail: str | None,
    ttl_s: float,
    millis: int | None,
) -> None:
    t = s.host_protocols
    now = datetime.now(UTC)
    conn.execute(delete(t).where(t.c.host == host, t.c.protocol == protocol, t.c.port == port))
    conn.execute(
        insert(t).values(
            host=host,
            protocol=protocol,
            port=port,
            available=1 if available else 0,
            checked_at=now,
            expires_at=now + timedelta(seconds=ttl_s),
            detail=(detail or "")[:2000],
            seconds=millis,
        )
    )


def host_protocols(conn: Connection, host: str | None = None, fresh_only: bool = False) -> list[dict[str, Any]]:
    t = s.host_protocols
    q = select(t)
    if host is not None:
        q = q.where(t.c.host == host)
    if fresh_only:
        q = q.where(t.c.expires_at > datetime.now(UTC))
    rows = conn.execute(q.order_by(t.c.host, t.c.protocol, t.c.port)).mappings()
    return [
        {
            "host": r["host"],
            "protocol": r["protocol"],
            "port": r["port"],
            "available": bool(r["available"]),
            "checked_at": r["checked_at"].isoformat(),
            "expires_at": r["expires_at"].isoformat(),
            "detail": r["detail"],
            "probe_ms": r["seconds"],
        }
        for r in rows
    ]
