"""Every transfer ends succeeded, failed (with its error) or interrupted, whatever ends it, and a
copy whose process died without a word shows as lost once its lease ran out (docs/durability.md,
"How a transfer ends"). Real sshd, real CLI processes and signals, real store, real Airflow."""

from __future__ import annotations

import signal
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from airflow_transfer.errors import HostKeyError, TransferError
from airflow_transfer.job import CopyRequest, run_copy, transfer_end
from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.store import Store, TransferRecord
from airflow_transfer.store import schema as S
from airflow_transfer.store.coltypes import utcnow
from airflow_transfer.store.migrations import STEPS, migrate
from tests.support.airflow_env import REPO, run_dag, sftp_conn_env, start_dag
from tests.support.cli import kill_cli_when, run_cli, ssh_args
from tests.support.data import make_tree, tree_digest
from tests.support.postgres import postgres_server, store_url  # noqa: F401 - fixtures
from tests.support.sshd import chown_to_user, free_port

LIFECYCLE_DAGS = REPO / "tests" / "dags" / "lifecycle.py"


@pytest.fixture(scope="module")
def many_files(test_base: Path) -> Path:
    """A tree whose copy lasts long enough to be signalled while it runs (read only: shared)."""
    return make_tree(test_base / "lifecycle-src", small=2500, seed=61)


@pytest.fixture
def store(tmp_path: Path):
    with Store.open(f"sqlite:///{tmp_path / 'store.db'}") as opened:
        yield opened


def _only(store: Store, key: str) -> TransferRecord:
    records = [r for r in store.list_transfers(key_prefix=key) if r.key == key]
    assert len(records) == 1, records
    return records[0]


def _done_files(store: Store, key: str) -> int:
    records = [r for r in store.list_transfers(key_prefix=key) if r.key == key]
    return store.journal_counts(records[0].id).get("done", {}).get("files", 0) if records else 0


# --- failures ---------------------------------------------------------------------


def test_refused_key_ends_failed_with_the_error_in_the_store_and_the_api(sshd, local_dir, remote_dir, store):
    src = make_tree(local_dir / "src", small=5, seed=62)
    res = run_cli(
        "copy",
        str(src),
        sshd.url(f"{remote_dir}/dst"),
        "--store",
        store.masked_url,
        "--transfer-key",
        "refused",
        "--identity",
        str(sshd.other_key),
        "--known-hosts",
        str(sshd.known_hosts),
    )
    assert res.code == 1 and "authentication" in res.err, res.err
    record = _only(store, "refused")
    assert record.state == "failed" and record.ended_at is not None
    assert record.error["kind"] == "auth" and record.error["type"] == "AuthError"
    assert record.error["where"] and record.error["todo"]  # what, where, what to do
    assert record.error["message"] in res.err  # the line the user saw is the line the store keeps

    # What /api/transfers/<id> and /api/transfers return, and the page /transfers/<id> renders
    # (test_ui_server serves them from a real api-server, behind Airflow's authentication).
    from airflow_transfer.plugins import views
    from airflow_transfer.plugins.app import jinja_env, transfer_page

    api = views.transfer_detail(store, record.id)
    listed = views.list_transfers(store, state="failed")
    page = transfer_page(jinja_env(), api)
    shown = api["transfer"]
    assert shown["state"] == "failed" and shown["error"] == record.error and api["chunks"] == []
    assert shown["duration_s"] == (record.ended_at - record.started_at).total_seconds()  # stopped counting
    assert [t["id"] for t in listed["transfers"]] == [record.id]
    assert "no chunks recorded yet" not in page and "No chunk ran" in page
    assert record.error["what"].replace("'", "&#39;") in page


def test_unknown_host_key_on_a_download_ends_failed_before_anything_was_listed(sshd, local_dir, remote_dir, store):
    remote = make_tree(remote_dir / "src", small=3, seed=63)
    chown_to_user(remote, sshd.user)
    empty = local_dir / "known_hosts"
    empty.write_text("")
    res = run_cli(
        "copy",
        sshd.url(str(remote)),
        str(local_dir / "dst"),
        "--store",
        store.masked_url,
        "--transfer-key",
        "unknown-key",
        "--identity",
        str(sshd.client_key),
        "--known-hosts",
        str(empty),
    )
    assert res.code == 1 and "not known" in res.err, res.err
    record = _only(store, "unknown-key")
    assert record.state == "failed" and record.error["kind"] == "host_key" and "not known" in record.error["what"]
    # it failed on the first contact, before any listing
    assert sum(c["files"] for c in store.journal_counts(record.id).values()) == 0


