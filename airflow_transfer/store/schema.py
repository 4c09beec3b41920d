"""The store's tables as they are at the latest migration (queries use these).

Every table is prefixed ``at_`` so the store can share a PostgreSQL database
(or schema) with other applications without name clashes.

The migrations in ``migrations/`` build these tables with their own frozen
definitions; tests/test_store_migrations.py checks that the migrated database
and this module agree, so a change here without a migration fails CI.
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

from .coltypes import UTCDateTime

# Transfer states. A transfer is "finished" only when it succeeded: a failed
# one is resumed by the next begin_transfer with the same key (an Airflow
# retry after the engine recorded the failure).
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
TRANSFER_STATES = (RUNNING, SUCCEEDED, FAILED)
RESUMABLE_STATES = (RUNNING, FAILED)

# Per-file journal states.
PENDING = "pending"  # listed, nothing committed yet
PARTIAL = "partial"  # some byte ranges committed
DONE = "done"  # complete at the destination under its final name
FILE_FAILED = "failed"  # last attempt failed; ranges already committed are kept
FILE_STATES = (PENDING, PARTIAL, DONE, FILE_FAILED)

metadata = MetaData()

schema_version = Table(
    "at_schema_version",
    metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("name", String(200), nullable=False),
    Column("applied_at", UTCDateTime, nullable=False),
)

transfers = Table(
    "at_transfers",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", String(512), nullable=False),
    Column("src_url", Text, nullable=False),  # password masked
    Column("dst_url", Text, nullable=False),  # password masked
    Column("state", String(16), nullable=False),
    Column("algorithm", String(64), nullable=True),
    Column("attempts", Integer, nullable=False),  # begin_transfer calls that ran it
    Column("started_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("ended_at", UTCDateTime, nullable=True),
    Column("summary", JSON, nullable=True),
    Index("ix_at_transfers_key_state", "key", "state"),
    Index("ix_at_transfers_state_started", "state", "started_at"),
    Index("ix_at_transfers_started", "started_at"),
)

chunks = Table(
    "at_chunks",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("transfer_id", Integer, ForeignKey("at_transfers.id", ondelete="CASCADE"), nullable=False),
    Column("chunk_id", String(128), nullable=False),  # the engine's id; a re-run chunk gets another row
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

files = Table(
    "at_files",
    metadata,
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
    Column("ranges", Text, nullable=False),  # coalesced [[start, end), ...] as JSON
    Column("bytes_done", BigInteger, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("last_error", Text, nullable=True),
    Column("checksum", String(200), nullable=True),  # "algo:hexdigest"
    Column("updated_at", UTCDateTime, nullable=False),
    Index("ix_at_files_transfer_state", "transfer_id", "state"),
)
