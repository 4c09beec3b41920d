"""Transfers, chunks and the per-file journal, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, timedelta

import pyarrow as pa
import pytest

from airflow_transfer.engine.params import TransferParams
from airflow_transfer.engine.result import ChunkResult
from airflow_transfer.manifest_schema import SCHEMA
from airflow_transfer.store import (
    FILE_STATES_SCHEMA,
    Store,
    StoreError,
    UnknownFileError,
    decode,
    missing_ranges,
)
from airflow_transfer.store.writer import ListingWrite
from tests.support.postgres import postgres_server, store_url  # noqa: F401  (fixtures)


@pytest.fixture
def store(store_url: str) -> Store:
    with Store.open(store_url) as opened:
        yield opened


def _listing(sizes: dict[str, int], mtime: float = 1_700_000_000.25) -> pa.Table:
    return pa.table({"path": list(sizes), "size": list(sizes.values()), "mtime": [mtime] * len(sizes)}, schema=SCHEMA)


def _states(store: Store, transfer_id: int) -> dict[str, dict]:
    return {row["path"]: row for row in store.file_states(transfer_id).to_pylist()}


# --- transfers ---------------------------------------------------------------


def test_begin_creates_a_running_transfer_with_masked_urls(store: Store) -> None:
    record = store.begin_transfer("dag.task", "sftp://alice:pw123@src/data", "file:///dst", algorithm="pcp")
    assert record.state == "running" and not record.resumed and record.attempts == 1
    assert record.src_url == "sftp://alice:***@src/data" and record.dst_url == "file:///dst"
    assert record.algorithm == "pcp"
    assert record.started_at.tzinfo == UTC and record.ended_at is None
    again = store.get_transfer(record.id)
    assert "pw123" not in repr(again)


def test_resume_finds_the_unfinished_transfer_by_key(store: Store) -> None:
    first = store.begin_transfer("k", "sftp://h/a", "file:///b")
    store.record_listing(first.id, _listing({"a": 10}))
    store.mark_range(first.id, "a", 0, 4)

    resumed = store.begin_transfer("k", "sftp://h/a", "file:///b")
    assert resumed.id == first.id and resumed.resumed and resumed.attempts == 2
    assert decode(_states(store, resumed.id)["a"]["ranges"]) == [[0, 4]]

    # a failed transfer is resumed too (an Airflow retry after the engine recorded the failure)
    store.finish_transfer(first.id, "failed", {"failed": [{"path": "a", "error": "timeout"}]})
    after_failure = store.begin_transfer("k", "sftp://h/a", "file:///b")
    assert after_failure.id == first.id and after_failure.state == "running" and after_failure.ended_at is None

    # a succeeded one is history: the next run starts afresh
    store.finish_transfer(first.id, "succeeded", {"files": 1})
    fresh = store.begin_transfer("k", "sftp://h/a", "file:///b")
    assert fresh.id != first.id and not fresh.resumed
    assert store.file_states(fresh.id).num_rows == 0


def test_resume_false_always_starts_a_new_transfer(store: Store) -> None:
    first = store.begin_transfer("k", "sftp://h/a", "file:///b")
    second = store.begin_transfer("k", "sftp://h/a", "file:///b", resume=False)
    assert second.id != first.id and not second.resumed
    # the newest unfinished one is what a later resume picks
    assert store.begin_transfer("k", "sftp://h/a", "file:///b").id == second.id


def test_a_key_reused_for_other_endpoints_is_refused(store: Store) -> None:
    store.begin_transfer("k", "sftp://h/a", "file:///b")
    with pytest.raises(StoreError, match="belongs to unfinished transfer"):
        store.begin_transfer("k", "sftp://h/OTHER", "file:///b")


def test_finish_records_state_end_time_and_summary(store: Store) -> None:
    record = store.begin_transfer("k", "sftp://h/a", "file:///b")
    summary = {"files": 3, "bytes": 30, "throughput_mbit": 12.5, "chunks": [{"id": "c0"}], "failed": []}
    done = store.finish_transfer(record.id, "succeeded", summary)
    assert done.state == "succeeded" and done.summary == summary
    assert done.ended_at is not None and done.ended_at >= done.started_at
    with pytest.raises(ValueError, match="finishes as one of"):
        store.finish_transfer(record.id, "running")
    with pytest.raises(StoreError, match="no transfer with id 999999"):
        store.finish_transfer(999_999, "failed")


def test_chunks_round_trip_from_an_engine_chunk_result(store: Store) -> None:
    record = store.begin_transfer("k", "sftp://h/a", "file:///b")
    result = ChunkResult(
        "small-0", TransferParams(pp=8, p=1, cc=4), files=100, bytes=10_000_000, bytes_moved=10_500_000, seconds=2.0
    )
    start = record.started_at
    first = store.record_chunk(record.id, result, started_at=start, ended_at=start + timedelta(seconds=2))
    second = store.record_chunk(
        record.id,
        {
            "id": "large-0",
            "files": 2,
            "bytes": 4_000_000,
            "pp": 1,
            "p": 4,
            "cc": 2,
            "seconds": 1.0,
            "throughput_mbit": 32.0,
        },
    )
    assert second > first

    loaded = store.get_transfer(record.id)
    assert [c.chunk_id for c in loaded.chunks] == ["small-0", "large-0"]
    small = loaded.chunks[0]
    assert (small.pp, small.p, small.cc, small.files, small.bytes) == (8, 1, 4, 100, 10_000_000)
    assert small.bytes_moved == 10_500_000
    assert small.throughput_mbit == pytest.approx(result.throughput_mbit)  # exact, not summary()'s rounding
    assert small.ended_at - small.started_at == timedelta(seconds=2)
    assert loaded.chunks[1].bytes_moved == 4_000_000 and loaded.chunks[1].started_at is None
    assert store.get_transfer(record.id, with_chunks=False).chunks == ()
    assert store.get_transfer(424242) is None


def test_list_transfers_filters_by_state_and_literal_key_prefix(store: Store) -> None:
    ids = {}
    for key in ("nightly/a", "nightly/b", "nightly_x", "adhoc/c", "100%/d"):
        ids[key] = store.begin_transfer(key, "sftp://h/" + key, "file:///d").id
    store.finish_transfer(ids["nightly/a"], "succeeded")
    store.finish_transfer(ids["adhoc/c"], "failed")

    assert [t.key for t in store.list_transfers(key_prefix="nightly/")] == ["nightly/b", "nightly/a"]
    # '_' and '%' are characters of the key, not LIKE wildcards
    assert [t.key for t in store.list_transfers(key_prefix="nightly_")] == ["nightly_x"]
    assert [t.key for t in store.list_transfers(key_prefix="100%")] == ["100%/d"]
    assert {t.key for t in store.list_transfers(state="running")} == {"nightly/b", "nightly_x", "100%/d"}
    assert {t.key for t in store.list_transfers(state=["succeeded", "failed"])} == {"nightly/a", "adhoc/c"}
    assert [t.key for t in store.list_transfers(state="running", key_prefix="nightly")] == ["nightly_x", "nightly/b"]
    page = store.list_transfers(limit=2, offset=1)
    assert [t.id for t in page] == [ids["adhoc/c"], ids["nightly_x"]]
    with pytest.raises(ValueError, match="unknown transfer state"):
        store.list_transfers(state="done")


# --- journal -----------------------------------------------------------------


def test_listing_round_trip_and_states(store: Store) -> None:
    record = store.begin_transfer("k", "sftp://h/a", "file:///b")
    assert store.record_listing(record.id, _listing({"d/one": 100, "d/two": 0, "three": 5 * 2**40})) == 3

    table = store.file_states(record.id)
    assert table.schema == FILE_STATES_SCHEMA
    assert table.column("path").to_pylist() == ["d/one", "d/two", "three"]  # sorted by path
    assert table.column("size").to_pylist() == [100, 0, 5 * 2**40]
    assert set(table.column("state").to_pylist()) == {"pending"}
    assert table.column("mtime").to_pylist() == [1_700_000_000.25] * 3

    store.mark_range(record.id, "d/one", 50, 25)
    store.mark_range(record.id, "d/one", 0, 50)
    store.mark_failed(record.id, "d/one", "connection reset by peer", attempts=1)
    store.mark_done(record.id, "d/two", 0, checksum="sha256:e3b0")
    store.mark_range(record.id, "three", 2**40, 2**30)

    rows = _states(store, record.id)
    one = rows["d/one"]
    assert (one["state"], one["attempts"], one["last_error"]) == ("failed", 1, "connection reset by peer")
    assert decode(one["ranges"]) == [[0, 75]] and one["bytes_done"] == 75
    assert missing_ranges(one["size"], decode(one["ranges"])) == [[75, 100]]
    assert (rows["d/two"]["state"], rows["d/two"]["checksum"], rows["d/two"]["ranges"]) == ("done", "sha256:e3b0", "[]")
    assert rows["three"]["state"] == "partial" and decode(rows["three"]["ranges"]) == [[2**40, 2**40 + 2**30]]

    # a failed file that gets a new range is being retried: partial again; attempts count up
    store.mark_range(record.id, "d/one", 75, 5)
    store.mark_failed(record.id, "d/one", "timeout")
    rows = _states(store, record.id)
    assert rows["d/one"]["attempts"] == 2 and rows["d/one"]["last_error"] == "timeout"
    store.mark_range(record.id, "d/one", 80, 20)
    store.mark_done(record.id, "d/one", 100, mtime=1_700_000_001.5, checksum="md5:abc")
    one = _states(store, record.id)["d/one"]
    assert (one["state"], one["ranges"], one["bytes_done"], one["mtime"]) == ("done", "[[0,100]]", 100, 1_700_000_001.5)

    assert store.file_states(record.id, "done").column("path").to_pylist() == ["d/one", "d/two"]
    assert store.file_states(record.id, ("pending", "partial")).column("path").to_pylist() == ["three"]
    assert store.file_states(record.id, "failed").num_rows == 0
    with pytest.raises(ValueError, match="unknown file state"):
        store.file_states(record.id, "finished")

    counts = store.journal_counts(record.id)
    assert counts["done"] == {"files": 2, "bytes": 100, "bytes_done": 100}
    assert counts["partial"] == {"files": 1, "bytes": 5 * 2**40, "bytes_done": 2**30}
    assert counts["pending"]["files"] == 0 and counts["failed"]["files"] == 0


def test_listing_again_keeps_progress_but_restarts_files_that_changed(store: Store) -> None:
    record = store.begin_transfer("k", "sftp://h/a", "file:///b")
    store.record_listing(record.id, _listing({"same": 10, "grown": 10, "touched": 10, "finished": 10}))
    for path in ("same", "grown", "touched"):
        store.mark_range(record.id, path, 0, 5)
    store.mark_done(record.id, "finished", 10)

    relisted = _listing({"same": 10, "grown": 20, "touched": 10, "finished": 10, "new": 7})
    relisted = relisted.set_column(
        2, "mtime", pa.array([1_700_000_000.25, 1_700_000_000.25, 1_800_000_000.0, 1_700_000_000.25, 1.0])
    )
    store.record_listing(record.id, relisted)
    rows = _states(store, record.id)
    assert (rows["same"]["state"], rows["same"]["ranges"]) == ("partial", "[[0,5]]")
    assert rows["finished"]["state"] == "done"
    for changed in ("grown", "touched"):
        assert (rows[changed]["state"], rows[changed]["ranges"], rows[changed]["bytes_done"]) == ("pending", "[]", 0)
    assert rows["grown"]["size"] == 20 and rows["new"]["state"] == "pending"


def test_listing_is_validated(store: Store) -> None:
    record = store.begin_transfer("k", "sftp://h/a", "file:///b")
    with pytest.raises(ValueError, match="duplicate paths"):
        store.record_listing(
            record.id, _listing({"a": 1}).append_column("x", pa.array([0])).select([0, 1, 2]).take([0, 0])
        )
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['mtime'\]"):
        store.record_listing(record.id, pa.table({"path": ["a"], "size": [1]}))
    # extra columns (a checksum) and int32 sizes are fine
    extra = pa.table({"path": ["a"], "size": pa.array([1], pa.int32()), "mtime": [0.0], "checksum": ["md5:x"]})
    assert store.record_listing(record.id, extra) == 1


def test_a_large_listing_is_bulk_inserted_quickly(store: Store) -> None:
    record = store.begin_transfer("k", "sftp://h/a", "file:///b")
    n = 100_000
    table = pa.table(
        {
            "path": [f"dir{i % 100}/file{i:06d}" for i in range(n)],
            "size": pa.array(range(n), pa.int64()),
            "mtime": pa.array([1.0] * n),
        },
        schema=SCHEMA,
    )
    started = time.perf_counter()
    store.record_listing(record.id, table)
    seconds = time.perf_counter() - started
    counts = store.journal_counts(record.id)
    assert counts["pending"]["files"] == n and counts["pending"]["bytes"] == n * (n - 1) // 2
    # ~0.5 s (SQLite) / ~1.5 s (PostgreSQL) on a shared 2-core machine; Core executemany took ~4x that
    assert seconds < 15, f"100k-row listing took {seconds:.1f} s"


def test_unknown_paths_are_reported_and_the_known_ones_still_written(store: Store) -> None:
    record = store.begin_transfer("k", "sftp://h/a", "file:///b")
    store.record_listing(record.id, _listing({"known": 10}))
    with pytest.raises(UnknownFileError, match="no journal entry for 'ghost'"):
        store.mark_range(record.id, "ghost", 0, 1)
    writer = store.journal_writer(record.id, background=False)
    writer.mark_range("known", 0, 10)
    writer.mark_done("ghost", 3)
    with pytest.raises(UnknownFileError, match="'ghost'"):
        writer.flush()
    assert _states(store, record.id)["known"]["bytes_done"] == 10
    writer.close()


def _until(cond, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_full_batch_is_written_by_the_writers_thread_not_the_reporters(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bundle worker reports a group's files and goes on to ask for the next group: the
    transaction that writes them is the writer's own thread's, unless batches pile up (the
    listing test below: then the reporter waits for the database)."""
    record = store.begin_transfer("k", "sftp://h/a", "file:///b")
    store.record_listing(record.id, _listing({f"f{i}": 7 for i in range(300)}))
    wrote_in: list[str] = []
    real = store.apply_journal_events

    def spy(transfer_id: int, events: list) -> list:
        wrote_in.append(threading.current_thread().name)
        return real(transfer_id, events)

    monkeypatch.setattr(store, "apply_journal_events", spy)
    with store.journal_writer(record.id, max_events=100, max_delay_ms=60_000) as writer:
        for start in (0, 100, 200):  # three groups of a full batch each
            writer.mark_done_many([(f"f{i}", 7, None, 1) for i in range(start, start + 100)])
        _until(lambda: writer.pending == 0)
        assert wrote_in and all(name.startswith("journal-writer") for name in wrote_in), wrote_in
    assert all(row["state"] == "done" for row in _states(store, record.id).values())

    wrote_in.clear()  # without a thread of its own, the reporter writes a full batch itself
    inline = store.journal_writer(record.id, max_events=100, background=False)
    inline.mark_done_many([(f"f{i}", 7, None, 2) for i in range(100)])
    assert wrote_in == [threading.current_thread().name] and inline.pending == 0
    inline.close()


