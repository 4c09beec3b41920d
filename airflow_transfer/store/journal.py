"""SQL for the per-file resume journal. Each function runs inside the caller's transaction.

Journal updates arrive as events (a committed byte range, a file done, a file
failed). A batch of events is folded per file in Python and written back with
one executemany UPDATE: one short transaction however many ranges the engine
reported. The rows are read under a write lock (SQLite: BEGIN IMMEDIATE;
PostgreSQL: SELECT ... FOR UPDATE in path order, so two writers cannot
deadlock on each other's rows), so two processes adding ranges to the same
file never lose each other's ranges. A file the batch finishes is written
without being read (see apply_events); on PostgreSQL its UPDATE locks its
row in the same path order. On SQLite, the listing's rows and the finished
files' rows go many to a statement (sqlite_rows.py says why).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import bindparam, func, select, text, update
from sqlalchemy.engine import Connection

from .. import manifest_schema
from . import ranges as rng
from . import sqlite_rows
from .coltypes import db_value, utcnow
from .errors import StoreError
from .schema import DONE, FILE_FAILED, FILE_STATES, PARTIAL, PENDING, files

LISTING_BATCH_ROWS = 5_000
PG_MAX_PATH_BYTES = 2_600
_LOOKUP_BATCH = 500  # paths per IN (...) lookup
MAX_ERROR_CHARS = 2_000

FILE_STATES_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("mtime", pa.float64(), nullable=False),
        pa.field("state", pa.string(), nullable=False),
        pa.field("ranges", pa.string(), nullable=False),  # JSON [[start, end), ...]; see ranges.decode
        pa.field("bytes_done", pa.int64(), nullable=False),
        pa.field("attempts", pa.int32(), nullable=False),
        pa.field("last_error", pa.string()),
        pa.field("checksum", pa.string()),
        pa.field("blocks", pa.string()),  # JSON [[offset, length, "algo:hex"], ...] or null; see decode_blocks
    ]
)


@dataclass(frozen=True, slots=True)
class RangeDone:
    path: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class FileDone:
    path: str
    size: int
    mtime: float | None
    checksum: str | None
    attempts: int | None


@dataclass(frozen=True, slots=True)
class BlockDone:
    """Bytes [offset, offset+length) are at the destination; `digest` ("algo:hex") is the
    source's digest of them, computed while they were read for sending."""

    path: str
    offset: int
    length: int
    digest: str


@dataclass(frozen=True, slots=True)
class RangesReset:
    """The temporary file was created afresh: the ranges and blocks recorded for it are gone."""

    path: str


@dataclass(frozen=True, slots=True)
class FileFailed:
    path: str
    error: str
    attempts: int | None


Event = RangeDone | FileDone | FileFailed | BlockDone | RangesReset


# --- listing ---------------------------------------------------------------


def listing_batches(table: pa.Table, backend: str) -> Iterator[pa.RecordBatch]:
    """The manifest columns of ``table``, validated, in batches small enough for one short transaction."""
    names = (manifest_schema.PATH, manifest_schema.SIZE, manifest_schema.MTIME)
    missing = [name for name in names if name not in table.column_names]
    if missing:
        raise ValueError(f"listing lacks column(s) {missing}: pass a manifest table (path, size, mtime)")
    table = table.select(list(names)).cast(manifest_schema.SCHEMA.remove_metadata(), safe=True)
    if table.num_rows and pc.count_distinct(table[manifest_schema.PATH]).as_py() != table.num_rows:
        raise ValueError("listing has duplicate paths: each file must appear once")
    if table.num_rows and pc.min(table[manifest_schema.SIZE]).as_py() < 0:
        raise ValueError("listing has a negative file size")
    if backend == "postgresql" and table.num_rows:
        _check_path_lengths(table[manifest_schema.PATH])
    return iter(table.to_batches(max_chunksize=LISTING_BATCH_ROWS))


def _check_path_lengths(paths: pa.ChunkedArray) -> None:
    # A PostgreSQL b-tree entry holds at most 2704 bytes, and the journal's
    # primary key is (transfer_id, path): say so before the insert fails.
    lengths = pc.binary_length(paths)
    longest = pc.max(lengths).as_py()
    if longest > PG_MAX_PATH_BYTES:
        path = paths[pc.index(lengths, longest).as_py()].as_py()
        raise StoreError(
            f"path of {longest} bytes is too long for a PostgreSQL store (limit {PG_MAX_PATH_BYTES}): {path[:80]}...",
            todo="use a SQLite store for this dataset, or shorten the directory names",
        )


