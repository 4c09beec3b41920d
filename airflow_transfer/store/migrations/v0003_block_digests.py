"""Version 3: per-block source digests in the file journal (block-level verification).

Frozen: the column as version 3 added it. A resumed transfer in block mode
verifies the blocks the journal lists at the destination against these
digests instead of sending them again (docs/integrity.md).
"""

from __future__ import annotations

from sqlalchemy import Column, Text
from sqlalchemy.engine import Connection

from .ddl import add_column

VERSION = 3
NAME = "block digests in the file journal"


def upgrade(conn: Connection) -> None:
    # JSON [[offset, length, "algorithm:hexdigest"], ...]; NULL when none were recorded.
    add_column(conn, "at_files", Column("blocks", Text, nullable=True))
