"""Smoke test of benchmarks/query_bench.py: one tiny size on the emulated lan link, every method once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.wan import require_wan

REPO = Path(__file__).resolve().parents[1]
# It checks rows, bytes and names, not rates: it runs beside the other tests rather than in the
# serial WAN phase (its link's namespaces carry this process's pid, so they cannot collide).
WAN_PARALLEL_OK = True


def test_query_bench_tiny_round():
    require_wan()
    scratch = Path(tempfile.mkdtemp(prefix="at-qbench-"))
    os.chmod(scratch, 0o755)
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.query_bench",
                "--sizes",
                "3000",
                "--reps",
                "1",
                "--profile",
                "lan",
                "--out",
                str(scratch / "results"),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "AIRFLOW_TRANSFER_BENCH_DATA": str(scratch / "data")},
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads((scratch / "results" / "query.json").read_text())
        runs = {r["method"]: r for r in result["runs"]}
        assert set(runs) == {"copy+filter", "query CSV", "query Parquet"}
        for r in runs.values():
            assert r["ok"] == 1 and r["records"] == 3000 and r["same_result"]
        rows = runs["query CSV"]["rows_out"]
        assert 0 < rows < 3000 and runs["query Parquet"]["rows_out"] == rows
        assert runs["copy+filter"]["bytes_read"] == runs["copy+filter"]["csv_bytes"]
        assert runs["query Parquet"]["bytes_read"] < runs["query CSV"]["bytes_read"]
        md = (scratch / "results" / "query.md").read_text()
        assert "| 3,000 |" in md and "query Parquet" in md
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
