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

# Transfer states. A transfer is "finished" only when it succeeded: a failed or
# interrupted one is resumed by the next begin_transfer with the same key (an
# Airflow retry after the engine recorded the failure, a re-run after Ctrl-C).
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"  # an error ended it; the error column says what, where and what to do
INTERRUPTED = "interrupted"  # a signal or the task's kill stopped it; nothing was wrong with the copy
TRANSFER_STATES = (RUNNING, SUCCEEDED, FAILED, INTERRUPTED)
END_STATES = (SUCCEEDED, FAILED, INTERRUPTED)
RESUMABLE_STATES = (RUNNING, FAILED, INTERRUPTED)
# Never written: what readers call a running transfer whose heartbeat is older than the
# lease, because the process running it died without a chance to say so (SIGKILL, a lost
# machine). The next begin_transfer with its key takes it over.
LOST = "lost"
SHOWN_STATES = (*TRANSFER_STATES, LOST)

# The running copy refreshes heartbeat_at this often (store/lease.py); a row not refreshed
# for LEASE_S is lost. Four intervals: a store busy for a minute does not make a live copy lost.
HEARTBEAT_INTERVAL_S = 15.0
LEASE_S = 4 * HEARTBEAT_INTERVAL_S

# Per-file journal states.
PENDING = "pending"  # listed, nothing committed yet
PARTIAL = "partial"  # some byte ranges committed
DONE = "done"  # complete at the destination under its final name
FILE_FAILED = "failed"  # last attempt failed; ranges already committed are kept
FILE_STATES = (PENDING, PARTIAL, DONE, FILE_FAILED)

# Lengths the queries check before writing, so a too-long value fails with its own message.
KEY_LENGTH = 512  # a transfer key
HOST_KEY_LENGTH = 255  # a tuning-library host key: "localhost", "host" or "host:port"

metadata = MetaData()


def _id() -> Column[int]:
    """The row id of a table whose rows have no natural key (a transfer, a chunk run, a profile, ...)."""
    return Column("id", Integer, primary_key=True, autoincrement=True)


def _host(name: str, *, primary_key: bool = False) -> Column[str]:
    if primary_key:
        return Column(name, String(HOST_KEY_LENGTH), primary_key=True)
    return Column(name, String(HOST_KEY_LENGTH), nullable=False)


def _direction(*, primary_key: bool = False) -> tuple[Column[str], Column[str]]:
    """The ordered host pair a tuned row or a light-profiler schedule belongs to."""
    return _host("source_host", primary_key=primary_key), _host("dest_host", primary_key=primary_key)


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
    _id(),
    Column("key", String(KEY_LENGTH), nullable=False),
    Column("src_url", Text, nullable=False),  # password masked
    Column("dst_url", Text, nullable=False),  # password masked
    Column("state", String(16), nullable=False),
    Column("algorithm", String(64), nullable=True),
    Column("attempts", Integer, nullable=False),  # begin_transfer calls that ran it
    Column("started_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("ended_at", UTCDateTime, nullable=True),
    Column("summary", JSON, nullable=True),
    Column("heartbeat_at", UTCDateTime, nullable=True),  # last sign of life of a running copy (v5)
    Column("error", JSON, nullable=True),  # why it failed or stopped: kind, what, where, todo, message (v5)
    Index("ix_at_transfers_key_state", "key", "state"),
    Index("ix_at_transfers_state_started", "state", "started_at"),
    Index("ix_at_transfers_started", "started_at"),
)

chunks = Table(
    "at_chunks",
    metadata,
    _id(),
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
    Column("blocks", Text, nullable=True),  # source block digests [[offset, length, "algo:hex"], ...] (v3)
    Column("updated_at", UTCDateTime, nullable=False),
    # Files not done yet, by state: migration 6 made it partial (WHERE state <> 'done'), so a
    # finished file leaves the index instead of moving within it. The condition is not declared
    # here (sqlite_where/postgresql_where): declaring it loads every dialect it names, and the
    # PostgreSQL one cost a copy to a SQLite store 0.02 s at start. The migrations build indexes.
    Index("ix_at_files_transfer_state", "transfer_id", "state"),
)