def test_journal_writer_batches_by_count_and_by_age(store: Store) -> None:
    record = store.begin_transfer("k", "sftp://h/a", "file:///b")
    store.record_listing(record.id, _listing({f"f{i}": 1000 for i in range(10)}))

    writer = store.journal_writer(record.id, max_events=50, max_delay_ms=60_000)
    for i in range(10):
        for offset in range(0, 1000, 100):  # 100 ranges
            writer.mark_range(f"f{i}", offset, 100)
    _until(lambda: writer.flushes >= 1 and writer.pending < 50)  # the writer's thread wrote the full batches
    assert 1 <= writer.flushes <= 2  # 50 or more per transaction, not 100 transactions
    left = writer.pending
    writer.mark_done("f0", 1000, checksum="xxh128:00")
    assert writer.pending == left + 1 and _states(store, record.id)["f0"]["state"] == "partial"
    writer.close()
    rows = _states(store, record.id)
    assert rows["f0"]["state"] == "done"
    assert all(rows[f"f{i}"]["ranges"] == "[[0,1000]]" for i in range(10))

    # by age: a quiet engine's last report is written by the background thread
    aged = store.journal_writer(record.id, max_events=10_000, max_delay_ms=100)
    aged.mark_failed("f9", "disk full")
    deadline = time.monotonic() + 10
    while aged.flushes == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert aged.flushes == 1 and aged.pending == 0
    assert _states(store, record.id)["f9"]["state"] == "failed"
    aged.close()
    with pytest.raises(StoreError, match="is closed"):
        aged.mark_range("f9", 0, 1)


