"""Client time of journaling finished small files: what the store costs per file done.

    .venv/bin/python benchmarks/journal_done.py [--files 20000] [--batch 2000] [--reps 3] [--backend sqlite postgresql]

Records a listing of N files in a fresh store, then reports every file as the engine
does for a small file (``mark_restart`` then ``mark_done`` with mtime and attempts)
through a JournalWriter flushing every ``--batch`` events, and prints the median
microseconds per file of that second phase (event calls, flushes and commits) over
the repetitions: wall, and this process's CPU (SQLite's own work included, it runs
in process). An odd batch size splits a file over two flushes, as flushes on a
timer do. SQLite uses a file under /tmp; PostgreSQL a throwaway database on the
server of the test suite (AIRFLOW_TRANSFER_TEST_POSTGRES_URL, default
127.0.0.1:5432, user postgres), dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pyarrow as pa

from airflow_transfer.manifest_schema import SCHEMA
from airflow_transfer.store import Store
from tests.support.postgres import ADMIN_URL_ENV, DEFAULT_ADMIN_URL, PostgresServer


def _listing(n: int) -> pa.Table:
    paths = [f"dir{i // 1000:03d}/file{i:06d}.bin" for i in range(n)]
    return pa.table({"path": paths, "size": [1024] * n, "mtime": [1_700_000_000.5] * n}, schema=SCHEMA)


def _one_run(url: str, listing: pa.Table, batch: int) -> tuple[float, float]:
    """Seconds (wall, this process's CPU) spent reporting every file of ``listing`` done."""
    with Store.open(url) as store:
        record = store.begin_transfer("bench.journal_done", "sftp://src/data", "file:///dst", resume=False)
        store.record_listing(record.id, listing)
        paths = listing["path"].to_pylist()
        t0, c0 = time.perf_counter(), time.process_time()
        with store.journal_writer(record.id, max_events=batch, background=False) as writer:
            for path in paths:
                writer.mark_restart(path)
                writer.mark_done(path, 1024, 1_700_000_000.5, attempts=1)
        seconds = time.perf_counter() - t0, time.process_time() - c0
        done = store.journal_counts(record.id)["done"]["files"]
        if done != len(paths):
            raise SystemExit(f"only {done} of {len(paths)} files are done")
        return seconds


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=2_000, help="events per flush")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--backend", nargs="+", choices=("sqlite", "postgresql"), default=["sqlite", "postgresql"])
    args = ap.parse_args()
    listing = _listing(args.files)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for backend in args.backend:
        server = None
        times = []
        try:
            for _ in range(args.reps):
                if backend == "sqlite":
                    with tempfile.TemporaryDirectory(prefix="journal-done-", dir="/tmp") as tmp:
                        times.append(_one_run(f"sqlite:///{tmp}/store.db", listing, args.batch))
                else:
                    server = server or PostgresServer(os.environ.get(ADMIN_URL_ENV, DEFAULT_ADMIN_URL))
                    times.append(_one_run(server.create_database(), listing, args.batch))
        finally:
            if server is not None:
                server.drop_all()
        wall = [t / args.files * 1e6 for t, _ in times]
        cpu = [c / args.files * 1e6 for _, c in times]
        runs = " ".join(f"{us:.1f}" for us in wall)
        print(
            f"{backend:<10} {statistics.median(wall):7.1f} us/file wall, {statistics.median(cpu):7.1f} us/file "
            f"client CPU (medians of {args.reps}; wall runs: {runs})"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