# --- tuning library (paper 003 section 4.3; migration 2) ----------------------
# Hosts are library keys: "localhost" for the machine that runs the transfer
# client, "host" or "host:port" (port other than 22) for SSH hosts.
# A profile of one host has peer ""; a network profile is measured from host to peer.
PROFILE_KINDS = ("disk", "memory", "kernel", "network", "network-light")

profiles = Table(
    "at_profiles",
    metadata,
    _id(),
    _host("host"),
    _host("peer"),
    Column("kind", String(32), nullable=False),
    Column("measured_at", UTCDateTime, nullable=False),
    Column("ok", Integer, nullable=False),  # 1/0: the profiler's own "ok"
    Column("payload", JSON, nullable=False),  # the profiler's JSON object, as printed
    Index("ix_at_profiles_lookup", "host", "peer", "kind", "measured_at"),
)

# One row per tuner run and direction/protocol: the newest row of a
# (source_host, dest_host, protocol) is what transfers use; older ones are history.
tuned_params = Table(
    "at_tuned_params",
    metadata,
    _id(),
    *_direction(),
    Column("protocol", String(32), nullable=False),
    Column("measured_at", UTCDateTime, nullable=False),  # when the network profile behind it ran
    Column("computed_at", UTCDateTime, nullable=False),
    Column("streams", Integer, nullable=False),
    Column("tcp_buffer", BigInteger, nullable=False),
    Column("block_size", BigInteger, nullable=False),
    Column("bdp_bytes", BigInteger, nullable=False),
    Column("rtt_ms", Double, nullable=True),
    Column("bandwidth_mbit", Double, nullable=True),
    Column("pp_level", Integer, nullable=False),
    Column("p", Integer, nullable=False),
    Column("cc", Integer, nullable=False),
    Column("params", JSON, nullable=False),  # TunedParameters.to_dict(), reasons included
    Column("profile_ids", JSON, nullable=False),  # at_profiles ids it was computed from
    Index("ix_at_tuned_params_link", "source_host", "dest_host", "protocol", "computed_at"),
)

# Back-off state of the light network profiler, per ordered host pair.
light_schedule = Table(
    "at_light_schedule",
    metadata,
    *_direction(primary_key=True),
    Column("interval_s", Double, nullable=False),
    Column("base_interval_s", Double, nullable=False),
    Column("max_interval_s", Double, nullable=False),
    Column("stable_runs", Integer, nullable=False),  # consecutive results within the tolerance
    Column("last_run_at", UTCDateTime, nullable=True),
    Column("next_due_at", UTCDateTime, nullable=False),
    Column("last_rtt_ms", Double, nullable=True),
    Column("last_bandwidth_mbit", Double, nullable=True),
    Column("last_change", String(300), nullable=True),  # why the interval last changed
    Column("updated_at", UTCDateTime, nullable=False),
)

# Every protocol switch of a transfer (fall-back and switch-back), in order.
protocol_switches = Table(
    "at_protocol_switches",
    metadata,
    _id(),
    Column("transfer_id", Integer, ForeignKey("at_transfers.id", ondelete="CASCADE"), nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("from_protocol", String(32), nullable=False),
    Column("to_protocol", String(32), nullable=False),
    Column("reason", Text, nullable=False),
    Index("ix_at_protocol_switches_transfer", "transfer_id", "id"),
)

# Host-protocol library: which protocols a host offers, by probe, valid until expires_at.
host_protocols = Table(
    "at_host_protocols",
    metadata,
    _host("host", primary_key=True),
    Column("protocol", String(32), primary_key=True),
    Column("port", Integer, primary_key=True, autoincrement=False),
    Column("available", Integer, nullable=False),  # 1 = the probe's handshake succeeded
    Column("checked_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("detail", Text, nullable=True),  # banner or error
    Column("seconds", Integer, nullable=True),  # probe duration in milliseconds
)
