"""AttributeQueryTransferOperator in real Airflow (dag.test()) against the real sshd."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from tests.support.airflow_env import REPO, run_dag, sftp_conn_env
from tests.support.climate import climate_table
from tests.support.sshd import chown_to_user

pytestmark = pytest.mark.airflow
DAG = REPO / "dags" / "example_query.py"


def test_operator_queries_an_sftp_source(airflow_home, sshd, remote_dir, local_dir):
    table = climate_table(50_000, seed=11)
    pq.write_table(table, remote_dir / "climate.parquet", row_group_size=16384)
    chown_to_user(remote_dir, sshd.user)
    out = local_dir / "humid.parquet"
    result, log = run_dag(
        airflow_home,
        DAG,
        "example_query",
        {
            "src": str(remote_dir / "climate.parquet"),
            "dst": str(out),
            "src_conn_id": "at_query_sftp",
            "where": "humidity > 50 and temperature < 20",
        },
        extra_env=sftp_conn_env("at_query_sftp", sshd),
    )
    assert result["state"].endswith("success"), log[-4000:]
    summary = result["xcom"]["query_dataset.return_value"]
    expected = [
        {"temperature": r["temperature"], "time": r["time"]}
        for r in table.to_pylist()
        if r["humidity"] > 50 and r["temperature"] < 20
    ]
    assert pq.read_table(out).to_pylist() == expected
    assert summary["rows"] == len(expected) and summary["columns"] == ["temperature", "time"]
    assert summary["source"].startswith("sftp://") and summary["bytes_read"] < summary["bytes_source"]
    assert "query summary:" in log


def test_operator_bad_where_fails_the_task(airflow_home, local_dir):
    src = local_dir / "c.parquet"
    pq.write_table(climate_table(100), src)
    result, log = run_dag(
        airflow_home,
        DAG,
        "example_query",
        {"src": str(src), "dst": str(local_dir / "o.parquet"), "where": "humidity >> 5"},
    )
    assert result["tasks"]["query_dataset"].endswith("failed")
    assert "bad where expression at character 11" in log
    assert not (local_dir / "o.parquet").exists()
