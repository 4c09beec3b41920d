"""The journal's bulk rows on SQLite next to a busy thread: one statement per row against many rows per statement.

    .venv/bin/python benchmarks/journal_rows.py [--rows 100000] [--runs 2] [--params 999]

Python's sqlite3 lets go of the interpreter lock around each step of a statement, and
executemany steps once per row, so each row waits to take the lock back from whatever other
thread runs Python. A copy has such threads (movers, pumps, SSH transports). This writes
`--rows` listing rows (path, size, mtime) into the store's own journal table, first with
executemany (one step per row, as the journal did before store/sqlite_rows.py), then with
the statements sqlite_rows.py builds (a few hundred rows each), each time next to one thread
that only runs Python, and the same two without it. Prints per run the wall seconds of the
inserts, the process's CPU seconds, and how far the busy thread got (its loop count): the
lock's hand-over shows as wall time, and as the busy thread's share. `--params` (a list, say
300,999,4000,15000) sets how many parameters one multi-row statement may bind (the store's
choice is 999): each value gets its runs. A fresh SQLite file under /var/tmp per run; no network.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_transfer.store import journal, sqlite_rows
from airflow_transfer.store.schema import PENDING, files

BATCH = 5_000  # rows per transaction, as the store writes a listing (journal.LISTING_BATCH_ROWS)


def _table(conn: sqlite3.Connection) -> None:
    conn.execute(
        f"CREATE TABLE {files.name} (transfer_id INTEGER NOT NULL, path TEXT NOT NULL, size BIGINT NOT NULL, "
        "mtime DOUBLE NOT NULL, state VARCHAR(16) NOT NULL, ranges TEXT NOT NULL, bytes_done BIGINT NOT NULL, "
        "attempts INTEGER NOT NULL, last_error TEXT, checksum VARCHAR(200), updated_at DATETIME NOT NULL, "
        "blocks TEXT, PRIMARY KEY (transfer_id, path))"
    )
    conn.execute(f"CREATE INDEX ix_state ON {files.name} (transfer_id, state) WHERE state <> 'done'")


def one_run(way: str, busy: bool, rows: int, params: int = sqlite_rows.MAX_PARAMS) -> dict:
    folder = tempfile.mkdtemp(prefix="at-journal-rows-", dir="/var/tmp")
    conn = sqlite3.connect(os.path.join(folder, "store.db"), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    _table(conn)
    listing = [(f"d{i // 100:05d}/f{i:07d}", 1024, 1_700_000_000.25) for i in range(rows)]
    stop = threading.Event()
    loops = [0]

    def spin() -> None:
        n = 0
        while not stop.is_set():
            for _ in range(1000):
                n += 1
            loops[0] += 1

    spinner = threading.Thread(target=spin, daemon=True)
    if busy:
        spinner.start()
    cpu0, t0 = time.process_time(), time.monotonic()
    one_per_row = (
        f"INSERT INTO {files.name} ({journal._COLUMNS}) VALUES (?, ?, ?, ?, '{PENDING}', '[]', 0, 0, ?)\n"
        f"{journal._ON_CONFLICT}"
    )
    for start in range(0, rows, BATCH):
        part = listing[start : start + BATCH]
        conn.execute("BEGIN IMMEDIATE")
        if way == "executemany":
            conn.executemany(one_per_row, [(1, p, s, m, "now") for p, s, m in part])
        else:
            for sql, values in sqlite_rows.listing_statements(
                files.name, journal._COLUMNS, journal._ON_CONFLICT, PENDING, 1, "now", part, params
            ):
                conn.execute(sql, values)
        conn.execute("COMMIT")
    seconds, cpu = time.monotonic() - t0, time.process_time() - cpu0
    stop.set()
    if busy:
        spinner.join()
    count = conn.execute(f"SELECT count(*) FROM {files.name}").fetchone()[0]
    conn.close()
    for name in os.listdir(folder):
        os.unlink(os.path.join(folder, name))
    os.rmdir(folder)
    if count != rows:
        raise SystemExit(f"{way}: {count} rows written, not {rows}")
    return {
        "way": way,
        "busy_thread": busy,
        "seconds": round(seconds, 3),
        "cpu_s": round(cpu, 3),
        "busy_loops": loops[0],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--params", default=str(sqlite_rows.MAX_PARAMS), help="parameters per statement, comma-separated")
    args = ap.parse_args()
    sizes = [int(x) for x in args.params.split(",")]
    print(f"SQLite {sqlite3.sqlite_version}, {args.rows} rows, {BATCH} per transaction")
    for run in range(args.runs):
        for busy in (False, True):
            ways = [("executemany", 0)] + [("many rows per statement", n) for n in sizes]
            for way, params in ways:
                r = one_run(way, busy, args.rows, params or sqlite_rows.MAX_PARAMS)
                label = way if not params else f"{way} ({params} params)"
                print(
                    f"run {run} {label:40s} busy thread {'yes' if busy else 'no ':3s} "
                    f"{r['seconds']:7.3f} s wall, {r['cpu_s']:7.3f} s CPU, busy loops {r['busy_loops']}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
