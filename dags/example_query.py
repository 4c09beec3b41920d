"""Example: attribute-based access, paper 004's `select temperature, time where humidity > 50`.

    airflow dags test example_query -c '{"src": "/data/climate.parquet", "dst": "/data/out/hot.parquet"}'

With `src_conn_id` set, `src` is a path on that SFTP host and only the needed
column chunks of the row groups that can match are read from it. The task
returns the query summary (rows, bytes read at the source, bytes written,
sha256 of the output) as XCom.
"""

from __future__ import annotations

import os

from airflow.sdk import DAG, Param

from airflow_transfer.operators.query import AttributeQueryTransferOperator

with DAG(
    dag_id="example_query",
    schedule=None,
    catchup=False,
    tags=["airflow-transfer", "example"],
    params={
        "src": Param(os.environ.get("AT_QUERY_SRC", "/tmp/airflow-transfer-demo/climate.parquet"), type="string"),
        "dst": Param(os.environ.get("AT_QUERY_DST", "/tmp/airflow-transfer-demo/humid.parquet"), type="string"),
        "src_conn_id": Param(os.environ.get("AT_QUERY_CONN", ""), type="string"),
        "where": Param("humidity > 50", type="string"),
    },
) as dag:
    AttributeQueryTransferOperator(
        task_id="query_dataset",
        src="{{ params.src }}",
        dst="{{ params.dst }}",
        src_conn_id="{{ params.src_conn_id }}",  # empty: src is local
        select=["temperature", "time"],
        where="{{ params.where }}",
        format="parquet",
    )
