"""The provider's operators, sensor and example DAGs in real Airflow (dag.test()) against the real sshd."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

from tests.support.airflow_env import REPO, run_dag, sftp_conn_env, start_dag
from tests.support.data import make_tree, temp_files, tree_digest, write_random
from tests.support.sshd import chown_to_user

REPLICATION = REPO / "dags" / "example_instrument_replication.py"
PIPELINE = REPO / "dags" / "example_science_pipeline.py"
TEST_DAGS = {"AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "tests" / "dags")}  # dag.test() needs the file in the bundle

_INTEGRITY = r"""
import json, sys, warnings
warnings.simplefilter("error")  # a deprecation warning while parsing is an import error
from airflow.dag_processing.dagbag import DagBag
from airflow.serialization.serialized_objects import DagSerialization
bag = DagBag(dag_folder=sys.argv[1])
out = {"errors": {k: str(v)[-500:] for k, v in bag.import_errors.items()},
       "warnings": {k: list(v) for k, v in bag.captured_warnings.items()},
       "dags": {d.dag_id: d.fileloc for d in bag.dags.values()}}
for dag in bag.dags.values():
    DagSerialization.serialize_dag(dag)  # what the dag-processor stores
print("@@" + json.dumps(out))
"""


def test_every_dag_imports_without_errors_or_warnings(airflow_home):
    proc = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", _INTEGRITY, str(REPO / "dags")],
        env=airflow_home,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(next(line[2:] for line in proc.stdout.splitlines() if line.startswith("@@")))
    assert out["errors"] == {} and out["warnings"] == {}
    files = {os.path.basename(p) for p in out["dags"].values()}
    dag_files = {p.name for p in (REPO / "dags").glob("*.py") if not p.name.startswith("_")}
    assert files == dag_files  # every file in dags/ holds a DAG
    assert {"example_instrument_replication", "example_science_pipeline", "example_sftp_copy"} <= set(out["dags"])


def _why(log: str) -> str:
    """The error lines of a failed run first, then the tail of its log."""
    with open(os.path.join(os.environ.get("TMPDIR", "/tmp"), "at-failed-dag-run.log"), "w") as f:
        f.write(log)  # the whole log, for a look after the test
    errors = [line for line in log.splitlines() if "error" in line.lower() or "Traceback" in line]
    return "\n".join(errors[-40:]) + "\n...\n" + log[-3000:]


def _appender(path, stop: threading.Event, sizes: list[int]) -> threading.Thread:
    def run():
        with open(path, "ab") as f:
            while not stop.is_set():
                f.write(os.urandom(4096))
                f.flush()
                sizes.append(f.tell())
                time.sleep(0.2)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_replication_waits_for_stable_source_then_chunks_match_one_task(airflow_home, sshd, remote_dir, local_dir):
    src = make_tree(remote_dir / "instrument", small=70, big_mib=9, seed=41)
    growing = src / "run-0001" / "frames.raw"
    growing.parent.mkdir()
    chown_to_user(src, sshd.user)
    stop, sizes = threading.Event(), []
    writer = _appender(growing, stop, sizes)
    archive = local_dir / "archive"
    conn = sftp_conn_env("at_instrument", sshd)
    env = {
        **conn,
        "AT_INSTRUMENT_POLL": "0.5",
        "AT_INSTRUMENT_ARCHIVE": str(archive),
        "AT_INSTRUMENT_CHUNK_CC": "2",
        "AIRFLOW__AIRFLOW_TRANSFER__STAGING_DIR": str(local_dir / "staging"),
    }
    run = start_dag(
        airflow_home,
        REPLICATION,
        "example_instrument_replication",
        {
            "src": str(src),
            "conn_id": "at_instrument",
            "dst": str(archive),
            "stable_for": 2,
            "algorithm": "fixed",
            "min_chunks": 3,
        },
        extra_env=env,
    )
    try:
        # The sensor deferred and its trigger runs while the file still grows.
        assert run.wait_for("running trigger in line", timeout=240), "".join(run.lines)[-4000:]
        time.sleep(4)  # > stable_for: a sensor that ignored the growth would fire now
    finally:
        stop.set()
        writer.join()
    result, log = run.result(timeout=600)
    assert result["state"].endswith("success"), _why(log)
    event = result["xcom"]["wait_until_stable.return_value"]
    final_size = growing.stat().st_size
    assert event["changes"] >= 1  # it saw the file grow and kept waiting
    info = result["xcom"]["manifest.return_value"]
    assert info["files"] == 74 and event["files"] == 74 and event["bytes"] == info["bytes"]
    assert final_size == sizes[-1]
    assert sum(h["files"] for h in info["histogram"]) == 74

    plan = result["xcom"]["plan.return_value"]
    assert len(plan) == 3 and all("path" not in json.dumps(s) for s in plan)
    chunks = [result["xcom"][f"transfer_chunk[{i}].return_value"] for i in range(3)]
    assert sum(c["files"] for c in chunks) == 74 and all(c["failed"] == [] for c in chunks)
    assert all(c["chunks"][0]["cc"] <= 2 for c in chunks)  # max_cc: the pool pattern's cap
    assert len({c["transfer_id"] for c in chunks}) == 1
    verify = result["xcom"]["verify.return_value"]
    assert verify["verify"]["ok"] and verify["verify"]["verified"] == 74 and verify["verify"]["mismatched"] == 0
    assert verify["summary"]["files"] == 74 and len(verify["summary"]["chunks"]) == 3
    assert tree_digest(archive) == tree_digest(src)
    assert temp_files(archive) == []
    assert "Mbit/s, ETA" in log and "transfer summary (all chunks)" in log

    # The same tree moved by one TunedTransferOperator task gives the same bytes.
    single = local_dir / "single"
    res2, log2 = run_dag(
        airflow_home,
        REPO / "tests" / "dags" / "single_download.py",
        "test_single_download",
        {"src": str(src), "conn_id": "at_instrument", "dst": str(single)},
        extra_env={**conn, **TEST_DAGS},
    )
    assert res2["state"].endswith("success"), _why(log2)
    assert tree_digest(single) == tree_digest(archive)

    # The pipeline scheduled on the archive Asset indexes it and publishes the products over SFTP.
    results = remote_dir / "results"
    results.mkdir()
    chown_to_user(results, sshd.user)
    res3, log3 = run_dag(
        airflow_home,
        PIPELINE,
        "example_science_pipeline",
        {
            "archive": str(archive),
            "products": str(local_dir / "products"),
            "results_conn_id": "at_instrument",
            "results_dst": str(results / "run"),
        },
        extra_env={**conn, "AT_INSTRUMENT_ARCHIVE": str(archive)},
    )
    assert res3["state"].endswith("success"), _why(log3)
    index = json.loads((results / "run" / "index.json").read_text())
    assert len(index) == 74 and res3["xcom"]["index_archive.return_value"]["files"] == 74
    assert {e["path"]: e["sha256"] for e in index} == {k: v for k, v in tree_digest(archive).items() if v != "dir"}


def test_verify_task_repairs_a_damaged_archive(airflow_home, sshd, remote_dir, local_dir):
    src = make_tree(remote_dir / "inst-r", small=20, seed=43)
    chown_to_user(src, sshd.user)
    archive = local_dir / "archive-r"
    conn = sftp_conn_env("at_instrument", sshd)
    env = {**conn, "AT_INSTRUMENT_POLL": "0.2", "AT_INSTRUMENT_ARCHIVE": str(archive)}
    conf = {
        "src": str(src),
        "conn_id": "at_instrument",
        "dst": str(archive),
        "stable_for": 0,
        "algorithm": "globus",
        "min_chunks": 2,
    }
    first, log = run_dag(airflow_home, REPLICATION, "example_instrument_replication", conf, extra_env=env)
    assert first["state"].endswith("success"), _why(log)
    victim = archive / "d3" / "e0" / "f0003.dat"
    victim.write_bytes(b"\0" + victim.read_bytes()[1:])
    os.utime(victim, (victim.stat().st_atime, (src / "d3" / "e0" / "f0003.dat").stat().st_mtime))
    second, log = run_dag(airflow_home, REPLICATION, "example_instrument_replication", conf, extra_env=env)
    assert second["state"].endswith("success"), _why(log)
    report = second["xcom"]["verify.return_value"]["verify"]
    # size and mtime matched, so the chunks skipped it; only the digests found it
    assert report["mismatched"] == 1 and report["repaired"] == 1 and report["found"][0]["path"] == "d3/e0/f0003.dat"
    assert tree_digest(archive) == tree_digest(src)


def test_sensor_without_deferral_pokes_until_stable(airflow_home, sshd, remote_dir):
    from airflow_transfer.sensors.stable import DatasetStableSensor  # noqa: F401 - importable without Airflow DB

    src = make_tree(remote_dir / "inst-p", small=3, seed=44)
    chown_to_user(src, sshd.user)
    write_random(src / "late.bin", 1000, 1)
    dag_file = REPO / "tests" / "dags" / "sensor_poke.py"
    res, log = run_dag(
        airflow_home,
        dag_file,
        "test_sensor_poke",
        {"src": str(src), "conn_id": "at_instrument"},
        extra_env={**sftp_conn_env("at_instrument", sshd), **TEST_DAGS},
    )
    assert res["state"].endswith("success"), _why(log)
    out = res["xcom"]["stable.return_value"]
    assert out["files"] == 6 and "running trigger in line" not in log