def upsert_listing(conn: Connection, transfer_id: int, batch: pa.RecordBatch) -> None:
    """Insert the batch as pending; a file already journaled keeps its progress unless it changed.

    A file whose size or mtime differs from the journal changed at the source
    since the last attempt: its committed ranges no longer describe it, so it
    starts over as pending.

    Hand-written SQL rather than Core's executemany: per-row parameter
    processing made 100k rows take seconds. PostgreSQL gets the batch as
    three arrays in one statement (unnest); SQLite, in-process, gets a plain
    DBAPI executemany.
    """
    if batch.num_rows == 0:
        return
    now = db_value(conn, files.c.updated_at.type, utcnow())
    paths, sizes, mtimes = (batch.column(i).to_pylist() for i in range(3))
    if conn.dialect.name == "postgresql":
        conn.execute(
            text(_PG_LISTING_SQL),
            {"transfer_id": transfer_id, "now": now, "paths": paths, "sizes": sizes, "mtimes": mtimes},
        )
        return
    for sql, params in sqlite_rows.listing_statements(
        files.name, _COLUMNS, _ON_CONFLICT, PENDING, transfer_id, now, list(zip(paths, sizes, mtimes))
    ):
        conn.exec_driver_sql(sql, tuple(params))


_COLUMNS = "transfer_id, path, size, mtime, state, ranges, bytes_done, attempts, updated_at"
_ON_CONFLICT = f"""
ON CONFLICT (transfer_id, path) DO UPDATE SET
    size = excluded.size, mtime = excluded.mtime, state = '{PENDING}', ranges = '[]',
    bytes_done = 0, attempts = 0, last_error = NULL, checksum = NULL, blocks = NULL,
    updated_at = excluded.updated_at
WHERE {files.name}.size <> excluded.size OR {files.name}.mtime <> excluded.mtime"""
_PG_LISTING_SQL = f"""
INSERT INTO {files.name} ({_COLUMNS})
SELECT :transfer_id, u.path, u.size, u.mtime, '{PENDING}', '[]', 0, 0, :now
FROM unnest(CAST(:paths AS text[]), CAST(:sizes AS bigint[]), CAST(:mtimes AS float8[])) AS u(path, size, mtime)
{_ON_CONFLICT}"""


# --- events ----------------------------------------------------------------


def apply_events(conn: Connection, transfer_id: int, events: Sequence[Event]) -> list[str]:
    """Fold ``events`` (in order) into the journal; return the paths that are not in it (ignored).

    A file whose last event in the batch is a FileDone (the common case: a small
    file is restarted and finished between two flushes) needs nothing from its
    row but the mtime and attempts to keep when the event has none, which the
    UPDATE itself can COALESCE: such files are written blind, one driver-level
    executemany, without the locking SELECT and the fold. The others take the
    read-fold-write path. Both give the same row.
    """
    if not events:
        return []
    done = _finished(events)
    sql = _DONE_SQL.get(conn.dialect.paramstyle)
    if not done or sql is None:
        return _apply_folded(conn, transfer_id, events)
    paths = sorted({event.path for event in events})
    if len(done) == len(paths):
        return _write_done(conn, transfer_id, sql, paths, done)
    runs = _runs(paths, done)
    if conn.dialect.name == "postgresql":
        # Rows are locked as they are written or selected, so a run order that is not the
        # path order could deadlock against another writer: walk the runs in path order,
        # and give up the blind write when that takes too many round trips.
        if len(runs) > _MAX_RUNS:
            return _apply_folded(conn, transfer_id, events)
    else:
        # SQLite's BEGIN IMMEDIATE already made this the only writer: order does not matter.
        runs = [(True, [p for p in paths if p in done]), (False, [p for p in paths if p not in done])]
    unknown: set[str] = set()
    current: dict[str, dict[str, Any]] = {}
    for blind, run in runs:
        if blind:
            unknown.update(_write_done(conn, transfer_id, sql, run, done))
        else:
            locked = _lock_rows(conn, transfer_id, run)
            unknown.update(path for path in run if path not in locked)
            current.update(locked)
    _write_folded(conn, transfer_id, current, [event for event in events if event.path in current])
    return [path for path in paths if path in unknown]


def _apply_folded(conn: Connection, transfer_id: int, events: Sequence[Event]) -> list[str]:
    """apply_events for any batch: read the rows under lock, fold every event, write them back."""
    paths = sorted({event.path for event in events})
    current = _lock_rows(conn, transfer_id, paths)
    _write_folded(conn, transfer_id, current, events)
    return [path for path in paths if path not in current]


def _write_folded(
    conn: Connection, transfer_id: int, current: dict[str, dict[str, Any]], events: Sequence[Event]
) -> None:
    for event in events:
        row = current.get(event.path)
        if row is not None:
            _fold(row, event)
    now = utcnow()
    updates = [
        {
            "b_transfer_id": transfer_id,
            "b_path": path,
            "state": row["state"],
            "ranges": rng.encode(row["ranges"]),
            "bytes_done": rng.covered_bytes(row["ranges"]),
            "size": row["size"],
            "mtime": row["mtime"],
            "attempts": row["attempts"],
            "last_error": row["last_error"],
            "checksum": row["checksum"],
            "blocks": encode_blocks(row["blocks"]),
            "updated_at": now,
        }
        for path, row in current.items()
    ]
    if updates:
        statement = update(files).where(
            files.c.transfer_id == bindparam("b_transfer_id"), files.c.path == bindparam("b_path")
        )
        conn.execute(statement, updates)


