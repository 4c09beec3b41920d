"""Test DAG for tests/test_secrets.py: an upload over a connection that logs in with a
password (its extra also holds a token), then a download over a connection whose
extra holds an encrypted private key and its passphrase."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_transfer.operators.transfer import TunedTransferOperator

with DAG(dag_id="test_secrets_transfer", schedule=None, catchup=False) as dag:
    up = TunedTransferOperator(
        task_id="upload",
        src="{{ dag_run.conf['src'] }}",
        dst="{{ dag_run.conf['remote'] }}",
        dst_conn_id="{{ dag_run.conf['password_conn'] }}",
        concurrency=2,
        progress_interval=0.2,
    )
    down = TunedTransferOperator(
        task_id="download",
        src="{{ dag_run.conf['remote'] }}",
        src_conn_id="{{ dag_run.conf['key_conn'] }}",
        dst="{{ dag_run.conf['back'] }}",
        algorithm="auto",
        concurrency=2,
        progress_interval=0.2,
    )
    up >> down