def test_destination_error_ends_failed_and_the_exception_says_how_it_was_recorded(local_dir, store):
    src = make_tree(local_dir / "src", small=3, seed=64)
    blocker = local_dir / "not-a-dir"
    blocker.write_text("a file where the destination's parent should be")
    req = CopyRequest(
        Endpoint("file", str(src)),
        Endpoint("file", str(blocker / "dst")),
        store_url=store.masked_url,
        transfer_key="dst-error",
    )
    with pytest.raises(TransferError) as info:
        run_copy(req)
    record = _only(store, "dst-error")
    assert record.state == "failed" and record.error["message"] == info.value.message
    assert transfer_end(info.value) == {
        "transfer_id": record.id,
        "transfer_key": "dst-error",
        "state": "failed",
        "error": record.error,
    }


# --- signals ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sig", "what"), [(signal.SIGINT, "interrupted (SIGINT, Ctrl-C)"), (signal.SIGTERM, "stopped by SIGTERM")]
)
def test_a_signalled_copy_ends_interrupted_and_stops_counting(sig, what, sshd, many_files, remote_dir, store):
    from airflow_transfer.plugins import views

    key = f"signalled-{sig.name}"
    args = ["copy", str(many_files), sshd.url(f"{remote_dir}/dst"), "--store", store.masked_url]
    args += ["--transfer-key", key, "--pp", "2", "-c", "1", *ssh_args(sshd)]
    code = kill_cli_when(args, lambda: _done_files(store, key) >= 20, sig=sig)
    assert code == 130  # the CLI's "interrupted; re-run the same command" exit
    record = _only(store, key)
    assert record.state == "interrupted" and record.ended_at is not None
    assert record.error["kind"] == "interrupted" and record.error["what"] == what
    # The journal was flushed on the way out, and counts no file that is not in place. How far
    # the copy got before the signal is not asserted: bundled groups of up to 1,024 files can
    # land all 2,502 before it is handled on a fast machine.
    landed = [p for p in (remote_dir / "dst").rglob("*") if p.is_file() and not p.name.endswith(".atpart")]
    assert 20 <= _done_files(store, key) <= len(landed)
    later = record.ended_at + timedelta(hours=1)
    row = views.transfer_row(record, now=later)
    assert row["state"] == "interrupted" and row["duration_s"] == views.transfer_row(record)["duration_s"]


def test_a_sigkilled_copy_is_lost_after_its_lease_and_a_resume_takes_it_over(sshd, many_files, remote_dir, store):
    from airflow_transfer.plugins import views

    key = "killed"
    dst = remote_dir / "dst"
    args = ["copy", str(many_files), sshd.url(str(dst)), "--store", store.masked_url]
    args += ["--transfer-key", key, "--pp", "2", "-c", "1", *ssh_args(sshd)]
    kill_cli_when(args, lambda: _done_files(store, key) >= 20)
    record = _only(store, key)
    assert record.state == "running" and record.ended_at is None and record.heartbeat_at is not None

    # Nobody could write an end: the heartbeat is the only sign. Within the lease it runs ...
    seen = record.last_seen
    assert record.current_state(seen + timedelta(seconds=S.LEASE_S - 1)) == "running"
    # ... past it, it is lost, in the records, the store's filter and the UI's rows.
    past = seen + timedelta(seconds=S.LEASE_S + 1)
    assert record.current_state(past) == "lost"
    assert [r.id for r in store.list_transfers(state="lost", now=past)] == [record.id]
    assert store.list_transfers(state="running", now=past) == []
    row = views.list_transfers(store, state="lost", now=past)["transfers"][0]
    assert row["state"] == "lost" and row["error"]["kind"] == "lost"
    assert row["duration_s"] == (seen - record.started_at).total_seconds()  # stops at its last heartbeat

    # Let the lease run out (as if the minutes had passed), then run the same copy again.
    old = utcnow() - timedelta(seconds=2 * S.LEASE_S)
    store.write(lambda c: c.execute(update(S.transfers).where(S.transfers.c.id == record.id).values(heartbeat_at=old)))
    res = run_cli(*args, "--json")
    assert res.code == 0, res.err[-2000:]
    assert f"transfer {record.id} had no heartbeat for its lease" in res.err
    again = _only(store, key)
    assert again.id == record.id and again.attempts == 2
    assert again.state == "succeeded" and again.error is None and res.summary["transfer_id"] == record.id
    assert tree_digest(dst) == tree_digest(many_files)


