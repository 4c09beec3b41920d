"""The journal's bulk writes on SQLite: many rows per statement, not one statement per row.

Python's sqlite3 module lets go of the interpreter lock around every step of a statement,
and executemany steps once per row. Each row then waits to take the lock back from whatever
other thread runs Python meanwhile (a copy's movers, pumps and SSH transports): 20,000
listing rows inserted by executemany next to one busy thread took 0.26-9.9 s of wall time,
against 0.11-0.55 s as statements of a few hundred rows each (benchmarks/journal_rows.py;
how the lock is handed over varies a lot). A copy's mover that wrote its group's rows waited
as long before asking for the next group. So the listing's rows and the finished files' rows
go as multi-row VALUES: the same rows, the same conflict rule, one step per few hundred rows.

A statement binds at most 999 parameters: SQLite's limit before 3.32, and about where its
cost per row is lowest, since preparing a statement grows faster than its rows (statements
of 5,000 rows, 15,000 parameters, took ten times the CPU per row; benchmarks/journal_rows.py
--params). Values every row shares (the transfer, the time) are bound once, by number (?1,
?2). A statement's text depends only on its number of rows, so each is built once. The
finished files' UPDATE ... FROM needs SQLite 3.33 (2020); an older library keeps executemany.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

UPDATE_FROM = sqlite3.sqlite_version_info >= (3, 33, 0)
MAX_PARAMS = 999  # read at each call: a test may lower it


def _chunks(rows: Sequence[tuple], per_row: int, shared: int, limit: int | None) -> Iterator[Sequence[tuple]]:
    size = max(1, ((limit or MAX_PARAMS) - shared) // per_row)
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def _values(count: int, per_row: int, first: int, shape: str) -> str:
    """`count` rows of `shape`, whose {0}, {1}, ... are the row's own parameter numbers,
    counted from `first`."""
    return ",".join(shape.format(*range(first + i * per_row, first + (i + 1) * per_row)) for i in range(count))


@functools.lru_cache(maxsize=32)
def _listing_sql(table: str, columns: str, on_conflict: str, pending: str, count: int) -> str:
    shape = f"(?1, ?{{0}}, ?{{1}}, ?{{2}}, '{pending}', '[]', 0, 0, ?2)"
    return f"INSERT INTO {table} ({columns}) VALUES {_values(count, 3, 3, shape)}\n{on_conflict}"


@functools.lru_cache(maxsize=32)
def _done_sql(table: str, done: str, count: int) -> str:
    values = _values(count, 7, 4, "(?{0}, ?{1}, ?{2}, ?{3}, ?{4}, ?{5}, ?{6})")
    return (
        f"UPDATE {table} SET size = v.column2, mtime = COALESCE(v.column3, {table}.mtime), "
        f"checksum = v.column4, ranges = v.column5, bytes_done = v.column6, state = '{done}', "
        f"blocks = ?2, attempts = COALESCE(v.column7, {table}.attempts), updated_at = ?3 "
        f"FROM (VALUES {values}) AS v WHERE {table}.transfer_id = ?1 AND {table}.path = v.column1"
    )


def _params(shared: list[Any], part: Sequence[tuple]) -> list[Any]:
    for row in part:
        shared.extend(row)
    return shared


def listing_statements(
    table: str,
    columns: str,
    on_conflict: str,
    pending: str,
    transfer_id: int,
    now: Any,
    rows: Sequence[tuple],
    limit: int | None = None,
) -> Iterator[tuple[str, list[Any]]]:
    """INSERTs of `rows` (path, size, mtime) as pending files of `transfer_id`, each row under
    `on_conflict`: (sql, parameters) per statement, each binding at most `limit` parameters
    (default MAX_PARAMS)."""
    for part in _chunks(rows, 3, 2, limit):
        yield _listing_sql(table, columns, on_conflict, pending, len(part)), _params([transfer_id, now], part)


def done_statements(
    table: str, done: str, transfer_id: int, blocks: str | None, now: Any, rows: Sequence[tuple]
) -> Iterator[tuple[str, list[Any]]]:
    """UPDATEs that mark `rows` (path, size, mtime, checksum, ranges, bytes_done, attempts)
    done, a None mtime or attempts keeping the stored one: (sql, parameters) per statement.
    Each statement's row count is the number of its paths the journal holds."""
    for part in _chunks(rows, 7, 3, None):
        yield _done_sql(table, done, len(part)), _params([transfer_id, blocks, now], part)
