"""Version 4: protocol switches of each transfer, and the host-protocol library (paper 003).

Frozen: this is the shape version 3 created. Later changes are new migrations.
"""

from __future__ import annotations

from sqlalchemy import Column, ForeignKey, Index, Integer, MetaData, String, Table, Text
from sqlalchemy.engine import Connection

from ..coltypes import UTCDateTime

VERSION = 4
NAME = "protocol switches, host-protocol library"

_meta = MetaData()

Table(
    "at_transfers",
    _meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
)

Table(
    "at_protocol_switches",
    _meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("transfer_id", Integer, ForeignKey("at_transfers.id", ondelete="CASCADE"), nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("from_protocol", String(32), nullable=False),
    Column("to_protocol", String(32), nullable=False),
    Column("reason", Text, nullable=False),
    Index("ix_at_protocol_switches_transfer", "transfer_id", "id"),
)

Table(
    "at_host_protocols",
    _meta,
    Column("host", String(255), primary_key=True),
    Column("protocol", String(32), primary_key=True),
    Column("port", Integer, primary_key=True, autoincrement=False),
    Column("available", Integer, nullable=False),
    Column("checked_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("detail", Text, nullable=True),
    Column("seconds", Integer, nullable=True),
)


def upgrade(conn: Connection) -> None:
    _meta.tables["at_protocol_switches"].create(conn)
    _meta.tables["at_host_protocols"].create(conn)
