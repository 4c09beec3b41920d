"""Files a journal batch finishes are written without reading their rows, to the same result.

apply_events writes a file whose last event in the batch is a FileDone with one
blind UPDATE; every other file is read, folded and written back. Random mixed
batches go through apply_events on one transfer and through the folding path
alone on a twin transfer with the same rows: every column of every row, and the
paths reported unknown, must agree. On both backends.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from sqlalchemy import event, select

from airflow_transfer.manifest_schema import SCHEMA
from airflow_transfer.store import Store, journal, sqlite_rows
from airflow_transfer.store.journal import (
    MAX_ERROR_CHARS,
    BlockDone,
    Event,
    FileDone,
    FileFailed,
    RangeDone,
    RangesReset,
)
from airflow_transfer.store.schema import files
from tests.support.postgres import postgres_server, store_url  # noqa: F401 - fixtures used by name

FIXED_NOW = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
LISTED = [f"d{i % 3}/f{i:02d}" for i in range(14)] + ["empty", "z/last"]
UNKNOWN = ["a-not-listed", "d1/zz-not-listed", "zzz"]


@pytest.fixture
def store(store_url: str, monkeypatch: pytest.MonkeyPatch) -> Store:
    # Both paths stamp updated_at from utcnow(): a fixed clock lets every column be compared.
    monkeypatch.setattr(journal, "utcnow", lambda: FIXED_NOW)
    with Store.open(store_url) as opened:
        yield opened


def _twins(store: Store, sizes: dict[str, int]) -> tuple[int, int]:
    listing = pa.table(
        {"path": list(sizes), "size": list(sizes.values()), "mtime": [1_700_000_000.25] * len(sizes)}, schema=SCHEMA
    )
    ids = []
    for key in ("fast", "folded"):
        record = store.begin_transfer(key, "sftp://src/data", "file:///dst", resume=False)
        store.record_listing(record.id, listing)
        ids.append(record.id)
    return ids[0], ids[1]


def _rows(store: Store, transfer_id: int) -> dict[str, dict]:
    columns = [column for column in files.c if column.name != "transfer_id"]
    query = select(*columns).where(files.c.transfer_id == transfer_id).order_by(files.c.path)
    return {row["path"]: dict(row) for row in store.read(lambda conn: list(conn.execute(query).mappings()))}


def _apply_both(store: Store, fast_id: int, folded_id: int, events: list[Event]) -> None:
    unknown_fast = store.write(lambda conn: journal.apply_events(conn, fast_id, events))
    unknown_folded = store.write(lambda conn: journal._apply_folded(conn, folded_id, events))
    assert unknown_fast == unknown_folded
    fast, folded = _rows(store, fast_id), _rows(store, folded_id)
    assert fast.keys() == folded.keys()
    for path in fast:
        for column, value in folded[path].items():
            assert fast[path][column] == value, (path, column, fast[path][column], value, events)
            assert type(fast[path][column]) is type(value), (path, column)


def _random_event(rng: random.Random, path: str, size: int) -> Event:
    kind = rng.choice(("range", "range", "reset", "block", "done", "failed"))
    if kind == "range":
        start = rng.randrange(0, max(size, 1))
        return RangeDone(path, start, rng.randint(start, max(size, start + 1)))
    if kind == "reset":
        return RangesReset(path)
    if kind == "block":
        return BlockDone(path, rng.randrange(0, 4) * 256, 256, f"md5:{rng.getrandbits(32):08x}")
    if kind == "done":
        return _random_done(rng, path)
    error = "x" * (MAX_ERROR_CHARS + 10) if rng.random() < 0.2 else f"error {rng.getrandbits(16)}"
    return FileFailed(path, error, rng.choice((None, None, rng.randint(1, 9))))


def _random_done(rng: random.Random, path: str) -> FileDone:
    return FileDone(
        path,
        rng.choice((0, 1, 1024, 1024, 5000, rng.randint(0, 1 << 40))),
        rng.choice((None, 1_700_000_123.5, float(rng.randint(1, 1 << 31)))),
        rng.choice((None, f"sha256:{rng.getrandbits(64):016x}")),
        rng.choice((None, rng.randint(0, 5))),
    )


def _random_batch(rng: random.Random, sizes: dict[str, int]) -> list[Event]:
    events: list[Event] = []
    for _ in range(rng.randint(1, 40)):
        path = rng.choice(LISTED + UNKNOWN)
        size = sizes.get(path, 100)
        shape = rng.random()
        if shape < 0.35:  # a small file restarted and finished
            events += [RangesReset(path), _random_done(rng, path)]
        elif shape < 0.45:
            events.append(_random_done(rng, path))
        else:
            events.append(_random_event(rng, path, size))
    if rng.random() < 0.3:  # files' events interleaved as concurrent transfers report them
        rng.shuffle(events)
    return events


@pytest.mark.parametrize("max_runs", [16, 1])
def test_random_batches_give_the_rows_the_fold_gives(
    store: Store, max_runs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # max_runs=1 sends every PostgreSQL batch with both kinds of files down the folding path
    monkeypatch.setattr(journal, "_MAX_RUNS", max_runs)
    sizes = {path: (0 if path == "empty" else 1024 * (i + 1)) for i, path in enumerate(LISTED)}
    fast_id, folded_id = _twins(store, sizes)
    rng = random.Random(20260102 + max_runs)
    for _ in range(60):
        _apply_both(store, fast_id, folded_id, _random_batch(rng, sizes))


SCENARIOS: dict[str, list[Event]] = {
    "restart then done": [RangesReset("d0/f00"), FileDone("d0/f00", 1024, 1_700_000_999.0, "md5:aa", 1)],
    "done without mtime or attempts": [FileDone("d0/f00", 1024, None, None, None)],
    "done then a late range": [FileDone("d0/f00", 1024, 2.0, None, 1), RangeDone("d0/f00", 0, 10)],
    "done then reset": [FileDone("d0/f00", 1024, 2.0, None, 1), RangesReset("d0/f00")],
    "failed then done": [FileFailed("d0/f00", "timeout", None), FileDone("d0/f00", 1024, None, "md5:bb", None)],
    "failed with attempts then done": [FileFailed("d0/f00", "x", 7), FileDone("d0/f00", 1024, 3.0, None, None)],
    "two dones, the last without mtime or attempts": [
        FileDone("d0/f00", 1024, 5.5, "md5:1", 4),
        RangeDone("d0/f00", 0, 5),
        FileDone("d0/f00", 2048, None, "md5:2", None),
    ],
    "blocks then done": [BlockDone("d0/f00", 0, 256, "md5:cc"), FileDone("d0/f00", 1024, 1.0, None, 2)],
    "empty file": [RangesReset("empty"), FileDone("empty", 0, 9.0, None, 1)],
    "unknown paths only": [FileDone("zzz", 10, 1.0, None, 1), RangesReset("a-not-listed")],
    "unknown among known": [
        FileDone("a-not-listed", 10, 1.0, None, 1),
        FileDone("d1/f01", 1024, 1.0, None, 1),
        RangeDone("d2/f02", 0, 100),
        FileDone("zzz", 3, None, None, None),
    ],
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenarios_give_the_rows_the_fold_gives(store: Store, name: str) -> None:
    sizes = {path: (0 if path == "empty" else 1024) for path in LISTED}
    fast_id, folded_id = _twins(store, sizes)
    # rows with history first: ranges, blocks, a failure with its error and attempts, an earlier done
    history: list[Event] = [
        RangeDone("d0/f00", 0, 512),
        BlockDone("d0/f00", 0, 256, "md5:00"),
        FileFailed("d0/f00", "first failure", None),
        FileDone("d1/f01", 1024, 42.0, "md5:old", 3),
        RangeDone("d2/f02", 0, 7),
    ]
    _apply_both(store, fast_id, folded_id, history)
    _apply_both(store, fast_id, folded_id, SCENARIOS[name])


@pytest.mark.parametrize("params", [100, 999])
def test_a_batch_larger_than_one_statement_gives_the_rows_the_fold_gives(
    store: Store, params: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite takes many rows per statement, up to 999 parameters (sqlite_rows.py): 1,000 listed
    # files and the finished ones span several statements. Unknown paths among them, the rows
    # must come out as the fold writes them, the unknown ones reported.
    monkeypatch.setattr(sqlite_rows, "MAX_PARAMS", params)
    names = [f"d{i // 100:02d}/f{i:04d}" for i in range(1000)]
    listing = pa.table({"path": names, "size": [1024] * 1000, "mtime": [1_700_000_000.25] * 1000}, schema=SCHEMA)
    ids = []
    for key in ("fast", "folded"):
        record = store.begin_transfer(key, "sftp://src/data", "file:///dst", resume=False)
        assert store.record_listing(record.id, listing) == 1000
        ids.append(record.id)
    assert set(_rows(store, ids[0])) == set(names)
    rng = random.Random(20261129)
    events: list[Event] = []
    for i, path in enumerate(names):
        if i % 3:
            events.append(_random_done(rng, path))
        if i % 250 == 7:
            events.append(FileDone(f"{path}-not-listed", 1, 1.0, None, 1))
    seen = _statements(store)
    _apply_both(store, ids[0], ids[1], events)
    assert sum(row["state"] == "done" for row in _rows(store, ids[0]).values()) == 666
    if store.backend == "sqlite":  # 666 files and 4 unknown, 7 parameters each, 3 shared
        one_by_one = [p for statement, p, many in seen if statement.lstrip().startswith("UPDATE") and not many]
        assert len(one_by_one) == -(-670 // ((params - 3) // 7))


def _statements(store: Store) -> list[tuple[str, object, bool]]:
    seen: list[tuple[str, object, bool]] = []

    def record(_conn, _cursor, statement, parameters, _context, executemany) -> None:
        seen.append((statement, parameters, executemany))

    event.listen(store.engine, "before_cursor_execute", record)
    return seen


def test_a_batch_of_finished_files_reads_no_row(store: Store) -> None:
    sizes = {path: 1024 for path in LISTED}
    fast_id, _ = _twins(store, sizes)
    events: list[Event] = []
    for path in LISTED:
        events += [RangesReset(path), FileDone(path, 1024, 5.0, None, 1)]
    events.append(FileDone("d0/f00", 1024, 6.0, None, None))  # only a FileDone for this one
    seen = _statements(store)
    assert store.apply_journal_events(fast_id, events) == []
    statements = [statement for statement, _, _ in seen if statement.strip() not in ("BEGIN", "BEGIN IMMEDIATE")]
    assert [s.split()[0] for s in statements] == ["UPDATE"], statements
    if store.backend == "sqlite":
        # one statement whose VALUES hold every file (sqlite_rows.py): not a step per row
        assert not seen[-1][2] and len(seen[-1][1]) == 3 + 7 * len(LISTED)
    else:
        assert seen[-1][2] and len(seen[-1][1]) == len(LISTED)  # one executemany, a row per file
    rows = _rows(store, fast_id)
    assert {row["state"] for row in rows.values()} == {"done"}
    assert rows["d0/f00"]["mtime"] == 6.0 and rows["d1/f01"]["mtime"] == 5.0


def test_an_unknown_finished_file_is_still_reported(store: Store) -> None:
    fast_id, _ = _twins(store, {"a": 10, "b": 10})
    seen = _statements(store)
    unknown = store.apply_journal_events(
        fast_id, [FileDone("b", 10, None, None, None), FileDone("nope", 1, None, None, None)]
    )
    assert unknown == ["nope"]
    # the UPDATE's row count said a row was missing: one SELECT found which
    assert [s.split()[0] for s, _, _ in seen if s.split()[0] in ("SELECT", "UPDATE")] == ["UPDATE", "SELECT"]
    assert _rows(store, fast_id)["b"]["state"] == "done"


@pytest.fixture
def pg_store(postgres_server, monkeypatch: pytest.MonkeyPatch) -> Store:
    monkeypatch.setattr(journal, "utcnow", lambda: FIXED_NOW)
    with Store.open(postgres_server.create_schema()) as opened:
        yield opened


def test_rows_are_locked_in_one_path_order(pg_store: Store) -> None:
    """Blind writes and locking reads interleave in path order, so two writers cannot deadlock.
    PostgreSQL only: SQLite's BEGIN IMMEDIATE admits one writer, there are no row locks to order."""
    store = pg_store
    paths = sorted(LISTED)
    fast_id, _ = _twins(store, dict.fromkeys(paths, 1024))
    events: list[Event] = []
    for i, path in enumerate(reversed(paths)):
        if i % 5 == 2:
            events.append(RangeDone(path, 0, 10))  # every fifth file is still in flight
        else:
            events += [RangesReset(path), FileDone(path, 1024, 1.0, None, 1)]
    seen = _statements(store)
    store.apply_journal_events(fast_id, events)
    touched: list[str] = []
    for statement, parameters, executemany in seen:
        if statement == journal._DONE_SQL[store.engine.dialect.paramstyle]:
            touched += [row[-1] for row in parameters] if executemany else [parameters[-1]]
        elif "FOR UPDATE" in statement:
            touched += sorted(value for value in parameters.values() if value in paths)
    assert touched == paths
