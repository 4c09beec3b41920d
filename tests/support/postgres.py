"""A throwaway PostgreSQL database for tests, and the backend-parametrised store URL fixture.

The server is the one CI provides: 127.0.0.1:5432, user postgres, trust auth
(override with AIRFLOW_TRANSFER_TEST_POSTGRES_URL, an admin URL whose database
is used only to CREATE/DROP). An unreachable server FAILS the tests that need
it, with a message saying so: a silent skip would count a backend as tested
when it was not.

One database per session (created with a unique name, dropped WITH (FORCE)
at the end); each test that wants a fresh store gets its own schema in it,
selected through the URL's ``options=-csearch_path=...`` — creating a schema
takes milliseconds where CREATE/DROP DATABASE took ~0.1 s each, and it is
how a store is deployed inside a shared database anyway.

Use from a test module (fixtures are looked up in the module's namespace)::

    from tests.support.postgres import postgres_server, store_url  # noqa: F401 - fixtures used by name
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

ADMIN_URL_ENV = "AIRFLOW_TRANSFER_TEST_POSTGRES_URL"
DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DATABASE_PREFIX = "at_test_"


class PostgresServer:
    """Creates uniquely named databases/schemas on one server and drops them all at the end."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = make_url(admin_url)
        self.created: list[str] = []
        self._session_database: str | None = None

    def _connect(self, dbname: str | None = None) -> psycopg.Connection:
        url = self.admin_url
        return psycopg.connect(
            host=url.host or "127.0.0.1",
            port=url.port or 5432,
            user=url.username or "postgres",
            password=url.password,
            dbname=dbname or url.database or "postgres",
            autocommit=True,  # CREATE/DROP DATABASE cannot run in a transaction
            connect_timeout=5,
        )

    def _url(self, database: str, **query: str) -> str:
        url = self.admin_url.set(drivername="postgresql+psycopg", database=database, query=query)
        return url.render_as_string(hide_password=False)

    def check(self) -> str:
        with self._connect() as conn:
            return conn.execute("SHOW server_version").fetchone()[0]

    def create_database(self) -> str:
        """A new empty database; returns its SQLAlchemy URL (psycopg 3 driver)."""
        name = f"{DATABASE_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:10]}"
        with self._connect() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self.created.append(name)
        return self._url(name)

    def create_schema(self) -> str:
        """A new empty schema in this session's database; the URL makes it the search path."""
        if self._session_database is None:
            self._session_database = make_url(self.create_database()).database
        name = f"s_{uuid.uuid4().hex[:12]}"
        with self._connect(self._session_database) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        return self._url(self._session_database, options=f"-csearch_path={name}")

    def drop_all(self) -> None:
        with self._connect() as conn:
            for name in self.created:
                # FORCE: a test that failed midway may have left a pool connected
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        self.created.clear()
        self._session_database = None


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer(os.environ.get(ADMIN_URL_ENV, DEFAULT_ADMIN_URL))
    reason = None
    try:
        server.check()
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if reason is not None:  # failed outside the except block: one message, no chained traceback
        pytest.fail(
            f"PostgreSQL is not reachable at {server.admin_url.render_as_string(hide_password=True)} ({reason}): "
            f"start it (CI provides it), or point {ADMIN_URL_ENV} at a server where you may create databases",
            pytrace=False,
        )
    yield server
    server.drop_all()


@pytest.fixture
def postgres_database(postgres_server: PostgresServer) -> str:
    """URL of a fresh, empty database (dropped at the end of the session)."""
    return postgres_server.create_database()


@pytest.fixture
def postgres_schema_url(postgres_server: PostgresServer) -> str:
    """URL of a fresh, empty schema in the session's throwaway database."""
    return postgres_server.create_schema()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, never-migrated store URL on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return request.getfixturevalue("postgres_server").create_schema()
