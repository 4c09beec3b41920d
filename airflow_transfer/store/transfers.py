"""SQL for transfers and chunks. Each function runs inside the caller's transaction."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, insert, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from .coltypes import utcnow
from .config import mask_url
from .connection import lock_key
from .errors import StoreError
from .records import ChunkRecord, TransferRecord
from .schema import (
    END_STATES,
    KEY_LENGTH,
    LEASE_S,
    LOST,
    RESUMABLE_STATES,
    RUNNING,
    SHOWN_STATES,
    chunks,
    transfers,
)

_CHUNK_INT_FIELDS = ("pp", "p", "cc", "files", "bytes")


def begin(
    conn: Connection, key: str, src_url: str, dst_url: str, algorithm: str | None, resume: bool
) -> TransferRecord:
    if not key or len(key) > KEY_LENGTH:
        raise StoreError(f"transfer key must be 1 to {KEY_LENGTH} characters (got {len(key)})")
    src, dst = mask_url(src_url), mask_url(dst_url)
    # Two workers starting the same key at once must end up on one transfer.
    lock_key(conn, f"transfer:{key}")
    now = utcnow()
    existing = None
    if resume:
        existing = (
            conn.execute(
                select(transfers)
                .where(transfers.c.key == key, transfers.c.state.in_(RESUMABLE_STATES))
                .order_by(transfers.c.id.desc())
                .limit(1)
            )
            .mappings()
            .first()
        )
    if existing is not None:
        if (existing["src_url"], existing["dst_url"]) != (src, dst):
            raise StoreError(
                f"transfer key {key!r} belongs to unfinished transfer {existing['id']} "
                f"from {existing['src_url']} to {existing['dst_url']}, not {src} to {dst}",
                todo="use another key, or finish that transfer first",
            )
        was = TransferRecord.from_row(existing).current_state(now)
        conn.execute(
            update(transfers)
            .where(transfers.c.id == existing["id"])
            .values(
                state=RUNNING,
                attempts=transfers.c.attempts + 1,
                updated_at=now,
                heartbeat_at=now,
                ended_at=None,
                error=None,
                algorithm=algorithm if algorithm is not None else existing["algorithm"],
            )
        )
        return get(conn, existing["id"], resumed=True, resumed_from=was)
    new_id = conn.execute(
        insert(transfers)
        .values(
            key=key,
            src_url=src,
            dst_url=dst,
            state=RUNNING,
            algorithm=algorithm,
            attempts=1,
            started_at=now,
            updated_at=now,
            heartbeat_at=now,
        )
        .returning(transfers.c.id)
    ).scalar_one()
    return get(conn, new_id)


def finish(
    conn: Connection,
    transfer_id: int,
    state: str,
    summary: Mapping[str, Any] | None,
    error: Mapping[str, Any] | None = None,
) -> TransferRecord:
    if state not in END_STATES:
        raise ValueError(f"a transfer finishes as one of {END_STATES}, not {state!r}")
    now = utcnow()
    changed = conn.execute(
        update(transfers)
        .where(transfers.c.id == transfer_id)
        .values(
            state=state,
            ended_at=now,
            updated_at=now,
            summary=dict(summary) if summary is not None else None,
            error=dict(error) if error is not None else None,
        )
    ).rowcount
    if not changed:
        raise StoreError(f"no transfer with id {transfer_id} in the store")
    return get(conn, transfer_id)


def beat(conn: Connection, transfer_id: int) -> bool:
    """Renew the lease of a running transfer; False when it is no longer running (it ended)."""
    # updated_at stays: it dates the last change of the row, not the last sign of life
    return bool(
        conn.execute(
            update(transfers)
            .where(transfers.c.id == transfer_id, transfers.c.state == RUNNING)
            .values(heartbeat_at=utcnow())
        ).rowcount
    )


def get(
    conn: Connection,
    transfer_id: int,
    *,
    resumed: bool = False,
    resumed_from: str | None = None,
    with_chunks: bool = False,
) -> TransferRecord:
    row = conn.execute(select(transfers).where(transfers.c.id == transfer_id)).mappings().first()
    if row is None:
        raise StoreError(f"no transfer with id {transfer_id} in the store")
    extra: dict[str, Any] = {"resumed": resumed, "resumed_from": resumed_from}
    if with_chunks:
        extra["chunks"] = tuple(list_chunks(conn, transfer_id))
    return TransferRecord.from_row(row, **extra)


def find(conn: Connection, transfer_id: int, with_chunks: bool) -> TransferRecord | None:
    exists = conn.execute(select(transfers.c.id).where(transfers.c.id == transfer_id)).first()
    return get(conn, transfer_id, with_chunks=with_chunks) if exists else None


def list_transfers(
    conn: Connection,
    state: str | Iterable[str] | None,
    key_prefix: str | None,
    limit: int,
    offset: int,
    now: datetime | None = None,
    lease_s: float = LEASE_S,
) -> list[TransferRecord]:
    query = select(transfers).order_by(transfers.c.started_at.desc(), transfers.c.id.desc())
    if state is not None:
        states = (state,) if isinstance(state, str) else tuple(state)
        unknown = set(states) - set(SHOWN_STATES)
        if unknown:
            raise ValueError(f"unknown transfer state(s) {sorted(unknown)}; states are {SHOWN_STATES}")
        query = query.where(_in_states(states, now or utcnow(), lease_s))
    if key_prefix:
        # autoescape: '%' and '_' in a key are literal characters, not wildcards
        query = query.where(transfers.c.key.startswith(key_prefix, autoescape=True))
    rows = conn.execute(query.limit(limit).offset(offset)).mappings().all()
    return [TransferRecord.from_row(row) for row in rows]


def _in_states(states: tuple[str, ...], now: datetime, lease_s: float) -> ColumnElement[bool]:
    """SQL for "shows as one of ``states``": running and lost split on the heartbeat's age."""
    cutoff = now - timedelta(seconds=lease_s)
    last_seen = func.coalesce(transfers.c.heartbeat_at, transfers.c.updated_at)
    stored = [s for s in states if s not in (RUNNING, LOST)]
    terms: list[ColumnElement[bool]] = [transfers.c.state.in_(stored)] if stored else []
    if RUNNING in states and LOST in states:
        terms.append(transfers.c.state == RUNNING)
    elif RUNNING in states:
        terms.append(and_(transfers.c.state == RUNNING, last_seen >= cutoff))
    elif LOST in states:
        terms.append(and_(transfers.c.state == RUNNING, last_seen < cutoff))
    return or_(*terms)


