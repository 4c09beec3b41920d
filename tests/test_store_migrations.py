"""Schema migrations: idempotent, atomic, extensible, and in step with schema.py."""

from __future__ import annotations

import pyarrow as pa
import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, inspect, select, text
from sqlalchemy.engine import Connection

from airflow_transfer.store import Store, StoreError
from airflow_transfer.store import schema as current
from airflow_transfer.store.connection import make_engine
from airflow_transfer.store.migrations import STEPS, Migration, add_column, check_steps, latest_version, migrate
from tests.support.postgres import postgres_server, store_url  # noqa: F401  (fixtures)


def _versions(store: Store) -> list[tuple[int, str]]:
    table = current.schema_version
    return store.read(lambda c: [tuple(r) for r in c.execute(select(table.c.version, table.c.applied_at))])


def test_open_migrates_a_new_store_and_reopening_changes_nothing(store_url: str) -> None:
    with Store.open(store_url) as store:
        assert store.schema_version == latest_version() >= 1
        first = _versions(store)
    assert [v for v, _ in first] == list(range(1, latest_version() + 1))
    for _ in range(2):
        with Store.open(store_url) as again:
            assert again.schema_version == latest_version()
            assert _versions(again) == first  # no step re-applied, applied_at untouched


def test_migrated_database_matches_schema_module(store_url: str) -> None:
    """schema.py (what queries use) and the migrations (what builds the database) must agree."""
    with Store.open(store_url) as store:
        reflected = store.read(lambda conn: _describe(conn, [t.name for t in current.metadata.sorted_tables]))
    expected = {
        table.name: {
            "columns": {c.name: (c.nullable, c.primary_key, c.type.python_type) for c in table.columns},
            "indexes": {ix.name: tuple(c.name for c in ix.columns) for ix in table.indexes},
            "foreign_keys": sorted((fk.parent.name, fk.column.table.name, fk.column.name) for fk in table.foreign_keys),
        }
        for table in current.metadata.sorted_tables
    }
    assert reflected == expected


def _describe(conn: Connection, names: list[str]) -> dict:
    inspector = inspect(conn)
    described = {}
    for name in names:
        pk = set(inspector.get_pk_constraint(name)["constrained_columns"])
        described[name] = {
            "columns": {
                c["name"]: (c["nullable"] and c["name"] not in pk, c["name"] in pk, c["type"].python_type)
                for c in inspector.get_columns(name)
            },
            "indexes": {ix["name"]: tuple(ix["column_names"]) for ix in inspector.get_indexes(name)},
            "foreign_keys": sorted(
                (col, fk["referred_table"], ref)
                for fk in inspector.get_foreign_keys(name)
                for col, ref in zip(fk["constrained_columns"], fk["referred_columns"])
            ),
        }
    return described


def _v2_adds_a_column_and_a_table(conn: Connection) -> None:
    add_column(conn, "at_transfers", Column("owner", String(64), nullable=True))
    meta = MetaData()
    Table("at_test_library", meta, Column("id", Integer, primary_key=True), Column("host", String(200)))
    meta.create_all(conn)


def test_a_later_migration_upgrades_an_existing_store_and_keeps_its_data(store_url: str) -> None:
    with Store.open(store_url) as store:
        record = store.begin_transfer("k", "sftp://h/a", "file:///b")

    steps = (*STEPS, Migration(len(STEPS) + 1, "test: owner column, library table", _v2_adds_a_column_and_a_table))
    engine = make_engine(store_url)
    try:
        assert migrate(engine, url_for_errors=store_url, steps=steps) == len(steps)
        assert migrate(engine, url_for_errors=store_url, steps=steps) == len(steps)  # idempotent
        with engine.connect() as conn:
            assert conn.execute(text("SELECT key, owner FROM at_transfers")).all() == [("k", None)]
            assert inspect(conn).has_table("at_test_library")
    finally:
        engine.dispose()

    # this build knows fewer versions than the database: it must refuse, not corrupt
    with pytest.raises(StoreError, match=rf"newer than this airflow-transfer knows \({latest_version()}\)"):
        Store.open(store_url)
    assert record.id == 1


def test_a_failing_migration_leaves_the_previous_version_intact(store_url: str) -> None:
    Store.open(store_url).close()

    def broken(conn: Connection) -> None:
        meta = MetaData()
        Table("at_half_done", meta, Column("id", Integer, primary_key=True))
        meta.create_all(conn)
        add_column(conn, "at_transfers", Column("half", Integer))
        raise RuntimeError("migration bug")

    engine = make_engine(store_url)
    try:
        with pytest.raises(RuntimeError, match="migration bug"):
            migrate(engine, url_for_errors=store_url, steps=(*STEPS, Migration(len(STEPS) + 1, "broken", broken)))
        with engine.connect() as conn:
            assert not inspect(conn).has_table("at_half_done")  # DDL rolled back with the transaction
            assert "half" not in {c["name"] for c in inspect(conn).get_columns("at_transfers")}
    finally:
        engine.dispose()
    with Store.open(store_url) as store:
        assert store.schema_version == latest_version()


def test_step_numbers_must_be_contiguous() -> None:
    check_steps(STEPS)
    gap = (*STEPS, Migration(len(STEPS) + 2, "skips one", lambda conn: None))
    with pytest.raises(StoreError, match="expected"):
        check_steps(gap)


def test_the_files_by_state_index_leaves_done_files_out(store_url: str) -> None:
    # Migration 6: done rows are not in the index (a finished file costs one index write less),
    # and a state query still finds the files that are not done.
    with Store.open(store_url) as store:
        if store.backend == "postgresql":
            sql = "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_at_files_transfer_state' AND schemaname = current_schema()"
        else:
            sql = "SELECT sql FROM sqlite_master WHERE name = 'ix_at_files_transfer_state'"
        definition = store.read(lambda conn: conn.exec_driver_sql(sql).scalar_one())
        assert "where" in definition.lower() and "done" in definition, definition
        record = store.begin_transfer("partial-index", "src", "dst")
        store.record_listing(
            record.id,
            pa.table({"path": ["a", "b", "c"], "size": [1, 2, 3], "mtime": [1.0, 1.0, 1.0]}),
        )
        with store.journal_writer(record.id, background=False) as journal:
            journal.mark_done("a", 1, 1.0)
            journal.mark_failed("b", "refused")
        states = store.file_states(record.id, ["pending", "failed"])
        assert states["path"].to_pylist() == ["b", "c"]
        assert store.file_states(record.id, ["done"])["path"].to_pylist() == ["a"]
