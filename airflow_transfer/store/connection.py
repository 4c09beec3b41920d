"""Engines, transactions and the retry policy, per backend.

SQLite (one machine: LocalExecutor, CLI):
  - WAL journal, so readers (the UI) never block the writer and vice versa;
  - a busy timeout set on every new connection, so a writer waits for the
    lock instead of failing at once;
  - write transactions start with BEGIN IMMEDIATE: the lock is taken up
    front, so a read-modify-write (range merging) never has to upgrade a read
    lock, which SQLite refuses with an immediate "database is locked" that no
    busy timeout covers;
  - synchronous=NORMAL: in WAL mode a commit survives a process crash; a
    power cut may lose the last commits, which only makes the journal lag
    the destination (those ranges are sent again), never run ahead of it.
PostgreSQL (several workers/hosts): ordinary READ COMMITTED transactions;
  rows merged in Python are locked with SELECT ... FOR UPDATE and concurrent
  creators are serialized with transaction-scoped advisory locks.

Both: transactions are short, and a transaction that hits a lock or a
serialization conflict is run again from the start after a jittered backoff.
"""

from __future__ import annotations

import random
import sqlite3
import time
import zlib
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError

from .config import ENV_VAR, mask_url
from .errors import StoreError

T = TypeVar("T")

DEFAULT_BUSY_TIMEOUT_MS = 30_000
# Execution option telling the SQLite "begin" hook to take the write lock up front.
WRITE_OPTION = "airflow_transfer_write"

_RETRY_ATTEMPTS = 10
_RETRY_FIRST_DELAY_S = 0.02
_RETRY_MAX_DELAY_S = 1.0
# SQLite's texts for SQLITE_BUSY / SQLITE_LOCKED
_SQLITE_LOCKED = ("database is locked", "database table is locked", "database schema is locked")
# PostgreSQL: serialization_failure, deadlock_detected, lock_not_available
_PG_RETRY_SQLSTATES = {"40001", "40P01", "55P03"}
# Namespace of this project's PostgreSQL advisory locks (first key of the two-int form).
_PG_LOCK_NAMESPACE = zlib.crc32(b"airflow_transfer.store") & 0x7FFFFFFF


def make_engine(url: str, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS) -> Engine:
    """An Engine for ``url`` with this module's per-backend settings."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise StoreError(
            f"store URL {mask_url(url)!r} is not a valid database URL",
            todo=f"use sqlite:////path/file.db or postgresql+psycopg://user@host/db in {ENV_VAR}",
        ) from exc
    try:
        if parsed.get_backend_name() == "sqlite":
            if parsed.database in (None, "", ":memory:") or "mode=memory" in str(parsed):
                raise StoreError(
                    "an in-memory SQLite store is private to one connection (the journal writer's thread "
                    "and other workers would each see an empty one)",
                    todo="use a SQLite file (sqlite:////path/store.db) or PostgreSQL",
                )
            engine = create_engine(parsed, connect_args={"check_same_thread": False})
            _install_sqlite_hooks(engine, busy_timeout_ms)
            return engine
        connect_args = {}
        if parsed.get_backend_name() == "postgresql":
            connect_args = {"connect_timeout": 10, "application_name": "airflow-transfer"}
        return create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
    except (NoSuchModuleError, ModuleNotFoundError) as exc:
        raise StoreError(
            f"store URL {mask_url(url)!r} needs a database driver that is not installed ({exc})",
            todo="install airflow-transfer[postgres] and use postgresql+psycopg://, or use sqlite:///",
        ) from exc


def _install_sqlite_hooks(engine: Engine, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        # sqlite3's own implicit BEGIN handling is off; _on_begin emits BEGIN
        # (see SQLAlchemy's "Transactions with SQLite and the sqlite3 driver").
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            cursor.execute("PRAGMA foreign_keys = ON")
            _switch_to_wal(cursor, busy_timeout_ms)
            cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(WRITE_OPTION):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")


def _switch_to_wal(cursor: sqlite3.Cursor, busy_timeout_ms: int) -> None:
    # Turning WAL on needs an exclusive lock once per database file; when many
    # processes open a new file together some see "locked" here.
    deadline = time.monotonic() + busy_timeout_ms / 1000
    delay = _RETRY_FIRST_DELAY_S
    while True:
        try:
            mode = cursor.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode.lower() not in ("wal", "memory"):
                raise StoreError(
                    f"SQLite refused WAL mode (journal_mode stayed {mode!r})",
                    todo="put the store on a local file system, or use PostgreSQL",
                )
            return
        except sqlite3.OperationalError as exc:
            if not _is_sqlite_lock(str(exc)) or time.monotonic() > deadline:
                raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, _RETRY_MAX_DELAY_S)


def _is_sqlite_lock(message: str) -> bool:
    return any(text_ in message for text_ in _SQLITE_LOCKED)


def is_retryable(exc: BaseException) -> bool:
    """True when running the whole transaction again can succeed."""
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    if isinstance(orig, sqlite3.OperationalError):
        return _is_sqlite_lock(str(orig))
    return getattr(orig, "sqlstate", None) in _PG_RETRY_SQLSTATES


def run_transaction(engine: Engine, fn: Callable[[Connection], T], *, write: bool, url_for_errors: str) -> T:
    """Run ``fn(conn)`` in one transaction, again from the start on lock/serialization conflicts."""
    bound = engine.execution_options(**{WRITE_OPTION: True}) if write else engine
    delay = _RETRY_FIRST_DELAY_S
    for attempt in range(1, _RETRY_ATTEMPTS + 1):
        try:
            with bound.begin() as conn:
                return fn(conn)
        except DBAPIError as exc:
            if is_retryable(exc) and attempt < _RETRY_ATTEMPTS:
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, _RETRY_MAX_DELAY_S)
                continue
            if isinstance(exc, OperationalError):
                raise operational_error(exc, url_for_errors, attempts=attempt) from exc
            raise
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def operational_error(exc: DBAPIError, url: str, *, attempts: int = 1) -> StoreError:
    """A one-line StoreError for a database-side failure, with the URL's password masked."""
    reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
    password = make_url(url).password if "://" in url else None
    if password:
        reason = reason.replace(str(password), "***")
    where = f"store {mask_url(url)}"
    if is_retryable(exc):
        return StoreError(
            f"the store stayed locked after {attempts} attempts ({reason})",
            where=where,
            todo="another process holds long write transactions; retry, or use PostgreSQL for many workers",
        )
    return StoreError(
        f"cannot use the airflow-transfer store ({reason})",
        where=where,
        todo=f"check [airflow_transfer] store_url / {ENV_VAR} and that the database is reachable and writable",
    )


def lock_key(conn: Connection, key: str) -> None:
    """Serialize writers of ``key`` until the end of the transaction.

    SQLite needs nothing: BEGIN IMMEDIATE already made this the only writer.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(
            text("SELECT pg_advisory_xact_lock(:ns, hashtext(:key))"),
            {"ns": _PG_LOCK_NAMESPACE, "key": key},
        )
