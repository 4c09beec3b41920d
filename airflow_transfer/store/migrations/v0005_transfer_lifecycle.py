"""Version 5: how a transfer ended, and whether the process running it is still alive.

Frozen: the columns as version 5 added them. ``error`` holds why a transfer failed or was
interrupted (kind, what, where, what to do); ``heartbeat_at`` is refreshed by the running
copy, so a row still ``running`` long after its last heartbeat belonged to a process that
died without a word. Rows from before this version get their last update as heartbeat.
"""

from __future__ import annotations

from sqlalchemy import JSON, Column
from sqlalchemy.engine import Connection

from ..coltypes import UTCDateTime
from .ddl import add_column

VERSION = 5
NAME = "transfer error and heartbeat"


def upgrade(conn: Connection) -> None:
    add_column(conn, "at_transfers", Column("heartbeat_at", UTCDateTime, nullable=True))
    add_column(conn, "at_transfers", Column("error", JSON, nullable=True))
    conn.exec_driver_sql("UPDATE at_transfers SET heartbeat_at = updated_at")
