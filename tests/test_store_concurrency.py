"""Twenty real processes open a NEW store and write one transfer's journal at the same time.

What must hold on both backends: no "database is locked" (or any) failure,
one migration, one transfer for the shared key, and not a single lost row or
range — including ranges of the same files written by all twenty at once
(a read-modify-write that loses updates unless rows are locked).

The workers are real processes forked from the test process, so each has
its own connections, locks and pool, but they skip re-importing SQLAlchemy
and pyarrow (~2 s of CPU each on this 2-core machine: twenty fresh
interpreters took ~55 s per backend, forks take a few seconds). A barrier
releases them together.
"""

from __future__ import annotations

import multiprocessing
import traceback

from tests.support.postgres import postgres_server, store_url  # noqa: F401  (fixtures)

WORKERS = 20
SHARED_FILES = 8  # every worker writes one 100-byte range of each
RANGE = 100
OWN_FILES = 25  # each worker's own files, reported through the buffered writer
OWN_SIZE = 1000


def _listing(workers: int):
    import pyarrow as pa

    from airflow_transfer.manifest_schema import SCHEMA

    paths = [f"shared/{i}" for i in range(SHARED_FILES)]
    sizes = [workers * RANGE] * SHARED_FILES
    for w in range(workers):
        paths += [f"w{w:02d}/f{j:02d}" for j in range(OWN_FILES)] + [f"w{w:02d}/bad"]
        sizes += [OWN_SIZE] * OWN_FILES + [10]
    return pa.table({"path": paths, "size": sizes, "mtime": [1.0] * len(paths)}, schema=SCHEMA)


def _work(url: str, key: str, index: int, workers: int) -> dict:
    from airflow_transfer.store import Store

    listing = _listing(workers)
    with Store.open(url) as store:  # every worker migrates a NEW store at the same moment
        record = store.begin_transfer(key, "sftp://src/data", "file:///dst")
        store.record_listing(record.id, listing)
        # unbuffered, contended: all workers add ranges to the same rows
        for i in range(SHARED_FILES):
            store.mark_range(record.id, f"shared/{i}", index * RANGE, RANGE)
        with store.journal_writer(record.id, max_events=5, max_delay_ms=20) as writer:
            for j in range(OWN_FILES):
                path = f"w{index:02d}/f{j:02d}"
                writer.mark_range(path, OWN_SIZE // 2, OWN_SIZE // 2)
                writer.mark_range(path, 0, OWN_SIZE // 2)
                writer.mark_done(path, OWN_SIZE, checksum=f"md5:{index}{j}")
            writer.mark_failed(f"w{index:02d}/bad", "permission denied", attempts=3)
        store.record_chunk(
            record.id,
            {
                "id": f"chunk-{index}",
                "files": OWN_FILES,
                "bytes": OWN_FILES * OWN_SIZE,
                "pp": 1,
                "p": 1,
                "cc": 1,
                "seconds": 0.5,
            },
        )
        return {"transfer_id": record.id, "resumed": record.resumed, "flushes": writer.flushes}


def _child(url: str, key: str, index: int, workers: int, barrier, results) -> None:
    try:
        barrier.wait(timeout=60)
        results.put((index, "ok", _work(url, key, index, workers)))
    except BaseException:
        results.put((index, "error", traceback.format_exc()))
        raise


def _run_workers(url: str) -> list[dict]:
    import airflow_transfer.store  # noqa: F401  imported once here, inherited by every fork

    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [
        ctx.Process(target=_child, args=(url, "shared-key", w, WORKERS, barrier, results), daemon=True)
        for w in range(WORKERS)
    ]
    for proc in procs:
        proc.start()
    reports = {}
    for _ in procs:
        index, status, payload = results.get(timeout=120)
        assert "database is locked" not in str(payload), payload
        assert status == "ok", f"worker {index} failed:\n{payload}"
        reports[index] = payload
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    return [reports[w] for w in range(WORKERS)]


def test_twenty_processes_write_one_journal_without_lock_errors_or_lost_rows(store_url: str) -> None:
    from sqlalchemy import func, select

    from airflow_transfer.store import Store, decode
    from airflow_transfer.store.migrations import latest_version
    from airflow_transfer.store.schema import schema_version

    outputs = _run_workers(store_url)

    assert len({o["transfer_id"] for o in outputs}) == 1, outputs  # one transfer for the shared key
    assert sorted(o["resumed"] for o in outputs) == [False] + [True] * (WORKERS - 1)
    # batched, not one transaction per event (the writer's thread may merge batches: fewer still)
    assert all(1 <= o["flushes"] <= OWN_FILES * 3 // 2 for o in outputs), outputs
    transfer_id = outputs[0]["transfer_id"]
    with Store.open(store_url) as store:
        assert (
            store.read(lambda c: c.execute(select(func.count()).select_from(schema_version)).scalar())
            == latest_version()
        )
        record = store.get_transfer(transfer_id)
        assert record.attempts == WORKERS
        assert sorted(c.chunk_id for c in record.chunks) == sorted(f"chunk-{w}" for w in range(WORKERS))
        assert len(store.list_transfers()) == 1

        rows = {r["path"]: r for r in store.file_states(transfer_id).to_pylist()}
        assert len(rows) == SHARED_FILES + WORKERS * (OWN_FILES + 1)
        for i in range(SHARED_FILES):  # every worker's range made it into every shared file
            assert decode(rows[f"shared/{i}"]["ranges"]) == [[0, WORKERS * RANGE]], rows[f"shared/{i}"]
            assert rows[f"shared/{i}"]["state"] == "partial"
        for w in range(WORKERS):
            for j in range(OWN_FILES):
                row = rows[f"w{w:02d}/f{j:02d}"]
                assert (row["state"], row["ranges"], row["checksum"]) == ("done", f"[[0,{OWN_SIZE}]]", f"md5:{w}{j}")
            bad = rows[f"w{w:02d}/bad"]
            assert (bad["state"], bad["attempts"], bad["last_error"]) == ("failed", 3, "permission denied")