# --- the lease in the store -----------------------------------------------------


def test_the_heartbeat_renews_the_lease_until_the_transfer_ends(store_url):
    with Store.open(store_url) as store:
        record = store.begin_transfer("beating", "file:///a", "file:///b")
        with store.heartbeat(record.id, interval_s=3600) as heart:  # renewals by hand: no waiting
            assert heart.beat() is True
            renewed = store.get_transfer(record.id)
            assert renewed.heartbeat_at > record.heartbeat_at and renewed.updated_at == record.updated_at
            store.finish_transfer(record.id, "succeeded", {"files": 0})
            assert heart.beat() is False  # an ended transfer has no lease to keep
        assert store.get_transfer(record.id).heartbeat_at == renewed.heartbeat_at


def test_a_resume_takes_over_failed_interrupted_and_lost_transfers(store_url):
    with Store.open(store_url) as store:
        first = store.begin_transfer("k", "file:///a", "file:///b")
        error = {"kind": "auth", "what": "refused", "where": "h", "todo": "fix", "message": "refused (h): fix"}
        store.finish_transfer(first.id, "failed", error=error)
        assert store.get_transfer(first.id).error == error
        second = store.begin_transfer("k", "file:///a", "file:///b")
        assert (second.id, second.resumed_from, second.error) == (first.id, "failed", None)
        store.finish_transfer(first.id, "interrupted", error={**error, "kind": "interrupted"})
        assert store.begin_transfer("k", "file:///a", "file:///b").resumed_from == "interrupted"
        old = utcnow() - timedelta(seconds=2 * S.LEASE_S)
        store.write(lambda c: c.execute(update(S.transfers).values(heartbeat_at=old)))
        taken = store.begin_transfer("k", "file:///a", "file:///b")
        assert (taken.id, taken.resumed_from, taken.attempts, taken.current_state()) == (first.id, "lost", 4, "running")
        with pytest.raises(ValueError, match="finishes as one of"):
            store.finish_transfer(first.id, "lost")


def test_migration_5_takes_the_last_update_of_older_rows_as_their_heartbeat(store_url):
    from airflow_transfer.store.connection import make_engine

    engine = make_engine(store_url)
    try:
        migrate(engine, url_for_errors=store_url, steps=STEPS[:4])
        then = utcnow() - timedelta(days=1)
        with engine.begin() as conn:
            conn.execute(_v4_insert(then))
    finally:
        engine.dispose()
    with Store.open(store_url) as store:
        (old,) = store.list_transfers()
        assert old.heartbeat_at == old.updated_at and old.error is None
        assert old.current_state() == "lost"  # a day without a heartbeat: its process is long gone


def _v4_insert(then):
    """The row as version 4 knew it (no heartbeat_at, no error)."""
    from sqlalchemy import Column, Integer, MetaData, String, Table, Text

    from airflow_transfer.store.coltypes import UTCDateTime

    v4 = Table(
        "at_transfers",
        MetaData(),
        Column("id", Integer, primary_key=True),
        Column("key", String(512)),
        Column("src_url", Text),
        Column("dst_url", Text),
        Column("state", String(16)),
        Column("attempts", Integer),
        Column("started_at", UTCDateTime),
        Column("updated_at", UTCDateTime),
    )
    return v4.insert().values(
        key="old",
        src_url="file:///a",
        dst_url="file:///b",
        state="running",
        attempts=1,
        started_at=then,
        updated_at=then,
    )


# --- the Airflow layer --------------------------------------------------------------