def _finished(events: Sequence[Event]) -> dict[str, FileDone]:
    """The files whose row the batch determines without reading it, each with what its FileDones say.

    After a FileDone, a row keeps from before it only last_error, and mtime and
    attempts when the FileDone has none. So a file qualifies when its last
    event is a FileDone and none of its events is a FileFailed (which sets
    last_error and counts attempts from the stored value); the mtime and
    attempts of an earlier FileDone carry over to a later one without them.
    """
    done: dict[str, FileDone] = {}
    not_last: set[str] = set()  # files with an event after their latest FileDone
    failed: set[str] = set()
    for event in events:
        path = event.path
        if isinstance(event, FileDone):
            before = done.get(path)
            if before is not None and (event.mtime is None or event.attempts is None):
                event = FileDone(
                    path,
                    event.size,
                    before.mtime if event.mtime is None else event.mtime,
                    event.checksum,
                    before.attempts if event.attempts is None else event.attempts,
                )
            done[path] = event
            not_last.discard(path)
        else:
            not_last.add(path)
            if isinstance(event, FileFailed):
                failed.add(path)
    for path in not_last | failed:
        done.pop(path, None)
    return done


def _runs(paths: list[str], done: dict[str, FileDone]) -> list[tuple[bool, list[str]]]:
    """``paths`` (sorted) cut into maximal runs of blind-written (True) or folded (False) files."""
    runs: list[tuple[bool, list[str]]] = []
    for path in paths:
        blind = path in done
        if runs and runs[-1][0] == blind:
            runs[-1][1].append(path)
        else:
            runs.append((blind, [path]))
    return runs


def _write_done(conn: Connection, transfer_id: int, sql: str, paths: list[str], done: dict[str, FileDone]) -> list[str]:
    """Write the final row of each of ``paths`` (sorted) from its FileDone; return those not in the journal."""
    now = db_value(conn, files.c.updated_at.type, utcnow())
    blocks = encode_blocks([])
    encoded: dict[int, tuple[str, int]] = {}  # size -> (ranges, bytes_done): sizes repeat
    finals = []  # (path, size, mtime, checksum, ranges, bytes_done, attempts)
    for path in paths:
        event = done[path]
        size = event.size
        ranges = encoded.get(size)
        if ranges is None:
            whole = [[0, size]] if size > 0 else []
            ranges = encoded[size] = (rng.encode(whole), rng.covered_bytes(whole))
        finals.append((path, size, event.mtime, event.checksum, *ranges, event.attempts))
    if conn.dialect.name == "sqlite" and sqlite_rows.UPDATE_FROM:
        statements = sqlite_rows.done_statements(files.name, DONE, transfer_id, blocks, now, finals)
        written = sum(conn.exec_driver_sql(statement, tuple(params)).rowcount for statement, params in statements)
    else:
        rows = [
            (size, mtime, checksum, ranges, covered, blocks, attempts, now, transfer_id, path)
            for path, size, mtime, checksum, ranges, covered, attempts in finals
        ]
        # psycopg sums executemany's row counts; a driver reporting less (or -1) only costs the SELECT below.
        written = conn.exec_driver_sql(sql, rows).rowcount
    if written == len(finals):
        return []
    known: set[str] = set()
    for start in range(0, len(paths), _LOOKUP_BATCH):
        query = select(files.c.path).where(
            files.c.transfer_id == transfer_id, files.c.path.in_(paths[start : start + _LOOKUP_BATCH])
        )
        known.update(conn.execute(query).scalars())
    return [path for path in paths if path not in known]


# Round trips one batch may spend interleaving blind writes with locking reads (PostgreSQL).
_MAX_RUNS = 16
_DONE_UPDATE = f"""
UPDATE {files.name} SET size = ?, mtime = COALESCE(?, mtime), checksum = ?, ranges = ?, bytes_done = ?,
    state = '{DONE}', blocks = ?, attempts = COALESCE(?, attempts), updated_at = ?
WHERE transfer_id = ? AND path = ?"""
# By the driver's paramstyle; another style takes the folding path.
_DONE_SQL = {"qmark": _DONE_UPDATE, "format": _DONE_UPDATE.replace("?", "%s")}
_DONE_SQL["pyformat"] = _DONE_SQL["format"]