def test_journal_writer_is_safe_from_many_threads(store: Store) -> None:
    record = store.begin_transfer("k", "sftp://h/a", "file:///b")
    store.record_listing(record.id, _listing({"big": 64 * 1000, **{f"small{i}": 10 for i in range(40)}}))
    with store.journal_writer(record.id, max_events=25, max_delay_ms=20) as writer:

        def range_worker(stream: int) -> None:  # p=8 connections writing interleaved ranges of one file
            for block in range(stream, 64, 8):
                writer.mark_range("big", block * 1000, 1000)

        def file_worker(first: int) -> None:  # cc connections finishing small files
            for i in range(first, 40, 4):
                writer.mark_range(f"small{i}", 0, 10)
                writer.mark_done(f"small{i}", 10)

        threads = [threading.Thread(target=range_worker, args=(s,)) for s in range(8)]
        threads += [threading.Thread(target=file_worker, args=(f,)) for f in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    rows = _states(store, record.id)
    assert rows["big"]["ranges"] == "[[0,64000]]" and rows["big"]["state"] == "partial"
    assert all(rows[f"small{i}"]["state"] == "done" for i in range(40))


def test_invalid_reports_are_rejected_at_once(store: Store) -> None:
    record = store.begin_transfer("k", "sftp://h/a", "file:///b")
    with store.journal_writer(record.id, background=False) as writer:
        with pytest.raises(ValueError, match="must be >= 0"):
            writer.mark_range("a", -1, 10)
        with pytest.raises(ValueError, match="negative"):
            writer.mark_done("a", -5)
        assert writer.pending == 0


def test_long_error_texts_are_truncated(store: Store) -> None:
    record = store.begin_transfer("k", "sftp://h/a", "file:///b")
    store.record_listing(record.id, _listing({"a": 1}))
    store.mark_failed(record.id, "a", "x" * 10_000)
    assert len(_states(store, record.id)["a"]["last_error"]) == 2_000


def test_masked_store_url_never_contains_the_password(store_url: str) -> None:
    # trust auth ignores the password, so PostgreSQL still opens; SQLite has none to hide
    url = store_url.replace("postgres@", "postgres:Sup3rS3cret@") if "postgresql" in store_url else store_url
    with Store.open(url) as opened:
        for text in (opened.masked_url, repr(opened)):
            assert "Sup3rS3cret" not in text
        if "postgresql" in url:
            assert "postgres:***@" in opened.masked_url
        record = opened.begin_transfer("k", "sftp://u:Sup3rS3cret@h/a", "ftp://v:Sup3rS3cret@g/b")
        assert "Sup3rS3cret" not in repr(opened.get_transfer(record.id))


def test_rows_for_a_missing_transfer_are_refused_clearly(store: Store) -> None:
    with pytest.raises(StoreError, match="no transfer with id 777"):
        store.record_listing(777, _listing({"a": 1}))
    with pytest.raises(StoreError, match="no transfer with id 777"):
        store.record_chunk(777, {"id": "c", "files": 1, "bytes": 1, "pp": 1, "p": 1, "cc": 1, "seconds": 1.0})


def test_a_forked_child_gets_its_own_connections(store: Store) -> None:
    """LocalExecutor/Celery fork workers: the child must not talk over the parent's pooled sockets."""
    record = store.begin_transfer("k", "sftp://h/a", "file:///b")
    store.record_listing(record.id, _listing({"parent": 10, "child": 10}))
    store.mark_range(record.id, "parent", 0, 5)  # the parent's pool now holds a live connection
    assert store.engine.pool.checkedin() >= 1
    parent_session = _session_id(store)
    pid = os.fork()
    if pid == 0:  # child: report through the exit status only
        code = 3
        try:
            if store.engine.pool.checkedin() != 0:
                code = 4  # inherited the parent's pooled connections
            elif _session_id(store) == parent_session:
                code = 5  # talking over the parent's database session
            else:
                store.mark_done(record.id, "child", 10)
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    store.mark_range(record.id, "parent", 5, 5)  # and the parent's connection still works
    rows = _states(store, record.id)
    assert rows["child"]["state"] == "done" and rows["parent"]["ranges"] == "[[0,10]]"


def _session_id(store: Store) -> object:
    if store.backend == "postgresql":
        return store.read(lambda conn: conn.exec_driver_sql("SELECT pg_backend_pid()").scalar())
    return store.read(lambda conn: id(conn.connection.dbapi_connection))


def test_in_memory_sqlite_is_refused() -> None:
    with pytest.raises(StoreError, match="in-memory SQLite"):
        Store.open("sqlite://")


def test_over_long_paths_are_refused_clearly_on_postgresql_and_kept_on_sqlite(store: Store) -> None:
    record = store.begin_transfer("k", "sftp://h/a", "file:///b")
    long_path = "/".join(f"{i:04d}" + "x9Qz#" * 40 for i in range(15))[:3000]
    listing = _listing({"short": 1, long_path: 2})
    if store.backend == "postgresql":
        with pytest.raises(StoreError, match=r"path of 3000 bytes is too long for a PostgreSQL store"):
            store.record_listing(record.id, listing)
    else:
        store.record_listing(record.id, listing)
        assert long_path in _states(store, record.id)


# --- a listing written behind the copy's start ------------------------------------


def test_a_listing_written_behind_is_waited_for_by_the_first_write(store: Store) -> None:
    record = store.begin_transfer("k", "sftp://h/a", "file:///b")
    release = threading.Event()
    names = {f"d/f{i:05d}": 7 for i in range(3000)}
    # The listing's rows are held back until `release`: reports made meanwhile are kept, and a
    # transfer thread is never made to write them (it would wait for the listing).
    write = ListingWrite(lambda: (release.wait(30), store.record_listing(record.id, _listing(names))))
    writer = store.journal_writer(record.id, max_events=100, max_delay_ms=60_000, after=write)
    writer.mark_done_many([(name, 7, None, 1) for name in list(names)[:300]])  # three batches' worth
    assert writer.flushes == 0 and writer.pending == 300
    assert not write.done()
    release.set()
    writer.mark_done_many([(name, 7, None, 1) for name in list(names)[300:]])  # over the backlog: waits
    assert writer.flushes >= 1 and write.done()
    writer.close()
    write.wait()
    states = _states(store, record.id)
    assert len(states) == 3000 and all(row["state"] == "done" for row in states.values())


def test_a_listing_that_fails_behind_fails_the_first_write(store: Store) -> None:
    record = store.begin_transfer("k", "sftp://h/a", "file:///b")
    store.record_listing(record.id, _listing({"a": 1}))
    behind = store.record_listing_behind(777, _listing({"b": 2}))  # no such transfer
    writer = store.journal_writer(record.id, background=False, after=behind)
    writer.mark_done("a", 1)
    with pytest.raises(StoreError, match="no transfer with id 777"):
        writer.flush()
    assert writer.pending == 1  # kept for a later write, as after any failed write
    with pytest.raises(StoreError, match="no transfer with id 777"):
        behind.wait()
    assert _states(store, record.id)["a"]["state"] == "pending"


def test_a_listing_written_behind_is_checked_before_it_is_handed_to_the_thread(store: Store) -> None:
    record = store.begin_transfer("k", "sftp://h/a", "file:///b")
    bad = pa.table({"path": ["x", "x"], "size": [1, 1], "mtime": [0.0, 0.0]}, schema=SCHEMA)
    with pytest.raises(ValueError, match="duplicate paths"):
        store.record_listing_behind(record.id, bad)
