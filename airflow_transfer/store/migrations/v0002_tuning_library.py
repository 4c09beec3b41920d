"""Version 2: the tuning library (paper 003): raw profiles, tuned parameters, light-profiler back-off.

Frozen: this is the shape version 2 created. Later changes are new migrations.
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Column, Double, Index, Integer, MetaData, String, Table
from sqlalchemy.engine import Connection

from ..coltypes import UTCDateTime

VERSION = 2
NAME = "tuning library: profiles, tuned parameters, light-profiler schedule"

_meta = MetaData()

Table(
    "at_profiles",
    _meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("host", String(255), nullable=False),
    Column("peer", String(255), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("measured_at", UTCDateTime, nullable=False),
    Column("ok", Integer, nullable=False),
    Column("payload", JSON, nullable=False),
    Index("ix_at_profiles_lookup", "host", "peer", "kind", "measured_at"),
)

Table(
    "at_tuned_params",
    _meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("source_host", String(255), nullable=False),
    Column("dest_host", String(255), nullable=False),
    Column("protocol", String(32), nullable=False),
    Column("measured_at", UTCDateTime, nullable=False),
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
    Column("params", JSON, nullable=False),
    Column("profile_ids", JSON, nullable=False),
    Index("ix_at_tuned_params_link", "source_host", "dest_host", "protocol", "computed_at"),
)

Table(
    "at_light_schedule",
    _meta,
    Column("source_host", String(255), primary_key=True),
    Column("dest_host", String(255), primary_key=True),
    Column("interval_s", Double, nullable=False),
    Column("base_interval_s", Double, nullable=False),
    Column("max_interval_s", Double, nullable=False),
    Column("stable_runs", Integer, nullable=False),
    Column("last_run_at", UTCDateTime, nullable=True),
    Column("next_due_at", UTCDateTime, nullable=False),
    Column("last_rtt_ms", Double, nullable=True),
    Column("last_bandwidth_mbit", Double, nullable=True),
    Column("last_change", String(300), nullable=True),
    Column("updated_at", UTCDateTime, nullable=False),
)


def upgrade(conn: Connection) -> None:
    _meta.create_all(conn)
