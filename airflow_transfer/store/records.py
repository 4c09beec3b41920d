"""What the store hands back: plain frozen records, no database session attached."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.engine import RowMapping


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
    """One transfer. ``resumed`` is True when begin_transfer picked up an unfinished one."""

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
    resumed: bool = False
    chunks: tuple[ChunkRecord, ...] = field(default=())

    @classmethod
    def from_row(cls, row: RowMapping, **extra: Any) -> TransferRecord:
        names = [n for n in cls.__dataclass_fields__ if n not in ("resumed", "chunks")]
        return cls(**{name: row[name] for name in names}, **extra)
