"""The example DAG runs in real Airflow (dag.test()) against the real sshd."""

from __future__ import annotations

from tests.support.airflow_env import REPO, run_dag, sftp_conn_env
from tests.support.data import make_tree, temp_files, tree_digest

DESIGN_FIELDS = {
    "files",
    "bytes",
    "seconds",
    "throughput_mbit",
    "algorithm",
    "verify",
    "chunks",
    "protocol_switches",
    "tuning",
    "failed",
}


def test_example_dag_copies_and_returns_summary(airflow_home, sshd, remote_dir, local_dir):
    src = make_tree(local_dir / "dag-src", small=50, seed=21)
    result, log = run_dag(
        airflow_home,
        REPO / "dags" / "example_sftp_copy.py",
        "example_sftp_copy",
        {"src": str(src), "dst": str(remote_dir / "out"), "conn_id": "at_test_sftp", "algorithm": "fixed"},
        extra_env=sftp_conn_env("at_test_sftp", sshd),
    )
    assert result["state"].endswith("success"), log[-4000:]
    summary = result["xcom"]["copy_dataset.return_value"]
    assert DESIGN_FIELDS <= set(summary)
    assert summary["files"] == 52 and summary["failed"] == []
    chunk = summary["chunks"][0]
    assert {"id", "files", "bytes", "pp", "p", "cc", "seconds", "throughput_mbit"} <= set(chunk)
    assert (chunk["pp"], chunk["p"], chunk["cc"]) == (8, 2, 4)
    assert "path" not in str(summary.get("chunks"))  # no file lists in XCom
    assert tree_digest(remote_dir / "out") == tree_digest(src)
    assert temp_files(remote_dir) == []
    assert "Mbit/s, ETA" in log  # progress lines reached the task log


def test_example_dag_tuned_by_auto(airflow_home, sshd, remote_dir, local_dir):
    src = make_tree(local_dir / "dag-auto", small=80, seed=23)
    result, log = run_dag(
        airflow_home,
        REPO / "dags" / "example_sftp_copy.py",
        "example_sftp_copy",
        {"src": str(src), "dst": str(remote_dir / "auto"), "conn_id": "at_test_sftp"},
        extra_env=sftp_conn_env("at_test_sftp", sshd),
    )
    assert result["state"].endswith("success"), log[-4000:]
    summary = result["xcom"]["copy_dataset.return_value"]
    assert summary["algorithm"] == "auto" and summary["chunks"]
    # auto's first contact measured the RTT and ramped concurrency (from scratch, or from the row an
    # earlier test's copy to this sshd left in the shared store)
    notes = "\n".join(summary["tuning"]["notes"])
    assert "auto chose first-contact" in notes and "first contact: RTT" in notes, notes
    assert "first contact: start at cc" in notes, notes
    assert tree_digest(remote_dir / "auto") == tree_digest(src)


def test_failed_files_fail_the_task(airflow_home, sshd, test_base, local_dir):
    src = make_tree(local_dir / "dag-src2", small=3, seed=22)
    locked = test_base / "dag-locked"
    locked.mkdir(exist_ok=True)
    result, log = run_dag(
        airflow_home,
        REPO / "dags" / "example_sftp_copy.py",
        "example_sftp_copy",
        {"src": str(src), "dst": str(locked / "out"), "conn_id": "at_test_sftp"},
        extra_env=sftp_conn_env("at_test_sftp", sshd),
    )
    assert result["tasks"]["copy_dataset"].endswith("failed")
    assert "permission denied" in log


def test_airflow_discovers_the_provider(airflow_home):
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "get", "airflow-transfer", "-o", "json"],
        env=airflow_home,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    info = json.loads(proc.stdout[proc.stdout.index("[") :])
    assert info[0]["Provider"] == "airflow-transfer" and info[0]["Version"] == "0.1.0"