def test_task_errors_speak_of_connections_and_fail_fast_only_when_a_retry_cannot_help(sshd, local_dir):
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_transfer.errors import ConnectError, UsageError
    from airflow_transfer.operators.failures import task_error
    from airflow_transfer.protocols.ssh import open_transport

    empty = local_dir / "known_hosts"
    empty.write_text("")
    errors = {}
    for name, target in (
        ("host_key", sshd.target(known_hosts=[str(empty)])),
        ("auth", sshd.target(key_filenames=[str(sshd.other_key)], look_for_keys=False, allow_agent=False)),
        ("connect", sshd.target(port=free_port())),
    ):
        with pytest.raises(TransferError) as info:
            open_transport(target)
        errors[name] = info.value
    assert isinstance(errors["host_key"], HostKeyError) and "--known-hosts" in errors["host_key"].todo
    assert isinstance(errors["connect"], ConnectError)

    for name in ("host_key", "auth"):
        raised = task_error(errors[name])
        assert type(raised) is AirflowFailException, name
        assert "--" not in str(raised) and "connection's" in str(raised), str(raised)
    assert "extra `host_key`" in str(task_error(errors["host_key"]))
    assert type(task_error(errors["connect"])) is RuntimeError  # the server may be up on the next try
    usage = task_error(UsageError("unknown checksum 'x'", "", "use --verify none to turn verification off"))
    assert type(usage) is AirflowFailException and "use `verify=None` to turn verification off" in str(usage)


@pytest.mark.airflow
def test_a_host_key_error_fails_the_task_on_its_first_try_while_a_refused_port_is_retried(
    airflow_home, sshd, local_dir, tmp_path
):
    import json

    src = make_tree(local_dir / "src", small=3, seed=65)
    empty = local_dir / "known_hosts"
    empty.write_text("")
    store_url = f"sqlite:///{tmp_path / 'store.db'}"

    def conn(port: int, known_hosts: Path) -> str:
        extra = {"key_file": str(sshd.client_key), "known_hosts": str(known_hosts)}
        return json.dumps({"conn_type": "sftp", "host": sshd.host, "port": port, "login": sshd.user, "extra": extra})

    env = {
        "AIRFLOW_CONN_AT_UNKNOWN_KEY": conn(sshd.port, empty),
        "AIRFLOW_CONN_AT_REFUSED": conn(free_port(), sshd.known_hosts),
        "AT_LIFECYCLE_SRC": str(src),
        "AT_LIFECYCLE_DST": str(local_dir / "never"),
        "AIRFLOW__AIRFLOW_TRANSFER__STORE_URL": store_url,
        "AIRFLOW__CORE__DAGS_FOLDER": str(LIFECYCLE_DAGS.parent),
    }
    result, log = run_dag(airflow_home, LIFECYCLE_DAGS, "test_lifecycle_fail_fast", {}, extra_env=env)
    assert result["tasks"]["unknown_host_key"].endswith("failed"), log[-4000:]
    assert result["tries"]["unknown_host_key"] == 1  # retries=3, yet no retry: AirflowFailException
    assert result["tries"]["refused"] == 4 and result["tasks"]["refused"].endswith("failed")  # 1 + 3 retries
    assert "AirflowFailException" in log and "extra `host_key`" in log and "--known-hosts" not in log

    end = result["xcom"]["unknown_host_key.transfer"]
    assert end["state"] == "failed" and end["error"]["kind"] == "host_key"
    with Store.open(store_url) as store:
        record = store.get_transfer(end["transfer_id"])
        assert record.state == "failed" and record.error == end["error"]
        assert "extra `host_key`" in record.error["todo"]  # the UI shows an Airflow transfer's hint for Airflow
        assert record.key == end["transfer_key"] and record.key.startswith("airflow:test_lifecycle_fail_fast/")


@pytest.mark.airflow
def test_a_task_airflow_stops_with_sigterm_ends_its_transfer_interrupted(
    airflow_home, sshd, many_files, remote_dir, tmp_path
):
    import os
    import time

    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    env = {
        **sftp_conn_env("at_lifecycle_sftp", sshd),
        "AT_LIFECYCLE_SRC": str(many_files),
        "AT_LIFECYCLE_DST": str(remote_dir / "dst"),
        "AIRFLOW__AIRFLOW_TRANSFER__STORE_URL": store_url,
        "AIRFLOW__CORE__DAGS_FOLDER": str(LIFECYCLE_DAGS.parent),
    }
    prefix = "airflow:test_lifecycle_killed/copy/"
    with Store.open(store_url) as store:
        run = start_dag(airflow_home, LIFECYCLE_DAGS, "test_lifecycle_killed", {}, extra_env=env)
        deadline = time.monotonic() + 300
        records: list[TransferRecord] = []
        while time.monotonic() < deadline and run.proc.poll() is None:
            records = store.list_transfers(key_prefix=prefix)
            if records and store.journal_counts(records[0].id).get("done", {}).get("files", 0) >= 20:
                break
            time.sleep(0.05)
        assert run.proc.poll() is None and records, (
            "the copy ended before it could be stopped:\n" + "".join(run.lines)[-4000:]
        )
        # what Airflow's supervisor sends on a timeout or when the task is marked failed
        os.kill(run.proc.pid, signal.SIGTERM)
        result, log = run.result()
        record = store.get_transfer(records[0].id)
    assert result["tasks"]["copy"].endswith("failed"), log[-4000:]
    assert record.state == "interrupted" and record.ended_at is not None
    assert record.error["what"] == "stopped by SIGTERM: Airflow is stopping the task"
    end = result["xcom"]["copy.transfer"]
    assert (end["transfer_id"], end["state"], end["error"]) == (record.id, "interrupted", record.error)