def _lock_rows(conn: Connection, transfer_id: int, paths: list[str]) -> dict[str, dict[str, Any]]:
    columns = [
        files.c[name]
        for name in ("path", "size", "mtime", "state", "ranges", "attempts", "last_error", "checksum", "blocks")
    ]
    postgresql = conn.dialect.name == "postgresql"
    # UTF-8 byte order is code point order, Python's str order: the lock order of the blind
    # writes and of the next batch of paths, whatever collation the database sorts text by.
    order = files.c.path.collate("C") if postgresql else files.c.path
    current: dict[str, dict[str, Any]] = {}
    for start in range(0, len(paths), _LOOKUP_BATCH):
        query = (
            select(*columns)
            .where(files.c.transfer_id == transfer_id, files.c.path.in_(paths[start : start + _LOOKUP_BATCH]))
            .order_by(order)
        )
        if postgresql:
            query = query.with_for_update()
        for row in conn.execute(query).mappings():
            current[row["path"]] = {**row, "ranges": rng.decode(row["ranges"]), "blocks": decode_blocks(row["blocks"])}
    return current


def _fold(row: dict[str, Any], event: Event) -> None:
    """Apply one event to a file's working state. Order matters: events arrive as they happened."""
    if isinstance(event, RangeDone):
        row["ranges"].append([event.start, event.end])
        # a done file stays done: a late range report changes nothing about it
        if row["state"] in (PENDING, FILE_FAILED):
            row["state"] = PARTIAL
        return
    if isinstance(event, BlockDone):
        # A block sent again replaces whatever earlier digests it overlaps.
        lo, hi = event.offset, event.offset + event.length
        row["blocks"] = [b for b in row["blocks"] if b[0] + b[1] <= lo or b[0] >= hi]
        row["blocks"].append([event.offset, event.length, event.digest])
        return
    if isinstance(event, RangesReset):
        row["ranges"], row["blocks"] = [], []
        if row["state"] == PARTIAL:
            row["state"] = PENDING
        return
    if isinstance(event, FileDone):
        row["size"] = event.size
        if event.mtime is not None:
            row["mtime"] = event.mtime
        row["checksum"] = event.checksum
        row["ranges"] = [[0, event.size]] if event.size > 0 else []
        row["state"] = DONE
        row["blocks"] = []  # verified under its final name: nothing left to resume
        if event.attempts is not None:
            row["attempts"] = event.attempts
        return
    row["state"] = FILE_FAILED
    row["last_error"] = event.error[:MAX_ERROR_CHARS]
    row["attempts"] = event.attempts if event.attempts is not None else row["attempts"] + 1


def encode_blocks(blocks: list[list]) -> str | None:
    """Compact JSON of block digests sorted by offset; None when there are none."""
    if not blocks:
        return None
    return json.dumps(sorted(blocks, key=lambda b: (b[0], b[1])), separators=(",", ":"))


def decode_blocks(text: str | None) -> list[list]:
    """[[offset, length, "algo:hex"], ...] from the journal's text (empty for NULL)."""
    if not text:
        return []
    return [[int(o), int(n), str(d)] for o, n, d in json.loads(text)]


# --- queries ---------------------------------------------------------------


def file_states(conn: Connection, transfer_id: int, states: Sequence[str] | None) -> pa.Table:
    columns = [files.c[field.name] for field in FILE_STATES_SCHEMA]
    query = select(*columns).where(files.c.transfer_id == transfer_id).order_by(files.c.path)
    if states is not None:
        _check_states(states)
        query = query.where(files.c.state.in_(tuple(states)))
    rows = conn.execute(query).all()
    if not rows:
        return FILE_STATES_SCHEMA.empty_table()
    by_column = list(zip(*rows))
    arrays = [pa.array(values, type=field.type) for values, field in zip(by_column, FILE_STATES_SCHEMA)]
    return pa.Table.from_arrays(arrays, schema=FILE_STATES_SCHEMA)


def state_counts(conn: Connection, transfer_id: int) -> dict[str, dict[str, int]]:
    """Files, bytes and bytes committed per state (every state present, zeros included)."""
    query = (
        select(
            files.c.state,
            func.count(),
            func.coalesce(func.sum(files.c.size), 0),
            func.coalesce(func.sum(files.c.bytes_done), 0),
        )
        .where(files.c.transfer_id == transfer_id)
        .group_by(files.c.state)
    )
    counts = {state: {"files": 0, "bytes": 0, "bytes_done": 0} for state in FILE_STATES}
    for state, n, size, done in conn.execute(query):
        counts[state] = {"files": int(n), "bytes": int(size), "bytes_done": int(done)}
    return counts


def _check_states(states: Sequence[str]) -> None:
    unknown = set(states) - set(FILE_STATES)
    if unknown:
        raise ValueError(f"unknown file state(s) {sorted(unknown)}; states are {FILE_STATES}")
