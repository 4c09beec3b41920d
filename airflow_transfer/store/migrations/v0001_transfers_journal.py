"""Version 1: transfers, their chunks, and the per-file resume journal.

Frozen: this is the shape version 1 created. Later changes are new migrations.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.engine import Connection

from ..coltypes import UTCDateTime

VERSION = 1
NAME = "transfers, chunks, per-file journal"

_meta = MetaData()

Table(
    "at_transfers",
    _meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", String(512), nullable=False),
    Column("src_url", Text, nullable=False),
    Column("dst_url", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("algorithm", String(64), nullable=True),
    Column("attempts", Integer, nullable=False),
    Column("started_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("ended_at", UTCDateTime, nullable=True),
    Column("summary", JSON, nullable=True),
    Index("ix_at_transfers_key_state", "key", "state"),
    Index("ix_at_transfers_state_started", "state", "started_at"),
    Index("ix_at_transfers_started", "started_at"),
)

Table(
    "at_chunks",
    _meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("transfer_id", Integer, ForeignKey("at_transfers.id", ondelete="CASCADE"), nullable=False),
    Column("chunk_id", String(128), nullable=False),
    Column("pp", Integer, nullable=False),
    Column("p", Integer, nullable=False),
    Column("cc", Integer, nullable=False),
    Column("files", Integer, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("bytes_moved", BigInteger, nullable=False),
    Column("seconds", Double, nullable=False),
    Column("throughput_mbit", Double, nullable=False),
    Column("started_at", UTCDateTime, nullable=True),
    Column("ended_at", UTCDateTime, nullable=True),
    Index("ix_at_chunks_transfer", "transfer_id", "id"),
)

Table(
    "at_files",
    _meta,
    Column(
        "transfer_id",
        Integer,
        ForeignKey("at_transfers.id", ondelete="CASCADE"),
        primary_key=True,
        autoincrement=False,
    ),
    Column("path", Text, primary_key=True),
    Column("size", BigInteger, nullable=False),
    Column("mtime", Double, nullable=False),
    Column("state", String(16), nullable=False),
    Column("ranges", Text, nullable=False),
    Column("bytes_done", BigInteger, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("last_error", Text, nullable=True),
    Column("checksum", String(200), nullable=True),
    Column("updated_at", UTCDateTime, nullable=False),
    Index("ix_at_files_transfer_state", "transfer_id", "state"),
)


def upgrade(conn: Connection) -> None:
    _meta.create_all(conn)
