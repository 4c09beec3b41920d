"""Smoke test of the benchmark harness (benchmarks/run.py): one tiny round on the emulated lan link.

Real contenders (airflow-transfer untuned, OpenSSH sftp, and lftp's mirror both
ways) move 10 files of 64 KiB between `src` and a real sshd in `dst`; the results
must follow the schema of docs/summary.md exactly and the report must name every row.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.wan import require_wan

REPO = Path(__file__).resolve().parents[1]
# The rows' rates are only checked to lie between 0 and the link's rate, which a loaded machine
# keeps: it runs beside the other tests rather than in the serial WAN phase.
WAN_PARALLEL_OK = True
RUN_KEYS = {
    "dataset": str,
    "link": str,
    "contender": str,
    "repetitions": int,
    "median_mbit": float,
    "min_mbit": float,
    "max_mbit": float,
    "link_mbit": float,
    "cpu_s": float,
    "peak_rss_mb": float,
    "verified": bool,
    "cpu_s_per_gib": float,
    "cpu_s_per_1000_files": float,
}
CONTENDERS = ("airflow-transfer untuned (pp=1 p=1 cc=1)", "OpenSSH sftp -b (put -r)")
LFTP = ("lftp mirror -R --parallel=16 --use-pget-n=4", "lftp download mirror --parallel=16 --use-pget-n=4")


@pytest.fixture
def scratch() -> Iterator[Path]:
    # Not pytest's tmp_path: that is private to root (0700) and the sshd's unprivileged user must reach it.
    path = Path(tempfile.mkdtemp(prefix="at-bench-smoke-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def runner_env(scratch: Path) -> dict[str, str]:
    """The environment benchmarks.run gets here: this checkout importable, its scratch space under `scratch`."""
    return {**os.environ, "PYTHONPATH": str(REPO), "AIRFLOW_TRANSFER_BENCH_WORK": str(scratch / "work")}


def test_one_tiny_round_writes_the_documented_schema(scratch: Path) -> None:
    require_wan()
    tmp_path = scratch
    out = tmp_path / "results"
    env = runner_env(tmp_path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.run",
            "--profile",
            "lan",
            "--datasets",
            "tiny",
            "--files",
            "10",
            "--reps",
            "1",
            "--contenders",
            ",".join(CONTENDERS + LFTP),
            "--out",
            str(out),
            "--cache",
            str(tmp_path / "ds"),
            "--no-charts",
            "--timeout",
            "60",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rep 1/1 OpenSSH sftp -b (put -r): " in done.stderr  # a progress line per run
    assert "skipping" not in done.stderr  # every contender could run (lftp installed by the setup scripts)

    latest = json.loads((out / "latest.json").read_text())
    assert set(latest) == {"date", "machine", "commit", "runs"}
    assert all(isinstance(latest[k], str) and latest[k] for k in ("date", "machine", "commit"))
    assert sorted(r["contender"] for r in latest["runs"]) == sorted(CONTENDERS + LFTP)
    for row in latest["runs"]:
        assert set(row) == set(RUN_KEYS), row
        for key, kind in RUN_KEYS.items():
            assert isinstance(row[key], kind), (key, row[key])
        assert row["dataset"] == "tiny-n10" and row["link"] == "lan" and row["link_mbit"] == 1000.0
        assert row["repetitions"] == 1
        assert 0 < row["min_mbit"] <= row["median_mbit"] <= row["max_mbit"] < row["link_mbit"]
        assert row["cpu_s"] > 0 and row["peak_rss_mb"] > 1
        assert row["verified"] is True  # every file's digest was compared
        # 10 files of 64 KiB: the CPU per 1000 files is 100 times the run's, per GiB 1638.4 times
        # (from the unrounded median; cpu_s itself is rounded to 0.01 s).
        assert abs(row["cpu_s_per_1000_files"] / 100 - row["cpu_s"]) <= 0.0051
        assert abs(row["cpu_s_per_gib"] / row["cpu_s_per_1000_files"] - 16.384) < 0.01

    details = json.loads((out / "latest-details.json").read_text())
    assert [r["ok"] for r in details["runs"]] == [True] * 4
    assert {r["contender"]: r["direction"] for r in details["runs"]}[LFTP[1]] == "download"
    assert all(r["server_cpu_s"] >= 0 for r in details["runs"])
    report = (out / "report.md").read_text()
    assert all(name in report for name in CONTENDERS + LFTP)
    assert "| CPU s/GiB | CPU s/1000 files |" in report
    assert latest["commit"][:12] in report
    # Destinations were emptied after each run; the testbed's scratch space is gone with the link.
    assert not any((tmp_path / "work").iterdir())


def test_resume_runs_only_the_missing_cells_and_the_budget_stops_early(scratch: Path) -> None:
    require_wan()
    out = scratch / "results"
    env = runner_env(scratch)
    one = CONTENDERS[1]

    def bench(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.run",
                "--profile",
                "lan",
                "--datasets",
                "tiny",
                "--files",
                "5",
                "--contenders",
                one,
                "--out",
                str(out),
                "--cache",
                str(scratch / "ds"),
                "--no-charts",
                "--timeout",
                "60",
                *extra,
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )

    first = bench("--reps", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    # A tiny budget still makes one run (so repeated calls progress), then stops.
    second = bench("--reps", "3", "--resume", "--budget-min", "0.0001")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "1 earlier runs kept, 2 to run" in second.stderr
    assert "time budget" in second.stderr
    details = json.loads((out / "latest-details.json").read_text())
    assert sorted(r["rep"] for r in details["runs"]) == [1, 2]  # rep 1 kept, rep 2 run, rep 3 left
    assert all(r.get("commit") for r in details["runs"][1:])
    report = (out / "report.md").read_text()
    assert "2 of 3 repetitions made" in report and "continues the matrix" in report
    third = bench("--reps", "3", "--resume")
    assert third.returncode == 0, third.stderr[-3000:]
    details = json.loads((out / "latest-details.json").read_text())
    assert sorted(r["rep"] for r in details["runs"]) == [1, 2, 3]
    assert json.loads((out / "latest.json").read_text())["runs"][0]["repetitions"] == 3
    assert "repetitions made" not in (out / "report.md").read_text()


def test_a_run_stopped_at_the_time_limit_is_reported_not_failed(scratch: Path) -> None:
    # Over 50 ms of RTT the one-file-at-a-time row needs at least two round trips per file, so 40 files
    # take 4 s or more whatever the CPU (on a quiet lan link it finished them in 0.9 s): the run must be
    # stopped at 1 s, recorded as such, and the call must still succeed, as `make bench` relies on.
    require_wan()
    out = scratch / "results"
    env = runner_env(scratch)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.run",
            "--profile",
            "wan50",
            "--datasets",
            "tiny",
            "--files",
            "40",
            "--reps",
            "1",
            "--contenders",
            CONTENDERS[0],
            "--out",
            str(out),
            "--cache",
            str(scratch / "ds"),
            "--no-charts",
            "--timeout",
            "1",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "stopped at the 1 s limit" in done.stderr and "FAILED" not in done.stderr
    assert "1 runs stopped at the time limit" in done.stderr
    [run] = json.loads((out / "latest-details.json").read_text())["runs"]
    assert run["ok"] is False and run["timed_out"] is True
    assert "stopped" in (out / "report.md").read_text()


def test_scaled_datasets_keep_their_shape() -> None:
    from benchmarks.datasets import resolve

    small, large = resolve(["small", "large"], scale=0.2)
    assert (small.files, small.size) == (200, 1 << 20)  # fewer files of the same size
    assert large.files == 2 and abs(large.size - 0.2 * (512 << 20)) <= 1024  # the same files, smaller
    with pytest.raises(ValueError):
        resolve(["small"], scale=0)
