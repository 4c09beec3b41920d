"""Test DAG: one TunedTransferOperator task downloading a tree (the reference for mapped chunks)."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_transfer.operators.transfer import TunedTransferOperator

with DAG(dag_id="test_single_download", schedule=None, catchup=False) as dag:
    TunedTransferOperator(
        task_id="copy",
        src="{{ dag_run.conf['src'] }}",
        src_conn_id="{{ dag_run.conf['conn_id'] }}",
        dst="{{ dag_run.conf['dst'] }}",
        algorithm="fixed",
        pp=8,
        parallelism=2,
        concurrency=2,
    )
