"""Example: copy a directory to an SFTP host, pp / p / cc tuned per chunk (or given).

Run it with real Airflow (what `make demo` does):

    airflow dags test example_sftp_copy -c '{"src": "/data/in", "dst": "/data/out"}'

`dst_conn_id` names an Airflow ssh/sftp connection (host, login, key_file and
known_hosts or host_key in extras). The task returns the transfer summary as
XCom: files, bytes, seconds, throughput and the chunks with their pp/p/cc.
"""

from __future__ import annotations

import os

from airflow.sdk import DAG, Param

from airflow_transfer.operators.transfer import TunedTransferOperator

with DAG(
    dag_id="example_sftp_copy",
    schedule=None,
    catchup=False,
    tags=["airflow-transfer", "example"],
    params={
        "src": Param(os.environ.get("AT_EXAMPLE_SRC", "/tmp/airflow-transfer-demo/src"), type="string"),
        "dst": Param(os.environ.get("AT_EXAMPLE_DST", "/tmp/airflow-transfer-demo/dst"), type="string"),
        "conn_id": Param(os.environ.get("AT_EXAMPLE_CONN", "at_demo_sftp"), type="string"),
        "algorithm": Param("auto", enum=["fixed", "globus", "pcp", "mc", "adaptive-cc", "auto"]),
    },
) as dag:
    TunedTransferOperator(
        task_id="copy_dataset",
        src="{{ params.src }}",
        dst="{{ params.dst }}",
        dst_conn_id="{{ params.conn_id }}",
        algorithm="{{ params.algorithm }}",  # "fixed" uses the three knobs below as given
        pp=8,
        parallelism=2,
        concurrency=4,
        progress_interval=2.0,
    )
