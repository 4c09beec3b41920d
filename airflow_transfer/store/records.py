"""What the store hands back: plain frozen records, no database session attached."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import RowMapping

from .coltypes import utcnow
from .schema import LEASE_S, LOST, RUNNING


@dataclass(frozen=True)
class ChunkRecord:
    """One run of one chunk: the knobs it ran with and what it achieved."""

    id: int
    transfer_id: int
    chunk_id: str
    pp: int
    p: int
    cc: int
    files: int
    bytes: int
    bytes_moved: int
    seconds: float
    throughput_mbit: float
    started_at: datetime | None
    ended_at: datetime | None

    @classmethod
    def from_row(cls, row: RowMapping) -> ChunkRecord:
        return cls(**{name: row[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class TransferRecord:
    """One transfer. ``resumed`` is True when begin_transfer picked up an unfinished one, and
    ``resumed_from`` then says in which state it found it (``lost`` for a dead process's).

    ``state`` is what was written; ``current_state()`` is what to show (``lost`` for a
    running transfer whose heartbeat is older than the lease).
    """

    id: int
    key: str
    src_url: str  # password masked
    dst_url: str  # password masked
    state: str
    algorithm: str | None
    attempts: int
    started_at: datetime
    updated_at: datetime
    ended_at: datetime | None
    summary: dict[str, Any] | None
    heartbeat_at: datetime | None = None
    error: dict[str, Any] | None = None  # failed / interrupted: kind, type, what, where, todo, message
    resumed: bool = False
    resumed_from: str | None = None
    chunks: tuple[ChunkRecord, ...] = field(default=())

    @classmethod
    def from_row(cls, row: RowMapping, **extra: Any) -> TransferRecord:
        names = [n for n in cls.__dataclass_fields__ if n not in _NOT_COLUMNS]
        return cls(**{name: row[name] for name in names}, **extra)

    @property
    def last_seen(self) -> datetime:
        """The last time the copy running it showed life (rows from before heartbeats: their last update)."""
        return self.heartbeat_at or self.updated_at

    def current_state(self, now: datetime | None = None, lease_s: float = LEASE_S) -> str:
        """The stored state, except ``lost`` for a running transfer not heard of for ``lease_s``."""
        if self.state == RUNNING and (now or utcnow()) - self.last_seen > timedelta(seconds=lease_s):
            return LOST
        return self.state


_NOT_COLUMNS = ("resumed", "resumed_from", "chunks")
