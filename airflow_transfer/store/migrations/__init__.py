"""Numbered schema migrations and the runner that applies them.

Why our own runner rather than alembic: the store is part of the Airflow-free
core, whose only database dependency is SQLAlchemy (alembic arrives with
Airflow, which the core must not need); the schema is a handful of tables
that only ever grow; and opening the store must migrate by itself, safely
when many workers open it at once — a dozen lines here, versus alembic's
env.py/script directory shipped inside the package plus the same locking.

Adding a migration: copy the newest ``vNNNN_*.py`` to the next number, give it
``VERSION``, ``NAME`` and ``upgrade(conn)`` with FROZEN table definitions (never
import schema.py: that module moves on, a migration must not), append it to
``STEPS`` below, and update schema.py to match. tests/test_store_migrations.py
fails until both agree.

Applying: all pending steps run in ONE transaction (PostgreSQL and SQLite both
have transactional DDL), so a crash leaves the previous version intact. The
transaction first takes the migration lock — BEGIN IMMEDIATE on SQLite, an
advisory lock on PostgreSQL — and re-reads the version under it, so when
several processes open a new store together one migrates and the others then
find nothing to do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType

from sqlalchemy import Column, Integer, MetaData, String, Table, func, insert, inspect, select
from sqlalchemy.engine import Connection, Engine

from ..coltypes import UTCDateTime, utcnow
from ..connection import lock_key, run_transaction
from ..errors import StoreError
from . import (
    v0001_transfers_journal,
    v0002_tuning_library,
    v0003_block_digests,
    v0004_protocols,
    v0005_transfer_lifecycle,
    v0006_files_state_partial,
)
from .ddl import add_column  # noqa: F401 - public here too (docs/store.md: migrations.add_column)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    upgrade: Callable[[Connection], None]


def _step(module: ModuleType) -> Migration:
    return Migration(module.VERSION, module.NAME, module.upgrade)


STEPS: tuple[Migration, ...] = (
    _step(v0001_transfers_journal),
    _step(v0002_tuning_library),
    _step(v0003_block_digests),
    _step(v0004_protocols),
    _step(v0005_transfer_lifecycle),
    _step(v0006_files_state_partial),
)

# The runner's own bookkeeping table never changes shape.
_meta = MetaData()
_version_table = Table(
    "at_schema_version",
    _meta,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("name", String(200), nullable=False),
    Column("applied_at", UTCDateTime, nullable=False),
)
_LOCK_NAME = "schema-migration"


def latest_version(steps: Sequence[Migration] = STEPS) -> int:
    return steps[-1].version if steps else 0


def check_steps(steps: Sequence[Migration]) -> None:
    """Versions must be 1, 2, 3, ... in order: a gap or a duplicate is a packaging bug."""
    for expected, step in enumerate(steps, start=1):
        if step.version != expected:
            raise StoreError(f"migration {step.name!r} has version {step.version}, expected {expected}")


def current_version(conn: Connection) -> int:
    """Schema version of the database behind ``conn`` (0 when it has never been migrated)."""
    if not inspect(conn).has_table(_version_table.name):
        return 0
    return int(conn.execute(select(func.coalesce(func.max(_version_table.c.version), 0))).scalar_one())


def migrate(engine: Engine, *, url_for_errors: str, steps: Sequence[Migration] = STEPS) -> int:
    """Bring the database to the latest version; return the version it is at."""
    check_steps(steps)
    target = latest_version(steps)
    # Cheap check without the write lock: the common case is "already current".
    version = run_transaction(engine, current_version, write=False, url_for_errors=url_for_errors)
    if version == target:
        return version
    _refuse_newer(version, target)
    return run_transaction(
        engine, lambda conn: _migrate_locked(conn, steps, target), write=True, url_for_errors=url_for_errors
    )


def _migrate_locked(conn: Connection, steps: Sequence[Migration], target: int) -> int:
    lock_key(conn, _LOCK_NAME)
    _version_table.create(conn, checkfirst=True)
    version = current_version(conn)
    _refuse_newer(version, target)
    for step in steps[version:]:
        step.upgrade(conn)
        conn.execute(insert(_version_table).values(version=step.version, name=step.name, applied_at=utcnow()))
    return target


def _refuse_newer(version: int, target: int) -> None:
    if version > target:
        raise StoreError(
            f"the store's schema is version {version}, newer than this airflow-transfer knows ({target})",
            todo="upgrade airflow-transfer on this worker to the version that migrated the store",
        )