def test_sensors_defer_by_default_only_where_airflow_is_configured_so(monkeypatch, local_dir):
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_transfer.sensors.protocols import ProtocolAvailableSensor
    from airflow_transfer.sensors.stable import DatasetStableSensor
    from airflow_transfer.triggers.stable import DatasetStableTrigger

    def built():
        return (
            DatasetStableSensor(task_id="stable", src=str(local_dir), stable_for=0),
            ProtocolAvailableSensor(task_id="proto", host="127.0.0.1", protocols=["sftp"]),
        )

    monkeypatch.delenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", raising=False)
    assert [s.deferrable for s in built()] == [False, False]  # Airflow's default: False
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    stable, proto = built()
    assert stable.deferrable and proto.deferrable
    with pytest.raises(TaskDeferred) as deferred:
        stable.execute({})
    assert isinstance(deferred.value.trigger, DatasetStableTrigger)
    assert DatasetStableSensor(task_id="s", src=str(local_dir), deferrable=False).deferrable is False
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "False")
    assert [s.deferrable for s in built()] == [False, False]
    assert DatasetStableSensor(task_id="s", src=str(local_dir), deferrable=True).deferrable is True


@pytest.mark.airflow
@pytest.mark.parametrize("dag_id", ["test_lifecycle_chunk_fails", "test_lifecycle_chunk_retried"])
def test_a_chunk_that_fails_for_good_ends_the_shared_transfer_failed(
    dag_id, airflow_home, sshd, local_dir, remote_dir, tmp_path
):
    src = make_tree(local_dir / "src", small=6, seed=66)
    locked = remote_dir / "locked"
    locked.mkdir()
    locked.chmod(0o755)  # owned by the test's user: the sshd's login cannot write into it
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    env = {
        **sftp_conn_env("at_lifecycle_sftp", sshd),
        "AT_LIFECYCLE_SRC": str(src),
        "AT_LIFECYCLE_DST": str(locked / "dst"),
        "AIRFLOW__AIRFLOW_TRANSFER__STORE_URL": store_url,
        "AIRFLOW__CORE__DAGS_FOLDER": str(LIFECYCLE_DAGS.parent),
    }
    result, log = run_dag(airflow_home, LIFECYCLE_DAGS, dag_id, {}, extra_env=env)
    moves = {k: v for k, v in result["tasks"].items() if k.startswith("move[")}
    assert len(moves) == 2 and all(v.endswith("failed") for v in moves.values()), (result["tasks"], log[-4000:])
    assert {result["tries"][k] for k in moves} == {1 if dag_id.endswith("fails") else 2}
    assert not result["tasks"]["verify"].endswith("success")  # it never ran: nothing else closes the record

    with Store.open(store_url) as store:
        (record,) = store.list_transfers(key_prefix=f"airflow:{dag_id}/")
    assert record.state == "failed" and record.ended_at is not None, record
    assert record.error["chunk"] in {"chunk-001-of-002", "chunk-002-of-002"}, record.error
    assert record.error["what"].startswith(f"chunk {record.error['chunk']}: ")
    assert "ermission denied" in record.error["message"], record.error
    if dag_id.endswith("retried"):
        # between the two tries of each chunk the transfer was still running: a retry could finish it
        between = [line.split()[-1] for line in log.splitlines() if line.startswith("@@BETWEEN-TRIES@@")]
        assert between and set(between) == {"running"}, log[-4000:]
