"""DDL helpers that migration steps share (the runner in __init__ imports the steps, so
the helpers live here, below both, and a step never imports its runner)."""

from __future__ import annotations

from sqlalchemy import Column
from sqlalchemy.engine import Connection
from sqlalchemy.schema import CreateColumn


def add_column(conn: Connection, table_name: str, column: Column) -> None:
    """ALTER TABLE ... ADD COLUMN, the one ALTER that SQLite and PostgreSQL both do in place.

    SQLite adds only nullable columns or ones with a constant default; for
    anything else a migration creates the new table, copies, drops, renames.
    """
    ddl = CreateColumn(column).compile(dialect=conn.dialect)
    quoted = conn.dialect.identifier_preparer.quote(table_name)
    conn.exec_driver_sql(f"ALTER TABLE {quoted} ADD COLUMN {ddl}")