def add_chunk(
    conn: Connection,
    transfer_id: int,
    chunk: Any,
    started_at: datetime | None,
    ended_at: datetime | None,
) -> int:
    values = chunk_values(chunk)
    values.update(transfer_id=transfer_id, started_at=started_at, ended_at=ended_at)
    return conn.execute(insert(chunks).values(**values).returning(chunks.c.id)).scalar_one()


def chunk_values(chunk: Any) -> dict[str, Any]:
    """Columns of a chunk row from an engine ChunkResult or a dict shaped like its summary()."""
    values: dict[str, Any]
    if hasattr(chunk, "summary") and hasattr(chunk, "bytes_moved"):
        values = dict(chunk.summary())
        # summary() rounds; the row keeps the exact figures
        values.update(seconds=chunk.seconds, throughput_mbit=chunk.throughput_mbit, bytes_moved=chunk.bytes_moved)
    elif isinstance(chunk, Mapping):
        values = dict(chunk)
    else:
        raise TypeError(f"record_chunk takes a ChunkResult or a mapping, not {type(chunk).__name__}")
    missing = [name for name in ("id", *_CHUNK_INT_FIELDS, "seconds") if name not in values]
    if missing:
        raise ValueError(f"chunk is missing {missing}: pass ChunkResult or its summary() dict")
    seconds = float(values["seconds"])
    moved = int(values["bytes_moved"] if "bytes_moved" in values else values["bytes"])
    throughput = values.get("throughput_mbit")
    if throughput is None:
        throughput = moved * 8 / seconds / 1e6 if seconds > 0 else 0.0
    row: dict[str, Any] = {name: int(values[name]) for name in _CHUNK_INT_FIELDS}
    row.update(chunk_id=str(values["id"]), bytes_moved=moved, seconds=seconds, throughput_mbit=float(throughput))
    return row


def list_chunks(conn: Connection, transfer_id: int) -> list[ChunkRecord]:
    rows = conn.execute(select(chunks).where(chunks.c.transfer_id == transfer_id).order_by(chunks.c.id)).mappings()
    return [ChunkRecord.from_row(row) for row in rows]
