"""The journal's bulk writes on SQLite: many rows per statement, not one statement per row.

Python's sqlite3 module lets go of the interpreter lock around every step of a statement,
and executemany steps once per row. Each row then waits to take the lock back from
whatever other thread runs Python meanwhile (a copy's movers, pumps and SSH transports):
20,000 listing rows inserted by executemany next to one busy thread took 0.26-9.9 s of wall
time, against 0.11-0.55 s as statements of a few hundred rows each (benchmarks/journal_rows.py;
how the lock is handed over varies a lot). A copy's mover that wrote its group's rows
waited as long before asking for the next group. So the listing's rows and the finished files' rows go as multi-row VALUES: the same
rows, the same conflict rule, one step per few hundred rows.

A statement binds at most 999 parameters: SQLite's limit before 3.32, and about where its
cost per row is lowest, since preparing a statement grows faster than its rows (statements
of 5,000 rows, 15,000 parameters, took ten times the CPU per row; benchmarks/journal_rows.py
--params). Values every row shares (the transfer, the time) are bound once, by number (?1, ?2). The finished files'
UPDATE ... FROM needs SQLite 3.33 (2020); an older library keeps executemany.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

UPDATE_FROM = sqlite3.sqlite_version_info >= (3, 33, 0)
MAX_PARAMS = 999


def max_params() -> int:
    """Bound parameters per statement (a function, so that a test can shrink it)."""
    return MAX_PARAMS


def _chunks(rows: Sequence[tuple], per_row: int, shared: int, limit: int | None) -> Iterator[Sequence[tuple]]:
    size = max(1, ((limit or max_params()) - shared) // per_row)
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def _values(count: int, per_row: int, first: int, shape: str) -> str:
    """`count` rows of `shape`, whose {0}, {1}, ... are the row's own parameter numbers,
    counted from `first`."""
    out = []
    number = first
    for _ in range(count):
        out.append(shape.format(*range(number, number + per_row)))
        number += per_row
    return ",".join(out)


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
    (default max_params())."""
    for part in _chunks(rows, 3, 2, limit):
        shape = f"(?1, ?{{0}}, ?{{1}}, ?{{2}}, '{pending}', '[]', 0, 0, ?2)"
        sql = f"INSERT INTO {table} ({columns}) VALUES {_values(len(part), 3, 3, shape)}\n{on_conflict}"
        params: list[Any] = [transfer_id, now]
        for row in part:
            params.extend(row)
        yield sql, params


def done_statements(
    table: str, done: str, transfer_id: int, blocks: str | None, now: Any, rows: Sequence[tuple]
) -> Iterator[tuple[str, list[Any]]]:
    """UPDATEs that mark `rows` (path, size, mtime, checksum, ranges, bytes_done, attempts)
    done, a None mtime or attempts keeping the stored one: (sql, parameters) per statement.
    Each statement's row count is the number of its paths the journal holds."""
    for part in _chunks(rows, 7, 3, None):
        values = _values(len(part), 7, 4, "(?{0}, ?{1}, ?{2}, ?{3}, ?{4}, ?{5}, ?{6})")
        sql = (
            f"UPDATE {table} SET size = v.column2, mtime = COALESCE(v.column3, {table}.mtime), "
            f"checksum = v.column4, ranges = v.column5, bytes_done = v.column6, state = '{done}', "
            f"blocks = ?2, attempts = COALESCE(v.column7, {table}.attempts), updated_at = ?3 "
            f"FROM (VALUES {values}) AS v WHERE {table}.transfer_id = ?1 AND {table}.path = v.column1"
        )
        params: list[Any] = [transfer_id, blocks, now]
        for row in part:
            params.extend(row)
        yield sql, params
